"""The procedural world's trainer conditioned on its own imaginings (``--imagined-conditions``): in closed
loop ``Cosmos3World-v0`` conditions every chunk after the first on a frame the model imagined, so the
trainer can too. Its imagined pool holds the second of two chunks played in the true world, conditioned on
the first one as the world env imagines it; targets, commands and loss weights stay the true chunk's."""

import json
import re

import numpy as np
import pytest
import torch

from cosmos3_gym.model.model import Cosmos3Model
from cosmos3_gym.model.tasks import Task
from cosmos3_gym.model.tiny_model import TINY_CHECKPOINT
from cosmos3_gym.rollout.procedural_world import BACKGROUND, MAX_SPEED, SIZES, action_chunks, draw, locate, \
    object_pixels, replay_from
from cosmos3_gym.train.world_model import ActionPool, TrainArgs, latent_cells, main, with_imagined, world_imaginer
from cosmos3_gym.world.envs import Cosmos3WorldVectorEnv

COUNT, SEED, CHUNK, TIER = 4, 11, 8, 256
MIX = {"expert": 1.0}  # pushes toward the goal: the object moves a few pixels a chunk


@pytest.fixture(scope="module")
def model():
    return Cosmos3Model.from_pretrained(TINY_CHECKPOINT, device="cpu")


def test_the_pool_is_the_second_chunk_conditioned_on_the_first_one_imagined(model):
    args = TrainArgs(device="cpu", init_from=str(TINY_CHECKPOINT), imagined_conditions=1.0,
                     task_weights="forward_dynamics=1")
    pool = ActionPool.build(model, COUNT, MIX, SEED, TIER, "cpu", 2.0, world_imaginer(model, args))
    # the same draws by hand: two chunks per task, the first imagined by a world env of the defaults
    rng = np.random.default_rng(SEED)
    tasks, frames, moves = action_chunks(rng, COUNT, 2 * CHUNK, mix=MIX)
    world = Cosmos3WorldVectorEnv(32, model=model)
    imagined = world.imagine(frames[:, 0], moves[:, :CHUNK], rng.integers(0, 2**62, COUNT).tolist(),
                             [task.prompt for task in tasks])
    second = frames[:, CHUNK:]
    true_latents = model.encode_action_clips(second, TIER, CHUNK + 1)
    assert pool.prompts == [task.prompt for task in tasks]
    assert torch.equal(pool.commands, torch.from_numpy(moves[:, CHUNK:]))
    assert torch.equal(pool.latents[:, :, 1:], true_latents[:, :, 1:])  # the targets: the true frames
    assert torch.equal(pool.latents[:, :, :1], model.encode_action_clips(imagined[:, -1:], TIER, CHUNK + 1, given=1))
    assert not torch.equal(pool.latents[:, :, :1], true_latents[:, :, :1])  # an imagined frame, not the true one
    mask = torch.from_numpy(object_pixels(second)).float().unsqueeze(1)
    assert torch.equal(pool.weights, 1.0 + 2.0 * latent_cells(model, mask))
    # the imagined frame is where the first chunk ends (the second's true start), not where it began
    ends = np.array([np.subtract(locate(a), locate(b)) for a, b in zip(imagined[:, -1], second[:, 0])]) * 32
    starts = np.array([np.subtract(locate(a), locate(b)) for a, b in zip(imagined[:, -1], frames[:, 0])]) * 32
    assert np.median(np.hypot(*ends.T)) < 2.0 < np.median(np.hypot(*starts.T)), (ends, starts)


def test_replayed_targets_carry_on_from_where_the_imagined_frame_shows_the_object(model):
    """--imagined-replay: the targets are the second chunk's commands played from the imagined object's place,
    built here by hand (the centre the frame shows, plus the commands' running sum; no wall is met)."""
    args = TrainArgs(device="cpu", init_from=str(TINY_CHECKPOINT), imagined_conditions=1.0, imagined_replay=True,
                     task_weights="forward_dynamics=1")
    imagine, seen = world_imaginer(model, args), []
    pool = ActionPool.build(model, COUNT, MIX, SEED, TIER, "cpu", 2.0,
                            lambda *call: seen.append(imagine(*call)) or seen[-1], replay=True)
    last = np.concatenate(seen)[:, -1]
    tasks, frames, moves = action_chunks(np.random.default_rng(SEED), COUNT, 2 * CHUNK, mix=MIX)
    starts = np.array([locate(frame) for frame in last]) * 32
    paths = starts[:, None] + MAX_SPEED * np.cumsum(np.concatenate([np.zeros((COUNT, 1, 2)), moves[:, CHUNK:]], 1), 1)
    halves = np.array([SIZES[task.size] for task in tasks])[:, None, None]
    assert ((paths >= halves + 0.5) & (paths <= 32 - halves - 0.5)).all()  # clear of the walls
    replayed = np.stack([[draw(task, tuple(p)) for p in path] for task, path in zip(tasks, paths)])
    assert torch.equal(pool.latents[:, :, 1:], model.encode_action_clips(replayed, TIER, CHUNK + 1)[:, :, 1:])
    assert torch.equal(pool.latents[:, :, :1], model.encode_action_clips(last[:, None], TIER, CHUNK + 1, given=1))
    assert torch.equal(pool.commands, torch.from_numpy(moves[:, CHUNK:]))
    mask = torch.from_numpy(object_pixels(replayed)).float().unsqueeze(1)
    assert torch.equal(pool.weights, 1.0 + 2.0 * latent_cells(model, mask))
    true_starts = np.array([locate(frame) for frame in frames[:, CHUNK]]) * 32
    assert np.abs(starts - true_starts).max() > 0.5  # the imagined places are not the true ones
    assert replay_from(np.full((32, 32, 3), BACKGROUND, np.uint8), tasks[0], moves[0, CHUNK:]) is None


def test_forward_dynamics_batches_draw_from_the_imagined_pool_at_the_share_given():
    pools, imagined = {"dynamics": "true", "expert": "expert"}, "imagined"
    rng = np.random.default_rng(0)
    drawn = [with_imagined(pools, imagined, Task.FORWARD_DYNAMICS, 0.25, rng)["dynamics"] for _ in range(4000)]
    assert abs(drawn.count("imagined") / 4000 - 0.25) < 0.03
    for task in (Task.INVERSE_DYNAMICS, Task.POLICY, Task.T2V):
        assert with_imagined(pools, imagined, task, 1.0, rng) is pools
    state = rng.bit_generator.state
    assert with_imagined(pools, None, Task.FORWARD_DYNAMICS, 1.0, rng) is pools
    assert rng.bit_generator.state == state  # a run without the pool draws what it drew before it existed


@pytest.mark.parametrize("flags, message", [
    (dict(imagined_conditions=0.5), "untrained weights do not have yet; continue trained ones with --init-from"),
    (dict(imagined_conditions=1.5, init_from="x"), "--imagined-conditions 1.5 is not a share in [0, 1]"),
    (dict(imagined_conditions=0.5, init_from="x", task_weights="t2v=1,policy=1"),
     "--task-weights 't2v=1,policy=1' leaves out; add forward_dynamics=W"),
    (dict(imagined_every=10), "--imagined-every refreshes the imagined conditions, but --imagined-conditions is 0"),
    (dict(imagined_conditions=0.5, init_from="x", task_weights="forward_dynamics=1", steps=100, imagined_every=100),
     "--imagined-every 100 is not below --steps 100, so the conditions would be imagined once"),
    (dict(imagined_replay=True), "--imagined-replay sets the targets of the imagined conditions, but"),
    (dict(imagined_pool=0), "--imagined-pool 0 is too small; use 1 or more"),
    (dict(imagined_steps=0), "--imagined-steps 0 is too small; use 1 or more"),
])
def test_bad_imagined_flags_are_refused_before_anything_loads(flags, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        TrainArgs(device="cpu", **flags)


def test_a_run_imagines_its_conditions_on_schedule_and_trains(tmp_path):
    main(["--device", "cpu", "--init-from", str(TINY_CHECKPOINT), "--vae-steps", "0", "--steps", "2", "--batch", "2",
          "--action-pool", "4", "--imagined-pool", "4", "--imagined-steps", "2", "--imagined-conditions", "1",
          "--imagined-every", "1", "--task-weights", "forward_dynamics=1", "--data-workers", "0", "--log-every", "1",
          "--out", str(tmp_path)])
    record = json.loads((tmp_path / "training.json").read_text())
    imagined = [r for r in record["log"] if r["stage"] == "imagined conditions"]
    assert [(r["step"], r["chunks"]) for r in imagined] == [(0, 4), (1, 4)]
    assert [r["step"] for r in record["log"] if r["stage"] == "transformer"] == [0, 1]
    assert record["args"]["imagined_conditions"] == 1.0
