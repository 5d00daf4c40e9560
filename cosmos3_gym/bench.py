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
import math
import platform
import time

import numpy as np
import torch
from PIL import Image

from .model.model import Cosmos3Model, compiles_by_default
from .model import vae_layers
from .model.diffusers_private import encode_video
from .model.packing import PackedRows
from .model.tasks import Task
from .model.tiny_model import SCHEDULER_CONFIG, build_tiny_tokenizer
from .rollout.transition import needs_unconditional, pack_cfg_rows, replay_log_probs

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
# `bench --mode`: what each mode runs. The action modes use the pipeline's CosmosActionCondition
# (random action heads of ACTION_DIM channels, the pusht embodiment, the 480 tier's canvas).
BENCH_MODES = {Task.T2V: "Cosmos3Rollout-v0", Task.POLICY: "Cosmos3PolicyRollout-v0",
               Task.FORWARD_DYNAMICS: "Cosmos3ForwardDynamicsRollout-v0", "world": "Cosmos3World-v0"}
ACTION_DIM, DOMAIN, RAW_DIM, RESOLUTION_TIER = 64, "pusht", 2, 480


def sync_device(device) -> None:
    """Wait for the device's queued work, so that a wall-clock reading covers it."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def _timed(fn, device, repeats: int = 1) -> float:
    """Mean wall seconds of ``fn()``, device work included."""
    sync_device(device)
    start = time.perf_counter()
    for _ in range(repeats):
        fn()
    sync_device(device)
    return (time.perf_counter() - start) / repeats


def random_model(model: str, device="cuda", dtype=torch.bfloat16, compile: bool | None = None,
                 action_gen: bool = False) -> Cosmos3Model:
    """A Cosmos 3 model at a real size with random weights (normal(0, 0.02), like HF init);
    ``action_gen`` adds action heads of :data:`ACTION_DIM` channels."""
    from diffusers import AutoencoderKLWan, Cosmos3OmniTransformer, UniPCMultistepScheduler

    tokenizer = build_tiny_tokenizer()
    torch.manual_seed(0)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            actions = dict(action_gen=True, action_dim=ACTION_DIM) if action_gen else {}
            transformer = Cosmos3OmniTransformer(**MODEL_CONFIGS[model], **COMMON_CONFIG, **actions)
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

    from .env.vector_env import Cosmos3RolloutVectorEnv

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
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s), {platform.machine()}, "
          f"{num_envs} envs x {num_steps} steps, {episodes} timed episodes each")
    print(f"speedup_vs_sync_vector_env: {next(iter(speedups.values())):.2f}")


def measure_pipeline(model: Cosmos3Model, request: dict, samples: int, options: dict | None = None
                     ) -> tuple[float, float]:
    """What users run today: diffusers' pipeline with its own attention processor, once per
    sample (for an action mode, sample ``i`` gets the env ``i``'s image and actions of ``options``).
    Returns (samples/s, seconds of its VAE encode of the empty conditioning video)."""
    from diffusers.models.transformers.transformer_cosmos3 import Cosmos3AttnProcessor
    from diffusers.pipelines.cosmos.pipeline_cosmos3_omni import CosmosActionCondition
    from tqdm import tqdm

    device = model.device
    model.transformer.set_attn_processor(Cosmos3AttnProcessor())
    vae_layers.restore(model.vae)
    pipe = model.pipeline
    pipe.set_progress_bar_config(disable=True)
    mode = request.get("mode", "t2v")
    tier = request.get("resolution_tier", RESOLUTION_TIER)

    def sample(i):
        if mode == "t2v":
            shape = dict(num_frames=request["num_frames"], height=request["height"], width=request["width"])
        else:
            actions = options.get("actions")
            raw = {} if actions is None else {"raw_actions": torch.from_numpy(actions[i % len(actions)])}
            shape = dict(action=CosmosActionCondition(
                mode=mode, chunk_size=request["num_frames"] - 1, domain_name=DOMAIN,
                resolution_tier=tier, image=options["image"][i % len(options["image"])], **raw))
        pipe(options.get("prompt", PROMPT) if options else PROMPT, **shape, num_inference_steps=request["num_steps"],
             guidance_scale=request["guidance_scale"], generator=torch.Generator(device).manual_seed(i),
             output_type=request.get("output_type", "latent"), enable_safety_check=False)

    sample(0)
    seconds = sum(_timed(lambda: sample(i), device) for i in tqdm(range(samples), desc="diffusers pipeline"))
    empty_video = torch.zeros(1, 3, request["num_frames"], request["height"], request["width"], device=device,
                              dtype=model.dtype)
    encode = _timed(lambda: encode_video(pipe, empty_video), device, 2)
    return samples / seconds, encode


def measure_env(venv, episodes: int, options: dict | None = None) -> tuple[float, list[float], list[list]]:
    """Timed episodes of the vector env (each reset with ``options``, its conditioning encoded again).
    Returns (samples/s, per-step seconds, trajectories per episode)."""
    from tqdm import tqdm

    device, n = venv.device, venv.num_envs
    actions = torch.tensor(venv.default_action, device=device).repeat(n, 1)
    step_times, trajectories = [], []

    def episode(seed):
        venv.unwrapped.model.forget_conditions()  # each episode pays its encodes, as the pipeline does
        venv.reset(seed=seed, options=options)
        for _ in range(venv.engine.num_steps):
            sync_device(device)
            start = time.perf_counter()
            _, _, _, _, info = venv.step(actions)
            sync_device(device)
            step_times.append(time.perf_counter() - start)
        trajectories.append(list(info["trajectory"]))

    episode(10_000)  # warm-up: compiles the attention kernels
    step_times.clear()
    trajectories.clear()
    seconds = sum(_timed(lambda: episode(1000 * e), device) for e in tqdm(range(episodes), desc="cosmos3_gym"))
    return n * episodes / seconds, step_times, trajectories


def measure_forward(venv, guidance: float, options: dict | None = None) -> tuple[dict, float, object]:
    """Mid-episode (text cached): the bare transformer forward over all rows, eager and (where the
    model uses them) replayed from a CUDA graph, and the bare transition (forward + CFG + SDE,
    :meth:`RolloutEngine.prepare_step`, nothing installed).
    Returns ({"eager" / "graphed": forward seconds}, transition seconds, the packing)."""
    engine = venv.unwrapped.engine
    n = engine.num_slots
    slots = list(range(n))
    venv.reset(seed=0, options=options)
    guidance_t, level = torch.full((n,), guidance), torch.full((n,), 0.7)
    with torch.no_grad():  # as the env's step runs (compiled code is specialised on the grad mode)
        engine.step(slots, guidance_t, level)  # step 0 fills the text cache
    episodes = [engine.episode(s) for s in slots]
    copies = 2 if needs_unconditional(guidance_t) else 1  # the rows the env's step packs
    packed = pack_cfg_rows(engine.model, [(e.cond_ids, e.uncond_ids, e.row) for e in episodes], copies == 2)
    rows = {name: [e.current(name).unsqueeze(0) if name == "video" else e.current(name)
                   for _ in range(copies) for e in episodes] for name in engine.streams}  # pack_cfg_rows' order
    timesteps = [float(episodes[0].timesteps[1])] * copies * n
    model = engine.model
    model.velocity(packed, rows, timesteps)  # fills this packing's text cache
    graphs, forward = model.cuda_graphs, {}
    try:
        model.cuda_graphs = False
        forward["eager"] = _timed(lambda: model.velocity(packed, rows, timesteps), engine.device, 5)
        if engine.device.type == "cuda":  # the same forward replayed from a CUDA graph (opt-in in the envs)
            model.cuda_graphs = True
            try:
                model.velocity(packed, rows, timesteps)  # captures this packing's graph
                forward["graphed"] = _timed(lambda: model.velocity(packed, rows, timesteps), engine.device, 5)
            except torch.OutOfMemoryError:  # the graph's private pool did not fit beside the env
                forward["graphed"] = float("nan")
    finally:
        packed.forward_graph = None  # its memory back
        model.cuda_graphs = graphs
    with torch.no_grad():
        transition = _timed(lambda: engine.prepare_step(slots, guidance_t, level), engine.device, 5)
    return forward, transition, packed


def measure_replay(model: Cosmos3Model, episodes: list[list]) -> dict[str, np.ndarray]:
    """|exp(replay - rollout) - 1| of every rollout step: (a) each episode's trajectories together
    in env order, as a GRPO trainer holds them, (b) a few trajectories alone."""
    from tqdm import tqdm

    def errors(replayed, trajectories):
        rollout = torch.stack([t.log_probs for t in trajectories]).to(model.device)
        return (torch.exp(replayed.reshape(rollout.shape) - rollout) - 1).abs().flatten().cpu().numpy()

    with torch.no_grad():
        together = [errors(replay_log_probs(model, batch), batch)
                    for batch in tqdm(episodes, desc="replay (episode batches)")]
        alone = [errors(replay_log_probs(model, t), [t]) for t in tqdm(episodes[0][:4], desc="replay (alone)")]
    return {"episode batches in env order": np.concatenate(together), "single trajectories alone":
            np.concatenate(alone)}


def mode_inputs(mode: str, num_envs: int, num_frames: int, height: int, width: int) -> dict:
    """Reset options of a bench mode: one distinct random first frame (and action chunk) per env."""
    if mode == "t2v":
        return {}
    rng = np.random.default_rng(0)
    options = {"image": rng.integers(0, 256, (num_envs, height, width, 3), dtype=np.uint8), "prompt": PROMPT}
    if mode == Task.FORWARD_DYNAMICS:
        options["actions"] = rng.uniform(-1, 1, (num_envs, num_frames - 1, RAW_DIM)).astype(np.float32)
    return options


def bench_gpu(model: str, num_envs: int, height: int, width: int, num_frames: int, num_steps: int,
              guidance: float, pipeline_samples: int, episodes: int, device="cuda", mode: str = "t2v") -> None:
    """Named measurements, in one process on one model, printed side by side (results on stdout,
    progress bars on stderr). ``mode``: ``t2v`` or an action mode (:data:`BENCH_MODES`), where
    every env conditions on its own frame (and actions), encoded at every reset as the pipeline
    encodes it at every call."""
    from .env.vector_env import Cosmos3RolloutVectorEnv

    device = torch.device(device)
    on_gpu = device.type == "cuda"
    size = model
    action = mode != "t2v"
    print(f"device {torch.cuda.get_device_name() if on_gpu else device}, torch {torch.__version__}, model {size} "
          f"({MODEL_CONFIGS[size]}), mode {mode}, request {num_frames}x{height}x{width}, {num_steps} steps, "
          f"CFG {guidance}, {num_envs} envs" + (f", chunk {num_frames - 1} {DOMAIN} actions (action_dim "
                                                 f"{ACTION_DIM}), tier {RESOLUTION_TIER}" if action else ""))
    peak = matmul_peak_tflops(device)
    print(f"matmul_peak_bf16: {peak:.0f} TFLOP/s (8192^3, measured now)")
    # Uncompiled until the pipeline has run: its baseline is the plain pipeline users run today.
    model = random_model(size, device, torch.bfloat16 if on_gpu else torch.float32, compile=False,
                         action_gen=action)
    request = dict(num_frames=num_frames, height=height, width=width, num_steps=num_steps, guidance_scale=guidance)
    options = mode_inputs(mode, num_envs, num_frames, height, width)
    pipe_rate, encode = measure_pipeline(model, {**request, "mode": mode}, pipeline_samples, options)
    model.compile = compiles_by_default(device, model.transformer.config)
    model.install_processors()

    # Ours: one engine, all envs in one forward per step; latent-only like the pipeline's output_type="latent".
    extra = dict(resolution_tier=RESOLUTION_TIER, domain=DOMAIN) if action else {}
    venv = Cosmos3RolloutVectorEnv(num_envs, BENCH_MODES[mode], **request, reward="none", model=model,
                                   prompts=(PROMPT,), array_type="torch", **extra)
    if on_gpu:
        torch.cuda.reset_peak_memory_stats()
    env_rate, step_times, trajectories = measure_env(venv, episodes, options or None)
    peak_memory = torch.cuda.max_memory_allocated() / 2**30 if on_gpu else float("nan")
    forward, bare, packed = measure_forward(venv, guidance, options or None)
    flops = forward_flops(packed, model.transformer.config, text_cached=True)
    env_step = float(np.median(step_times))
    replay_errors = measure_replay(model, trajectories)

    tokens_per_row = (packed.und_len + sum(packed.gen_lengths)) / len(packed.rows)
    print(f"tokens per sample (cond row): {len(packed.rows[0].input_ids)} text + {packed.gen_lengths[0]} generated; "
          f"{len(packed.rows)} rows, {tokens_per_row:.0f} tokens per row incl. padding; attention "
          f"{model.attention}, compiled norms/MLPs {model.compile}")
    print(f"diffusers_pipeline: {pipe_rate:.3f} samples/s ({1 / pipe_rate:.3f} s per sample, of which "
          f"{encode:.3f} s is its VAE encode of the {'conditioning' if action else 'empty conditioning'} video)")
    print(f"cosmos3_gym_vector_env: {env_rate:.3f} samples/s ({num_envs / env_rate:.3f} s per {num_envs} samples)")
    for kind, seconds in forward.items():
        if math.isnan(seconds):
            print(f"transformer_forward, {kind}: out of memory")
            continue
        print(f"transformer_forward, {kind} (text cached, vision tokens computed): {seconds * 1e3:.1f} ms for "
              f"{len(packed.rows)} rows, {flops / 1e12:.1f} TFLOP, "
              f"{flops / seconds / 1e12:.0f} TFLOP/s = {flops / seconds / 1e12 / peak:.1%} of matmul peak")
    print(f"env_step: {env_step * 1e3:.1f} ms median; bare transition (forward + CFG + SDE): {bare * 1e3:.1f} ms; "
          f"env_overhead: {max(0.0, 1 - bare / env_step):.2%}")
    print(f"peak_gpu_memory: {peak_memory:.1f} GiB")
    for name, errors in replay_errors.items():
        print(f"replay |exp(replay - rollout) - 1|, {name}, {errors.size} steps: max {errors.max():.2e}, "
              f"p99 {np.quantile(errors, 0.99):.2e}, median {np.median(errors):.2e}")
    print(f"speedup_vs_diffusers: {env_rate / pipe_rate:.2f}")


def measure_workers(env_id: str, num_envs: int, workers: int, episodes: int, model_factory, **overrides
                    ) -> dict[int, float]:
    """Samples/s of the same episodes on 1 and on ``workers`` Ray workers (each building its model
    with ``model_factory``), and whether env ``i``'s log-probs agree between the two."""
    from .env.ray_env import Cosmos3RayVectorEnv

    rates, log_probs = {}, {}
    for count in (1, workers):
        venv = Cosmos3RayVectorEnv(num_envs, env_id, num_workers=count, model=model_factory, reward="none",
                                   **overrides)
        actions = np.tile(venv.default_action, (num_envs, 1))

        def episode(seed):
            venv.reset(seed=seed)
            steps = []
            for _ in range(venv.preset.num_steps):
                _, _, _, _, info = venv.step(actions)
                steps.append(info["log_prob"])
            return np.stack(steps, axis=1)

        episode(10_000)  # warm-up: model build, kernel compilation
        start = time.perf_counter()
        log_probs[count] = [episode(1000 * e) for e in range(episodes)]
        rates[count] = num_envs * episodes / (time.perf_counter() - start)
        venv.close()
    rates["same_log_probs"] = all(np.array_equal(a, b) for a, b in zip(log_probs[1], log_probs[workers]))
    return rates


def bench_workers(model: str, num_envs: int, height: int, width: int, num_frames: int, num_steps: int,
                  guidance: float, episodes: int, workers: int) -> None:
    """Samples/s of the vector env on 1 GPU against ``workers`` GPUs (one Ray actor each), one run."""
    print(f"devices {torch.cuda.device_count()} x {torch.cuda.get_device_name()}, torch {torch.__version__}, "
          f"model {model} ({MODEL_CONFIGS[model]}), request {num_frames}x{height}x{width}, {num_steps} steps, "
          f"CFG {guidance}, {num_envs} envs")
    factory = functools.partial(random_model, model, "cuda", torch.bfloat16)
    rates = measure_workers("Cosmos3Rollout-v0", num_envs, workers, episodes, factory, num_frames=num_frames,
                            height=height, width=width, num_steps=num_steps, guidance_scale=guidance,
                            prompts=(PROMPT,))
    print(f"one_worker: {rates[1]:.3f} samples/s")
    print(f"{workers}_workers: {rates[workers]:.3f} samples/s")
    print(f"env i's log-probs equal on 1 and {workers} workers: {rates['same_log_probs']}")
    print(f"speedup_{workers}_workers_vs_1: {rates[workers] / rates[1]:.2f}")


def world_env_rate(venv, actions: np.ndarray, device) -> tuple[int, float]:
    """``(chunks imagined, seconds)`` of the world env's steps with ``actions`` ``[steps, num_envs, chunk, 2]``
    after one warm-up step: each step's chunks counted where an env stepped (one that ended skips a step)."""
    venv.step(actions[0])  # warm-up
    chunks = 0

    def run():
        nonlocal chunks
        for step_actions in actions[1:]:
            chunks += int(venv.step(step_actions)[4]["_frames"].sum())

    seconds = _timed(run, device)
    return chunks, seconds


def bench_world(model: str, num_envs: int, size: int, chunk: int, num_steps: int, guidance: float,
                pipeline_samples: int, steps: int, device="cuda") -> None:
    """Imagined frames/s of ``Cosmos3World-v0``'s vector env (one forward-dynamics generation per
    step for all envs, decoded, read by the detector) against diffusers' pipeline in
    forward-dynamics mode called once per env and chunk, decoded to frames, on the same model:
    the embedded one (``model="tiny"``) or random weights at a real size with action heads.
    Also the frames/s each env gets with 1, 4 and ``num_envs`` envs stepping together (an
    interactive stream is one env: the batch buys throughput, not per-stream speed)."""
    from .world.envs import Cosmos3WorldVectorEnv

    device = torch.device(device)
    on_gpu = device.type == "cuda"
    if model == "tiny":
        world_model = Cosmos3Model.embedded(device=device)
    else:
        world_model = random_model(model, device, torch.bfloat16 if on_gpu else torch.float32, compile=False,
                                   action_gen=True)

    def world(count):
        return Cosmos3WorldVectorEnv(count, chunk=chunk, size=size, horizon=steps + 2, num_steps=num_steps,
                                     guidance_scale=guidance, model=world_model)

    venv = world(num_envs)
    print(f"device {torch.cuda.get_device_name() if on_gpu else device}, torch {torch.__version__}, model {model}, "
          f"world {size}x{size}, chunk {chunk}, {num_steps} denoising steps, CFG {guidance}, {num_envs} envs, "
          f"tier {venv.preset.resolution_tier}, attention {world_model.attention}")
    rng = np.random.default_rng(0)
    actions = rng.uniform(-1, 1, (steps + 1, num_envs, chunk, 2)).astype(np.float32)
    frames, infos = venv.reset(seed=0)
    request = dict(mode=Task.FORWARD_DYNAMICS, num_frames=chunk + 1, height=size, width=size, num_steps=num_steps,
                   guidance_scale=guidance, resolution_tier=venv.preset.resolution_tier, output_type="np")
    options = {"image": [Image.fromarray(frame) for frame in frames], "actions": actions[0],
               "prompt": str(infos["prompt"][0])}
    pipe_rate, _ = measure_pipeline(world_model, request, pipeline_samples, options)
    world_model.compile = compiles_by_default(device, world_model.transformer.config)
    world_model.install_processors()  # the env's own attention again

    chunks, seconds = world_env_rate(venv, actions, device)
    env_rate = chunks / seconds
    graphed_rate = None
    if on_gpu:  # the same steps with CUDA graphs (opt-in)
        graphs, world_model.cuda_graphs = world_model.cuda_graphs, True
        try:
            venv.reset(seed=0)
            counted, elapsed = world_env_rate(venv, actions, device)
            graphed_rate = counted / elapsed
        finally:
            world_model.cuda_graphs = graphs
    per_env = {}
    for count in (c for c in (1, 4) if c < num_envs):
        fewer = world(count)
        fewer.reset(seed=0)
        counted, elapsed = world_env_rate(fewer, actions[:, :count], device)
        per_env[count] = counted * chunk / elapsed / count
    per_env[num_envs] = env_rate * chunk / num_envs
    print(f"diffusers_pipeline: {pipe_rate * chunk:.1f} imagined frames/s ({1 / pipe_rate * 1e3:.1f} ms per env "
          f"and chunk, decoded)")
    print(f"cosmos3_gym_world_env: {env_rate * chunk:.1f} imagined frames/s ({chunks} chunks in {steps} steps, "
          f"{seconds / steps * 1e3:.1f} ms per step of {num_envs} envs; decode and detector included)")
    if graphed_rate is not None:
        print(f"cosmos3_gym_world_env with CUDA graphs: {graphed_rate * chunk:.1f} imagined frames/s")
    print("imagined frames/s per env: " + ", ".join(f"{rate:.2f} at {count} env{'s' * (count > 1)}"
                                                    for count, rate in per_env.items()))
    print(f"speedup_vs_diffusers: {env_rate / pipe_rate:.2f}")
