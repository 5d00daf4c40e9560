"""CUDA graphs of the mid-episode forward: replays equal the eager forward bit for bit, follow new
inputs and new weights, and change no trajectory. The GPU tests run only where CUDA is."""

import pytest
import torch

from cosmos3_gym.model.model import Cosmos3Model
from cosmos3_gym.model.packing import RowSpec

gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def test_graphs_off_cuda_are_refused_before_anything_loads():
    with pytest.raises(ValueError, match=r"cuda_graphs=True needs a CUDA device.*cuda_graphs=False"):
        Cosmos3Model.embedded(device="cpu", cuda_graphs=True)
    with pytest.raises(ValueError, match=r"cuda_graphs='false' is not a bool; pass True, False or None"):
        Cosmos3Model.embedded(device="cpu", cuda_graphs="false")
    assert Cosmos3Model.embedded(device="cpu").cuda_graphs is False


def _rows(model, prompts=("a red ball", "a much longer prompt about a green square sliding to the left")):
    shape = model.latent_shape(9, 64, 64)
    return [RowSpec(tuple(model.tokenize(p, "", 9, 64, 64, 24.0)[0]), *shape[1:], 24.0) for p in prompts], shape


def _velocities(model, packed, latents, timesteps, graphs):
    model.cuda_graphs = graphs
    return torch.stack([v["video"] for v in model.velocity(packed, {"video": latents}, timesteps)])


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("size", ["tiny", "edge"])
def test_a_replayed_graph_equals_the_eager_forward_bit_for_bit(size):
    from cosmos3_gym.bench import random_model

    model = Cosmos3Model.embedded(device="cuda") if size == "tiny" else random_model("edge", "cuda")
    rows, shape = _rows(model)
    packed = model.pack(rows)
    generator = torch.Generator("cuda").manual_seed(0)
    inputs = [([torch.randn(1, *shape, device="cuda", generator=generator) for _ in rows], [900.0 - 100 * k] * 2)
              for k in range(4)]
    _velocities(model, packed, *inputs[0], graphs=True)  # the text cache
    eager = [_velocities(model, packed, *step, graphs=False) for step in inputs[1:]]
    assert packed.forward_graph is None
    graphed = [_velocities(model, packed, *step, graphs=True) for step in inputs[1:]]  # capture, replay, replay
    assert packed.forward_graph is not None
    for a, b in zip(graphed, eager):
        assert torch.equal(a, b)
    assert not torch.equal(graphed[1], graphed[2])  # each replay read its own inputs


@gpu
@pytest.mark.gpu
def test_a_weight_update_recaptures_the_graph():
    model = Cosmos3Model.embedded(device="cuda")
    rows, shape = _rows(model)
    packed = model.pack(rows)
    latents = [torch.randn(1, *shape, device="cuda") for _ in rows]
    for _ in range(3):  # text cache, capture, replay
        before = _velocities(model, packed, latents, [500.0] * 2, graphs=True)
    new = {name: p * 1.01 for name, p in model.transformer.named_parameters()}
    model.update_weights(new)
    graphed = [_velocities(model, packed, latents, [500.0] * 2, graphs=True) for _ in range(3)]
    eager = _velocities(model, packed, latents, [500.0] * 2, graphs=False)
    assert not torch.equal(graphed[-1], before)
    for velocity in graphed:
        assert torch.equal(velocity, eager)


@gpu
@pytest.mark.gpu
def test_an_episode_with_graphs_is_the_episode_without_them():
    from cosmos3_gym.env.vector_env import Cosmos3RolloutVectorEnv

    trajectories = {}
    for graphs in (False, True):
        model = Cosmos3Model.embedded(device="cuda", cuda_graphs=graphs)
        venv = Cosmos3RolloutVectorEnv(4, num_steps=5, model=model, reward="none")
        venv.reset(seed=3)
        for _ in range(5):
            _, _, _, _, info = venv.step(torch.tensor(venv.default_action, device="cuda").repeat(4, 1))
        trajectories[graphs] = list(info["trajectory"])
        packed = venv.engine._packed[1][True]
        assert (packed.forward_graph is not None) == graphs
    for eager, graphed in zip(trajectories[False], trajectories[True]):
        assert torch.equal(eager.latents, graphed.latents)
        assert torch.equal(eager.log_probs, graphed.log_probs)


def test_action_heads_without_host_checks_compute_what_diffusers_computes(tiny_model):
    """The action heads run unchecked while a graph is captured: the same numbers as diffusers'
    own forward, for both input ranks, and diffusers' forward is back afterwards."""
    from diffusers.models.transformers.transformer_cosmos3 import DomainAwareLinear

    from cosmos3_gym.model.diffusers_private import action_heads_without_host_checks

    heads = [m for m in tiny_model.transformer.modules() if isinstance(m, DomainAwareLinear)]
    assert len(heads) == 2
    generator = torch.Generator().manual_seed(0)
    for head in heads:
        domains = torch.randint(0, head.num_domains, (5,), generator=generator)
        for x in (torch.randn(5, head.input_size, generator=generator),
                  torch.randn(5, 3, head.input_size, generator=generator)):
            expected = head(x, domains)
            with action_heads_without_host_checks(tiny_model.transformer):
                assert torch.equal(head(x, domains), expected)
                assert "forward" in vars(head)  # the unchecked forward is the instance's
        assert "forward" not in vars(head)
    hook = heads[0].forward = lambda x, domain_id: "a hook's forward"  # e.g. accelerate's, on the instance
    with action_heads_without_host_checks(tiny_model.transformer):
        assert heads[0].forward is not hook
    assert heads[0].forward is hook
    del heads[0].forward
    with pytest.raises(ValueError, match="domain_id must be in"):
        heads[0](torch.randn(1, heads[0].input_size), torch.tensor([heads[0].num_domains]))


@gpu
@pytest.mark.gpu
def test_imagined_chunks_with_graphs_are_the_chunks_without_them():
    """Action rows (forward dynamics in the world env) are graphed too."""
    import numpy as np

    from cosmos3_gym.world.envs import Cosmos3WorldVectorEnv

    actions = np.random.default_rng(0).uniform(-1, 1, (3, 4, 8, 2)).astype(np.float32)
    frames = {}
    for graphs in (False, True):
        venv = Cosmos3WorldVectorEnv(4, model=Cosmos3Model.embedded(device="cuda", cuda_graphs=graphs))
        frames[graphs] = [venv.reset(seed=5)[0]] + [venv.step(a)[0] for a in actions]
    for eager, graphed in zip(frames[False], frames[True]):
        np.testing.assert_array_equal(eager, graphed)
