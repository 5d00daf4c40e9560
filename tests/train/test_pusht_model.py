"""The PushT trainer (cosmos3_gym.train_pusht): it feeds the model what Cosmos3PushT-v0 feeds it, it
learns, it keeps to its time budget, and what it writes runs in the env."""

import dataclasses
import json
import math

import gymnasium as gym
import numpy as np
import pytest
import torch

pytest.importorskip("gym_pusht")

from cosmos3_gym.model.tasks import checked_domain  # noqa: E402
from cosmos3_gym.train.world_model import trainable_model, training_batch  # noqa: E402
from cosmos3_gym.train_pusht import TABLE_LEVEL, PushTTrainArgs, fixed_batch, foreground, held_out_losses, \
    imagined_pool, latent_foreground, main, pusht_components, pusht_pool, sized_configs, successors, \
    train_transformer, weighted_mse  # noqa: E402
from cosmos3_gym.world.pusht import (  # noqa: E402
    PROMPT, PUSHT_CHECKPOINT, Cosmos3PushTVectorEnv, PushTTwinEnv, model_actions)
from cosmos3_gym.world.pusht_coverage import AGENT, BLOCK_FILL, WHITE, make_pusht  # noqa: E402
from cosmos3_gym.world.pusht_data import Clips, generate  # noqa: E402

SMALL = dict(device="cpu", hidden_size=64, layers=1, vae_base_dim=4, batch=2)  # a model that trains in seconds


@pytest.fixture(scope="module")
def clips():
    return generate(2, seed=3, mix={"push": 1.0}, clips_per_episode=2, progress=False)


def _clip(seed: int, actions: np.ndarray) -> Clips:
    """gym-pusht's reset(seed) frame and the frames the actions cause (the twin's), as one clip."""
    twin = PushTTwinEnv()
    first, _ = twin.reset(seed=seed)
    _, _, _, _, info = twin.step(actions)
    twin.close()
    zeros = np.zeros(1)
    return Clips(frames=np.concatenate([first[None], info["frames"]])[None], actions=actions[None], kinds=zeros,
                 block_poses=zeros, agent_positions=zeros, coverages=zeros, episodes=zeros)


@pytest.mark.parametrize("action_frame", ["canvas", "agent"])
def test_training_batches_are_what_the_env_feeds_the_model(stand_in_model, action_frame):
    """A second code path: the env's own step on the same frame and actions, read back from its
    trajectory, whose clean elements are the env's conditioning. The trainer's clip latent frame 0 is
    the env's condition, its actions the env's (in either action frame), and its rows the engine's
    prompt tokens (conditional and unconditional), fps, clean frames and actions, domain and latent grid."""
    actions = np.random.default_rng(0).uniform(0, 512, (8, 2)).astype(np.float32)
    pool = pusht_pool(stand_in_model, _clip(5, actions), PushTTrainArgs(**SMALL).resolution_tier, "cpu",
                      action_frame=action_frame)
    env = Cosmos3PushTVectorEnv(1, model=stand_in_model, num_steps=1, exact_coverage=False, action_frame=action_frame)
    env.reset(seed=5)
    _, _, _, _, infos = env.step(actions[None])
    env.close()
    trajectory = infos["trajectory"][0]
    condition, given = trajectory.latents[0], trajectory.action_latents[0]
    assert trajectory.clean_frames == [0] and trajectory.action_mode == "forward_dynamics"
    torch.testing.assert_close(pool.latents[0][:, 0], condition[:, 0], rtol=0, atol=1e-5)
    for uncond_prob, ids in ((0.0, trajectory.cond_ids), (1.0, trajectory.uncond_ids)):
        args = PushTTrainArgs(**{**SMALL, "batch": 1, "uncond_prob": uncond_prob})
        rows, x0, generated = training_batch(stand_in_model, "forward_dynamics", args, None,
                                             np.random.default_rng(0), {}, {"dynamics": pool})
        (row,) = rows
        assert list(row.input_ids) == ids
        assert row.fps == trajectory.fps and list(row.clean_frames) == trajectory.clean_frames
        assert list(row.clean_actions) == trajectory.clean_actions
        assert row.domain_id == checked_domain(trajectory.domain, stand_in_model.transformer.config.action_dim)[0]
        assert x0["video"].shape[1:] == condition.shape
        torch.testing.assert_close(x0["action"][0], given, rtol=0, atol=0)


def test_the_vae_loss_weights_the_block_and_the_agent_over_the_table(clips):
    """A VAE trained with a plain MSE drew an empty white table (the block and the agent are a few
    percent of the pixels): the weighted loss marks them, and an all-white reconstruction then costs
    far more than its plain MSE. Checked against numpy's own count and a float64 weighted mean."""
    frames = clips.frames[:2]
    mask = foreground(frames, "cpu")[:, 0].numpy().astype(bool)  # [B, F, H, W]
    colours = frames.reshape(-1, 3)
    for colour, expected in ((AGENT, True), (BLOCK_FILL, True), (WHITE, False)):
        hits = (colours == colour).all(axis=1)
        assert hits.any() and (mask.reshape(-1)[hits] == expected).all()
    np.testing.assert_array_equal(mask, (frames < TABLE_LEVEL).any(axis=-1))
    target = torch.as_tensor(frames).permute(0, 4, 1, 2, 3).double() / 127.5 - 1.0
    white = torch.ones_like(target)
    weights = 1.0 + 20.0 * mask[:, None].astype(np.float64)
    squared = (white - target).numpy() ** 2
    expected = (squared * weights).sum() / (weights.sum() * 3)
    loss = weighted_mse(white.float(), target.float(), torch.as_tensor(weights).float())
    assert loss.item() == pytest.approx(expected, rel=1e-5)
    assert loss.item() > 8 * squared.mean()


def test_the_loss_on_a_fixed_batch_drops_on_a_tiny_set(clips):
    args = PushTTrainArgs(**SMALL, steps=12, lr=0.03, log_every=100, task_weights="forward_dynamics=1")
    model = trainable_model(pusht_components(args), "cpu")
    pool = pusht_pool(model, clips, args.resolution_tier, "cpu")
    batch = fixed_batch(model, pool, args)
    before = held_out_losses(model, batch)["held_out"]
    train_transformer(model, {"dynamics": pool}, None, args, [], math.inf)
    assert held_out_losses(model, batch)["held_out"] < 0.7 * before


def test_a_run_out_of_time_still_saves_a_checkpoint_the_env_runs(tmp_path):
    """A time budget already spent when training starts: each stage takes one step, logs it and ends;
    the run saves, records itself, and its checkpoint (8 latent channels) imagines in Cosmos3PushT-v0 from
    gym-pusht's frame."""
    main(["--device", "cpu", "--hidden-size", "64", "--layers", "1", "--vae-base-dim", "4", "--batch", "2",
          "--clips", "4", "--clips-per-episode", "2", "--held-out", "0.5", "--mix", "push=1", "--data-workers", "1",
          "--vae-steps", "50", "--vae-batch", "1", "--steps", "50", "--max-minutes", "0.0001", "--vae-z-dim", "8",
          "--out", str(tmp_path)])
    record = json.loads((tmp_path / "training.json").read_text())
    assert [(r["stage"], r["step"]) for r in record["log"]] == [("vae", 0), ("transformer", 0)]
    assert {"loss", "held_out", "held_out_shuffled"} <= set(record["log"][1])
    assert record["data"]["clips"] == 4 and record["data"]["held_out_clips"] == 2
    assert record["seeds"] == {"data": 0, "init": 0} and record["minutes"] > 0 and 0 < record["megabytes"] < 40
    assert record["command"].startswith("python -m cosmos3_gym.train_pusht --device cpu")
    assert (tmp_path / "training_curve.png").read_bytes()[:4] == b"\x89PNG"
    env = gym.make("Cosmos3PushT-v0", checkpoint=str(tmp_path), num_steps=1, exact_coverage=False, device="cpu")
    obs, _ = env.reset(seed=0)
    model = env.unwrapped.vector.model
    assert model.transformer.config.hidden_size == 64
    assert model.vae.config.z_dim == model.transformer.config.latent_channel == 8
    assert len(model.vae.config.latents_std) == 8 and min(model.vae.config.latents_std) > 0
    np.testing.assert_array_equal(obs, make_pusht().reset(seed=0)[0])
    obs, reward, *_ = env.step(env.action_space.sample())
    env.close()
    assert obs.shape == (96, 96, 3) and obs.dtype == np.uint8 and np.isfinite(reward)


def test_the_latent_channels_size_the_vae_its_statistics_and_the_transformers_patches():
    transformer, vae = sized_configs(PushTTrainArgs(device="cpu", vae_z_dim=8))
    assert vae["z_dim"] == transformer["latent_channel"] == 8 and transformer["patch_latent_dim"] == 2 * 2 * 8
    assert vae["latents_mean"] == [0.0] * 8 and vae["latents_std"] == [1.0] * 8


@pytest.mark.parametrize("flag", ["--foreground-weight", "--latent-foreground-weight", "--condition-noise"])
def test_a_weight_or_noise_that_is_not_a_finite_number_is_refused(tmp_path, capsys, flag):
    for value in ("inf", "nan", "-1"):
        with pytest.raises(SystemExit) as exit_info:
            main(["--device", "cpu", flag, value, "--out", str(tmp_path / "run")])
        assert exit_info.value.code == 2 and f"{flag} {float(value)} is not a finite number >= 0" \
            in capsys.readouterr().err
        assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("flags, message", [
    ([], "--task-weights has policy, which learns from the scripted pushes, but no training clip is one; add push"),
    (["--task-weights", "forward_dynamics=1", "--init-from", str(PUSHT_CHECKPOINT), "--imagined-conditions", "0.5"],
     "--imagined-conditions needs episodes of two clips or more among the training clips"),
])
def test_a_clips_file_that_cannot_serve_the_flags_is_a_usage_error(tmp_path, capsys, flags, message):
    """Clips of one-clip episodes without scripted pushes: one error line and status 2, no traceback, before
    any model is built; nothing written."""
    generate(2, seed=3, mix={"random_walk": 1.0}, clips_per_episode=1, progress=False).save(tmp_path / "clips.npz")
    with pytest.raises(SystemExit) as exit_info:
        main(["--device", "cpu", "--clips-file", str(tmp_path / "clips.npz"), "--held-out", "0", *flags,
              "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and f"python -m cosmos3_gym.train_pusht: error: {message}" in err
    assert "Traceback" not in err and not (tmp_path / "run").exists()


def test_a_checkpoint_over_the_size_limit_is_refused_before_anything_loads(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--device", "cpu", "--hidden-size", "512", "--out", str(tmp_path / "run")])
    assert exit_info.value.code == 2 and "MB checkpoint, more than 40 MB" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_a_decoder_only_run_keeps_the_encoder_its_statistics_and_the_transformer(tmp_path, capsys):
    """--vae-decoder-only --steps 0 on a checkpoint: the decoder learns; the encoder, the latent
    statistics and the transformer, which was trained on those latents, are written back unchanged."""
    from safetensors.torch import load_file

    first = tmp_path / "first"
    main(["--device", "cpu", "--hidden-size", "64", "--layers", "1", "--vae-base-dim", "4", "--batch", "2",
          "--clips", "4", "--clips-per-episode", "2", "--held-out", "0", "--mix", "push=1", "--data-workers", "1",
          "--vae-steps", "1", "--vae-batch", "1", "--steps", "1", "--out", str(first)])
    tuned = tmp_path / "tuned"
    main(["--device", "cpu", "--init-from", str(first), "--vae-decoder-only", "--vae-steps", "3", "--vae-batch", "1",
          "--steps", "0", "--clips", "4", "--clips-per-episode", "2", "--held-out", "0", "--mix", "push=1",
          "--data-workers", "1", "--out", str(tuned)])
    before, after = (load_file(run / "vae" / "diffusion_pytorch_model.safetensors") for run in (first, tuned))
    changed = {name for name in before if not torch.equal(before[name], after[name])}
    assert changed and all(name.startswith(("decoder.", "post_quant_conv.")) for name in changed)
    assert any(name.startswith("encoder.") for name in before)
    configs = [json.loads((run / "vae" / "config.json").read_text()) for run in (first, tuned)]
    assert configs[0]["latents_mean"] == configs[1]["latents_mean"] and \
        configs[0]["latents_std"] == configs[1]["latents_std"]
    weights = [load_file(run / "transformer" / "diffusion_pytorch_model.safetensors") for run in (first, tuned)]
    assert all(torch.equal(weights[0][name], weights[1][name]) for name in weights[0])
    record = json.loads((tuned / "training.json").read_text())
    assert [(r["stage"], r["step"]) for r in record["log"]] == [("vae", 0), ("vae", 2)]
    # the sizes it records are the checkpoint's, not the flags' defaults (192, 8, 16, 4)
    assert [record["args"][name] for name in ("hidden_size", "layers", "vae_base_dim", "vae_z_dim")] == [64, 1, 4, 4]
    for flags, message in ((["--vae-decoder-only", "--vae-steps", "3"], "no --init-from was given"),
                           (["--init-from", str(first), "--vae-z-dim", "16"],
                            f"--vae-z-dim 16: --init-from {first} has 4; leave the flag out"),
                           (["--init-from", str(first), "--hidden-size", "128"], "--hidden-size 128: --init-from"),
                           (["--vae-decoder-only", "--init-from", str(first), "--vae-steps", "0"],
                            "--vae-decoder-only with --vae-steps 0 trains nothing"),
                           (["--steps", "0"], "--steps 0 (no transformer training) is for --vae-decoder-only")):
        with pytest.raises(SystemExit) as exit_info:
            main(["--device", "cpu", *flags, "--out", str(tmp_path / "refused")])
        assert exit_info.value.code == 2 and message in capsys.readouterr().err


def test_the_held_out_loss_is_measured_on_clean_conditions(clips):
    """``--condition-noise`` corrupts training batches only: the fixed held-out batch, and so the loss
    logged under the clips' own and shuffled actions, is the same whatever the noise."""
    model = trainable_model(pusht_components(PushTTrainArgs(**SMALL)), "cpu")
    pool = pusht_pool(model, clips, PushTTrainArgs(**SMALL).resolution_tier, "cpu")
    _, clean, *_ = fixed_batch(model, pool, PushTTrainArgs(**SMALL))
    _, measured, *_ = fixed_batch(model, pool, PushTTrainArgs(**SMALL, condition_noise=0.6))
    for name in clean:
        torch.testing.assert_close(measured[name], clean[name], rtol=0, atol=0)


def test_latent_foreground_marks_the_latent_cells_that_see_the_block_or_the_agent(stand_in_model, clips):
    """Against numpy loops over gym-pusht's own frames: a latent element is marked where any pixel of
    its frames (frame 0 alone, then groups of four) and its 4x4 cell is not the table."""
    frames = clips.frames[:2]
    marked = latent_foreground(stand_in_model, frames).numpy()
    step, cell = stand_in_model.temporal_compression, stand_in_model.spatial_compression
    groups = [[0]] + [list(range(1 + step * t, 1 + step * (t + 1))) for t in range((frames.shape[1] - 1) // step)]
    pixels = frames.min(axis=-1) < TABLE_LEVEL
    expected = np.zeros_like(marked)
    for b in range(len(frames)):
        for t, group in enumerate(groups):
            for i in range(frames.shape[2] // cell):
                for j in range(frames.shape[3] // cell):
                    expected[b, 0, t, i, j] = pixels[b, group, i * cell:(i + 1) * cell, j * cell:(j + 1) * cell].any()
    np.testing.assert_array_equal(marked, expected)
    assert 0 < expected.mean() < 0.5  # the block, the agent and the goal, not the table


def test_the_transformer_loss_weighs_the_foreground_and_the_held_out_loss_does_not(clips):
    """With --latent-foreground-weight W each generated latent element of a training batch carries the
    weight 1 + W where it sees a pixel that is not the table (matched clip by clip against the pool), the
    condition frame none; the held-out batch stays unweighted."""
    args = PushTTrainArgs(**{**SMALL, "batch": 6, "uncond_prob": 0.0, "latent_foreground_weight": 9.0})
    model = trainable_model(pusht_components(args), "cpu")
    pool = pusht_pool(model, clips, args.resolution_tier, "cpu", args.latent_foreground_weight)
    marked = latent_foreground(model, clips.frames)
    torch.testing.assert_close(pool.weights, 1.0 + 9.0 * marked, rtol=0, atol=0)
    # prompts of different lengths, so that the batch's rows are reordered (runs of equal lengths)
    pool = dataclasses.replace(pool, prompts=[PROMPT + " push" * (j % 3) for j in range(len(pool.prompts))])
    _, x0, generated = training_batch(model, "forward_dynamics", args, None, np.random.default_rng(1), {},
                                      {"dynamics": pool})
    for row in range(args.batch):
        (clip,) = [j for j in range(len(pool.latents)) if torch.equal(pool.latents[j], x0["video"][row])]
        weights = generated["video"][row]
        assert (weights[:, 0] == 0).all()
        torch.testing.assert_close(weights[:, 1:], pool.weights[clip, :, 1:].expand_as(weights[:, 1:]), rtol=0, atol=0)
    _, _, fixed_generated, *_ = fixed_batch(model, pool, args)
    assert fixed_generated["video"].dtype == torch.bool


def _episode(seed: int, chunks: np.ndarray) -> Clips:
    """gym-pusht's reset(seed) played through ``chunks`` by the twin: one episode of consecutive clips."""
    twin = PushTTwinEnv()
    frame, _ = twin.reset(seed=seed)
    frames = []
    for chunk in chunks:
        _, _, _, _, info = twin.step(chunk)
        frames.append(np.concatenate([frame[None], info["frames"]]))
        frame = info["frames"][-1]
    twin.close()
    zeros = np.zeros(len(chunks))
    return Clips(frames=np.stack(frames), actions=chunks, kinds=zeros, block_poses=zeros, agent_positions=zeros,
                 coverages=zeros, episodes=zeros)


@pytest.mark.parametrize("action_frame", ["canvas", "agent"])
def test_imagined_conditions_are_what_the_env_imagines_and_encodes(stand_in_model, action_frame):
    """A second code path: ``Cosmos3PushT-v0``'s own ``imagine`` from the first clip's first frame under
    its actions (the env's sampler settings, the seed the trainer draws), its last frame encoded by the
    env's condition encoder: the trainer's imagined condition of the second clip; the rest of the
    second clip's latents and its prompt are the clean pool's, and its actions are measured from that
    imagined frame as the env would measure them (the same as the clean pool's in the canvas frame)."""
    chunks = np.random.default_rng(1).uniform(100, 400, (2, 8, 2)).astype(np.float32)
    clips = _episode(4, chunks)
    args = PushTTrainArgs(**SMALL, imagined_steps=2, action_frame=action_frame)
    everything = pusht_pool(stand_in_model, clips, args.resolution_tier, "cpu", action_frame=action_frame)
    following = successors(clips, np.ones(2, dtype=bool))
    assert following.tolist() == [1]
    pool = imagined_pool(stand_in_model, clips, everything, following, args, seed=0)
    seed = int(np.random.default_rng([args.data_seed, 2, 0]).integers(0, 2 ** 62, 1)[0])
    env = Cosmos3PushTVectorEnv(1, model=stand_in_model, num_steps=2, exact_coverage=False, action_frame=action_frame)
    imagined = env.imagine(clips.frames[:1, 0], chunks[:1], [seed], [PROMPT])
    expected = model_actions(chunks[1:], imagined[:, -1] if action_frame == "agent" else None)
    (condition,) = stand_in_model.encode_action_conditions("forward_dynamics", 8, args.resolution_tier, imagined[:, -1],
                                                       expected)
    env.close()
    torch.testing.assert_close(pool.latents[0, :, 0], condition.latent[:, 0], rtol=0, atol=1e-6)
    assert not torch.allclose(pool.latents[0, :, 0], everything.latents[1, :, 0], atol=1e-2)
    torch.testing.assert_close(pool.latents[0, :, 1:], everything.latents[1, :, 1:], rtol=0, atol=0)
    torch.testing.assert_close(pool.commands, torch.from_numpy(expected), rtol=0, atol=0)
    if action_frame == "canvas":
        torch.testing.assert_close(pool.commands, everything.commands[1:], rtol=0, atol=0)
    assert pool.prompts == [PROMPT]
    shuffled = dataclasses.replace(clips, frames=clips.frames[::-1].copy())
    with pytest.raises(ValueError, match="not in order"):
        successors(shuffled, np.ones(2, dtype=bool))


def test_a_run_with_imagined_conditions_draws_them_and_imagines_again_on_schedule(tmp_path, capsys, monkeypatch):
    """Every forward-dynamics batch of a run at share 1 comes from the imagined pool (the two clips
    that follow another in the training episodes), imagined at steps 0, 2 and 4 of 5; bad settings
    are refused before anything loads, or, for clips without a second clip per episode, before
    the VAE stage."""
    import cosmos3_gym.train_pusht as trainer

    small = ["--device", "cpu", "--hidden-size", "64", "--layers", "1", "--vae-base-dim", "4", "--batch", "2",
             "--mix", "push=1", "--data-workers", "1"]
    first = tmp_path / "first"
    main([*small, "--clips", "2", "--clips-per-episode", "2", "--vae-steps", "1", "--vae-batch", "1", "--steps", "1",
          "--out", str(first)])
    drawn, batch = [], trainer.training_batch
    monkeypatch.setattr(trainer, "training_batch", lambda model, task, args, scenes, rng, tokens, pools: (
        drawn.append(len(pools["dynamics"].prompts)), batch(model, task, args, scenes, rng, tokens, pools))[1])
    main([*small, "--clips", "6", "--clips-per-episode", "3", "--held-out", "0.5", "--init-from", str(first),
          "--vae-steps", "0", "--steps", "5", "--task-weights", "forward_dynamics=1", "--imagined-conditions", "1",
          "--imagined-steps", "1", "--imagined-every", "2", "--out", str(tmp_path / "run")])
    log = json.loads((tmp_path / "run" / "training.json").read_text())["log"]
    assert [(r["step"], r["clips"]) for r in log if r["stage"] == "imagined conditions"] == [(0, 2), (2, 2), (4, 2)]
    # the fixed held-out batch (the held-out episode's 3 clips), then every step's batch from the imagined pool (the
    # 2 training clips that follow another) rather than the training pool (3 clips)
    assert drawn == [3] + [2] * 5
    refusals = ((["--imagined-conditions", "1.5"], "--imagined-conditions 1.5 is not a share in [0, 1]"),
                (["--imagined-conditions", "1", "--imagined-steps", "0"], "--imagined-steps"),
                (["--imagined-conditions", "1"], "untrained weights do not have yet; continue trained ones"),
                (["--imagined-conditions", "1", "--init-from", str(first), "--task-weights", "policy=1"],
                 "applies to forward dynamics"),
                (["--imagined-every", "3"], "--imagined-conditions is 0"),
                (["--clips", "2", "--clips-per-episode", "1", "--imagined-conditions", "0.5", "--init-from", str(first),
                  "--vae-steps", "5"], "error: --imagined-conditions needs episodes of two clips or more, but "
                                       "--clips-per-episode is 1"))
    for flags, message in refusals:
        with pytest.raises(SystemExit) as exit_info:
            main([*small, *flags, "--out", str(tmp_path / "refused")])
        assert exit_info.value.code == 2 and message in capsys.readouterr().err
    assert not (tmp_path / "refused").exists()


def test_the_action_frame_is_the_continued_checkpoints_unless_given_and_the_record_says_it(tmp_path):
    """An empty ``--action-frame`` takes ``--init-from``'s (canvas for the shipped model, agent for a
    checkpoint whose record says so, canvas without a checkpoint); a given one wins; a bad one is refused."""
    assert PushTTrainArgs(**SMALL).action_frame == "canvas"
    assert PushTTrainArgs(device="cpu", init_from=PUSHT_CHECKPOINT, vae_steps=0).action_frame == "canvas"
    agent = tmp_path / "agent"
    agent.mkdir()
    (agent / "training.json").write_text(json.dumps({"args": {"action_frame": "agent"}}))
    assert PushTTrainArgs(**SMALL, init_from=str(agent), vae_steps=0).action_frame == "agent"
    assert PushTTrainArgs(**SMALL, init_from=str(agent), vae_steps=0, action_frame="canvas").action_frame == "canvas"
    with pytest.raises(ValueError, match=r"--action-frame 'relative' is invalid; use one of \('canvas', 'agent'\)"):
        PushTTrainArgs(**SMALL, action_frame="relative")
