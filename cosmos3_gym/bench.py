"""`cosmos3-gym bench`: our batched env against what users run today, side by side, one process.

``--cpu``: the vector env (one forward for all envs) against ``gymnasium.vector.SyncVectorEnv``
over single envs, same work, on the embedded tiny model.

GPU (default): the vector env against diffusers' ``Cosmos3OmniPipeline`` called once per
sample, on the same randomly initialised transformer at a real Cosmos 3 size; also the
transformer forward's TFLOP/s against a matmul peak measured in the same run, the env's
overhead over its bare batched forward + SDE math, peak memory, and the replayed log-prob
ratios of every rollout step. The last line is ``speedup_vs_<baseline>: <ratio>``.
"""

from __future__ import annotations

import functools
import platform
import time

import numpy as np
import torch

from .model import Cosmos3Model
from .packing import PackedRows
from .tiny_model import SCHEDULER_CONFIG, build_tiny_tokenizer

MODEL_CONFIGS = {
    "edge": dict(hidden_size=2048, num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8,
                 head_dim=128, intermediate_size=9216, hidden_act="relu2"),
    "nano": dict(hidden_size=4096, num_hidden_layers=36, num_attention_heads=32, num_key_value_heads=8,
                 head_dim=128, intermediate_size=12288, hidden_act="silu"),
}
COMMON_CONFIG = dict(latent_channel=48, latent_patch_size=2, patch_latent_dim=192)
# The Wan 2.2 VAE of Cosmos 3 (16x spatial, 4x temporal compression, 48 latent channels).
WAN22_VAE_CONFIG = dict(base_dim=160, decoder_base_dim=256, z_dim=48, dim_mult=[1, 2, 4, 4], num_res_blocks=2,
                        temperal_downsample=[False, True, True], is_residual=True, patch_size=2, in_channels=12, out_channels=12,
                        scale_factor_spatial=16, scale_factor_temporal=4,
                        latents_mean=[0.0] * 48, latents_std=[1.0] * 48)
PROMPT = "a red ball bounces to the right across a wooden floor"


def _sync(device):
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def _timed(fn, device, repeats: int = 1) -> float:
    """Mean wall seconds of ``fn()``, device work included."""
    _sync(device)
    start = time.perf_counter()
    for _ in range(repeats):
        fn()
    _sync(device)
    return (time.perf_counter() - start) / repeats


def random_model(model: str, device="cuda", dtype=torch.bfloat16, compile: bool | None = None
                     ) -> Cosmos3Model:
    """A Cosmos 3 generator at a real size with random weights (normal(0, 0.02), like HF init)."""
    from diffusers import AutoencoderKLWan, Cosmos3OmniTransformer, UniPCMultistepScheduler

    tokenizer = build_tiny_tokenizer()
    torch.manual_seed(0)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            transformer = Cosmos3OmniTransformer(**MODEL_CONFIGS[model], **COMMON_CONFIG)
            vae = AutoencoderKLWan(**WAN22_VAE_CONFIG)
    finally:
        torch.set_default_dtype(previous)
    with torch.no_grad():
        for name, parameter in transformer.named_parameters():
            if parameter.ndim >= 2:
                parameter.normal_(0.0, 0.02)
    return Cosmos3Model.from_components(transformer, vae, tokenizer, UniPCMultistepScheduler(**SCHEDULER_CONFIG),
                                            device=device, dtype=dtype, compile=compile)


def forward_flops(packed: PackedRows, config, text_cached: bool) -> float:
    """Multiply-adds x 2 of one transformer forward over ``packed`` (linear layers + attention).

    ``text_cached``: only the vision tokens are computed (their attention still reads the text).
    """
    hidden, heads, kv, head_dim = (config.hidden_size, config.num_attention_heads, config.num_key_value_heads,
                                   config.head_dim)
    mlp_matrices = 2 if config.hidden_act == "relu2" else 3
    per_token = 2 * (2 * heads * head_dim * hidden + 2 * kv * head_dim * hidden
                     + mlp_matrices * hidden * config.intermediate_size)
    und = [len(row.input_ids) for row in packed.rows]
    tokens = (0 if text_cached else packed.und_len) + sum(packed.gen_lengths)
    attention = sum(2 * 2 * heads * head_dim * ((0 if text_cached else u * u / 2) + g * (u + g))
                    for u, g in zip(und, packed.gen_lengths))
    return config.num_hidden_layers * (tokens * per_token + attention)


def matmul_peak_tflops(device, size: int = 8192, repeats: int = 20) -> float:
    a = torch.randn(size, size, device=device, dtype=torch.bfloat16)
    b = torch.randn(size, size, device=device, dtype=torch.bfloat16)
    _timed(lambda: a @ b, device, 3)
    return 2 * size**3 / _timed(lambda: a @ b, device, repeats) / 1e12


def bench_cpu(num_envs: int, num_steps: int, episodes: int, env_id: str) -> None:
    """Same episodes through both, twice: with the preset's reward (every video decoded) and
    latent-only (``reward="none"``), since the tiny VAE's decode can dominate on a CPU."""
    import gymnasium as gym
    from tqdm import tqdm

    from .vector_env import Cosmos3RolloutVectorEnv

    speedups = {}
    for reward in (None, "none"):
        overrides = {"num_steps": num_steps, "device": "cpu", **({"reward": reward} if reward else {})}
        batched = Cosmos3RolloutVectorEnv(num_envs, env_id, **overrides)
        sync = gym.vector.SyncVectorEnv([functools.partial(gym.make, env_id, **overrides)] * num_envs)
        actions = np.tile(batched.default_action, (num_envs, 1))
        label = f"reward={reward or batched.preset.reward}"

        def episode(venv):
            venv.reset(seed=0)
            for _ in range(num_steps):
                venv.step(actions)

        rates = []
        for name, venv in (("cosmos3_gym vector env", batched), ("SyncVectorEnv of single envs", sync)):
            episode(venv)  # warm-up
            seconds = sum(_timed(lambda: episode(venv), "cpu") for _ in tqdm(range(episodes), desc=name))
            rates.append(num_envs * episodes / seconds)
            print(f"{label:<22} {name:<30} {rates[-1]:8.2f} samples/s ({seconds / episodes:.3f} s per {num_envs})")
        speedups[label] = rates[0] / rates[1]
        print(f"{label:<22} ratio {speedups[label]:.2f}")
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {platform.machine()}, "
          f"{num_envs} envs x {num_steps} steps, {episodes} timed episodes each")
    print(f"speedup_vs_sync_vector_env: {next(iter(speedups.values())):.2f}")


def bench_gpu(model: str, num_envs: int, height: int, width: int, num_frames: int, num_steps: int,
              guidance: float, pipeline_samples: int, episodes: int, device="cuda") -> None:
    from diffusers.models.transformers.transformer_cosmos3 import Cosmos3AttnProcessor
    from tqdm import tqdm

    from .vector_env import Cosmos3RolloutVectorEnv

    device = torch.device(device)
    on_gpu = device.type == "cuda"
    print(f"device {torch.cuda.get_device_name() if on_gpu else device}, torch {torch.__version__}, model {model} "
          f"({MODEL_CONFIGS[model]}), request {num_frames}x{height}x{width}, {num_steps} steps, CFG {guidance}, "
          f"{num_envs} envs")
    peak = matmul_peak_tflops(device)
    print(f"matmul_peak_bf16: {peak:.0f} TFLOP/s (8192^3, measured now)")
    # Uncompiled until the pipeline has run: its baseline is the plain pipeline users run today.
    model = random_model(model, device, torch.bfloat16 if on_gpu else torch.float32, compile=False)
    transformer = model.transformer

    # What users run today: the diffusers pipeline, once per sample, with its own attention processor.
    transformer.set_attn_processor(Cosmos3AttnProcessor())
    pipe = model.pipeline
    pipe.set_progress_bar_config(disable=True)

    def pipeline_sample(i):
        pipe(PROMPT, num_frames=num_frames, height=height, width=width, num_inference_steps=num_steps,
             guidance_scale=guidance, generator=torch.Generator(device).manual_seed(i), output_type="latent",
             enable_safety_check=False)

    pipeline_sample(0)
    pipe_seconds = sum(_timed(lambda: pipeline_sample(i), device) for i in tqdm(range(pipeline_samples),
                                                                                 desc="diffusers pipeline"))
    pipe_rate = pipeline_samples / pipe_seconds
    empty_video = torch.zeros(1, 3, num_frames, height, width, device=device, dtype=model.dtype)
    encode = _timed(lambda: pipe._encode_video(empty_video), device, 2)
    model.compile = model.attention == "flex"
    model.install_processors()

    # Ours: one engine, all envs in one forward per step; latent-only like the pipeline's output_type="latent".
    venv = Cosmos3RolloutVectorEnv(num_envs, num_frames=num_frames, height=height, width=width,
                                   num_steps=num_steps, guidance_scale=guidance, reward="none",
                                   generator=generator, prompts=(PROMPT,))
    actions = torch.tensor(venv.default_action, device=device).repeat(num_envs, 1)
    step_times, episodes_trajectories = [], []

    def episode(seed):
        venv.reset(seed=seed)
        for _ in range(num_steps):
            _sync(device)
            start = time.perf_counter()
            _, _, terminated, _, info = venv.step(actions)
            _sync(device)
            step_times.append(time.perf_counter() - start)
        episodes_trajectories.append(list(info["trajectory"]))

    episode(10_000)  # warm-up: compiles the attention kernels
    step_times.clear()
    episodes_trajectories.clear()
    if on_gpu:
        torch.cuda.reset_peak_memory_stats()
    env_seconds = sum(_timed(lambda: episode(1000 * e), device) for e in tqdm(range(episodes), desc="cosmos3_gym"))
    env_rate = num_envs * episodes / env_seconds
    peak_memory = torch.cuda.max_memory_allocated() / 2**30 if on_gpu else float("nan")

    # The bare batched forward + CFG + SDE math of one step, for the TFLOP/s and the env overhead.
    engine = venv.engine
    engine.reset_slots(list(range(num_envs)), list(range(num_envs)), [PROMPT] * num_envs, [""] * num_envs)
    slots = list(range(num_envs))
    packed = engine._packed(slots)
    latents = engine.latents.clone()
    rows = [latent.unsqueeze(0) for latent in latents for _ in range(2)]
    k = num_steps // 2
    timesteps = [float(engine.timesteps[0, k])] * len(rows)
    model.velocity(packed, rows, timesteps)  # fills the text cache, as step 0 of an episode does
    forward = _timed(lambda: model.velocity(packed, rows, timesteps), device, 5)
    guidance_t = torch.full((num_envs,), guidance, device=device)
    sigma, sigma_next = engine.sigmas[:, k], engine.sigmas[:, k + 1]

    @torch.no_grad()  # as the env's step runs (compiled code is specialised on the grad mode)
    def bare_step():
        from .sde import sde_step

        v = engine.cfg_velocity(slots, latents, timesteps[::2], guidance_t, packed=packed)
        sde_step(v, latents, sigma, sigma_next, noise_level=0.7)

    bare = _timed(bare_step, device, 5)
    flops = forward_flops(packed, transformer.config, text_cached=True)
    env_step = float(np.median(step_times))

    # Precision: replay every rollout step's log-prob with the same weights, (a) each episode's
    # trajectories together in env order, as a GRPO trainer holds them, (b) a few trajectories alone.
    def ratio_errors(replay, trajectories):
        rollout = torch.stack([t.log_probs for t in trajectories]).to(device)
        errors = (torch.exp(replay.reshape(rollout.shape) - rollout) - 1).abs().flatten().cpu()
        return errors[torch.isfinite(errors)].numpy()

    together = np.concatenate([ratio_errors(engine.replay_log_probs(batch), batch)
                               for batch in tqdm(episodes_trajectories, desc="replay (episode batches)")])
    alone = np.concatenate([ratio_errors(engine.replay_log_probs(t), [t])
                            for t in tqdm(episodes_trajectories[0][:4], desc="replay (alone)")])

    tokens_per_row = (packed.und_len + sum(packed.gen_lengths)) / len(packed.rows)
    print(f"tokens per sample (cond row): {len(packed.rows[0].input_ids)} text + {packed.gen_lengths[0]} vision; "
          f"{len(packed.rows)} rows, {tokens_per_row:.0f} tokens per row incl. padding; attention "
          f"{model.attention}, compiled norms/MLPs {model.compile}")
    print(f"diffusers_pipeline: {pipe_rate:.3f} samples/s ({1 / pipe_rate:.3f} s per sample, of which "
          f"{encode:.3f} s is its VAE encode of the empty conditioning video)")
    print(f"cosmos3_gym_vector_env: {env_rate:.3f} samples/s ({env_seconds / episodes:.3f} s per {num_envs} samples)")
    print(f"transformer_forward (text cached, vision tokens computed): {forward * 1e3:.1f} ms for "
          f"{len(packed.rows)} rows, {flops / 1e12:.1f} TFLOP, "
          f"{flops / forward / 1e12:.0f} TFLOP/s = {flops / forward / 1e12 / peak:.1%} of matmul peak")
    print(f"env_step: {env_step * 1e3:.1f} ms median; bare forward + CFG + SDE: {bare * 1e3:.1f} ms; "
          f"env_overhead: {max(0.0, 1 - bare / env_step):.2%}")
    print(f"peak_gpu_memory: {peak_memory:.1f} GiB")
    for name, errors in (("episode batches in env order", together), ("single trajectories alone", alone)):
        print(f"replay |exp(replay - rollout) - 1|, {name}, {errors.size} steps: max {errors.max():.2e}, "
              f"p99 {np.quantile(errors, 0.99):.2e}, median {np.median(errors):.2e}")
    print(f"speedup_vs_diffusers: {env_rate / pipe_rate:.2f}")
