"""FlexAttention document masks (the GPU path) equal the padded-SDPA path, row by row."""

import copy

import pytest
import torch

from cosmos3_gym.model.model import Cosmos3Model
from cosmos3_gym.model.packing import FLEX_PAD_MULTIPLE, RowSpec
from cosmos3_gym.env.vector_env import Cosmos3RolloutVectorEnv


@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")
def test_flex_and_sdpa_backends_agree(tiny_model):
    with pytest.raises(ValueError, match="attention='dense'"):
        Cosmos3Model(tiny_model.pipeline, "cpu", torch.float32, attention="dense")
    # Shares the model; compile=False keeps the shared modules uncompiled for the other tests.
    flex = Cosmos3Model(tiny_model.pipeline, "cpu", torch.float32, attention="flex", compile=False)
    shape = tiny_model.latent_shape(9, 32, 32)
    prompts = ["a red ball", "a green square slides to the left", "", "a blue ball falls down"]
    rows = [RowSpec(tuple(tiny_model.tokenize(p, "", 9, 32, 32, 24.0)[0]), *shape[1:], 24.0) for p in prompts]
    g = torch.Generator().manual_seed(0)
    latents = [torch.randn(1, *shape, generator=g) for _ in rows]
    timesteps = [999.0, 700.0, 400.0, 100.0]
    packed_flex = flex.pack(rows)
    assert packed_flex.und_len % FLEX_PAD_MULTIPLE == 0 and packed_flex.und_len > sum(len(r.input_ids) for r in rows)
    v_flex = flex.velocity(packed_flex, {"video": latents}, timesteps)
    tiny_model.install_processors()  # the shared model gets its own processors back
    v_sdpa = tiny_model.velocity(tiny_model.pack(rows), {"video": latents}, timesteps)
    for a, b in zip(v_flex, v_sdpa):
        a, b = a["video"], b["video"]
        torch.testing.assert_close(a, b, rtol=0, atol=1e-5)
    assert (v_sdpa[0]["video"] - v_sdpa[1]["video"]).abs().max() > 1e-2


def test_compiled_vision_pathway_matches_eager(tiny_model):
    """The GPU path compiles norms, MLPs and rotary embeddings; the math must not change."""
    pipeline = copy.deepcopy(tiny_model.pipeline)
    compiled = Cosmos3Model(pipeline, "cpu", torch.float32, compile=True)
    shape = tiny_model.latent_shape(9, 32, 32)
    rows = [RowSpec(tuple(tiny_model.tokenize(p, "", 9, 32, 32, 24.0)[0]), *shape[1:], 24.0)
            for p in ("a red ball", "a blue ball falls")]
    latents = [torch.randn(1, *shape, generator=torch.Generator().manual_seed(i)) for i in range(2)]
    for text_cached_step in range(2):  # the recording forward, then the text-cached one
        packed_c, packed_e = compiled.pack(rows), tiny_model.pack(rows)
        for _ in range(text_cached_step + 1):
            v_compiled = compiled.velocity(packed_c, {"video": latents}, [800.0, 300.0])
            v_eager = tiny_model.velocity(packed_e, {"video": latents}, [800.0, 300.0])
        for a, b in zip(v_compiled, v_eager):
            a, b = a["video"], b["video"]
            torch.testing.assert_close(a, b, rtol=0, atol=1e-5)


def test_the_unconditional_rows_and_a_groups_conditional_rows_attend_as_two_batches(tiny_model):
    """pack_cfg_rows puts the conditional rows first, then the unconditional ones, so a GRPO group
    (one prompt, one negative prompt) is two runs of equal-length rows: two SDPA calls per layer."""
    from cosmos3_gym.rollout.transition import pack_cfg_rows

    venv = Cosmos3RolloutVectorEnv(4, num_steps=2, reward="none", model=tiny_model,
                                   prompts=("a big red ball slides to the right",))
    venv.reset(seed=0)
    engine = venv.engine
    episodes = [engine.episode(i) for i in range(4)]
    packed = pack_cfg_rows(tiny_model, [(e.cond_ids, e.uncond_ids, e.row) for e in episodes])
    cond, uncond = len(episodes[0].cond_ids), len(episodes[0].uncond_ids)
    assert cond != uncond
    assert [(rows, und_len) for _, _, rows, und_len, _ in packed.layout.runs] == [(4, cond), (4, uncond)]
    assert [row.input_ids for row in packed.rows] == [tuple(e.cond_ids) for e in episodes] + [
        tuple(e.uncond_ids) for e in episodes]
