"""FlexAttention document masks (the GPU path) equal the padded-SDPA path, row by row."""

import pytest
import torch

from cosmos3_gym.generator import Cosmos3Generator
from cosmos3_gym.packing import FLEX_PAD_MULTIPLE, RowSpec


@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")
def test_flex_and_sdpa_backends_agree(tiny_generator):
    with pytest.raises(ValueError, match="attention='dense'"):
        Cosmos3Generator(tiny_generator.pipeline, "cpu", torch.float32, attention="dense")
    flex = Cosmos3Generator(tiny_generator.pipeline, "cpu", torch.float32, attention="flex")  # shares the model
    shape = tiny_generator.latent_shape(9, 32, 32)
    prompts = ["a red ball", "a green square slides to the left", "", "a blue ball falls down"]
    rows = [RowSpec(tuple(tiny_generator.tokenize(p, "", 9, 32, 32, 24.0)[0]), *shape[1:], 24.0) for p in prompts]
    g = torch.Generator().manual_seed(0)
    latents = [torch.randn(1, *shape, generator=g) for _ in rows]
    timesteps = [999.0, 700.0, 400.0, 100.0]
    packed_flex = flex.pack(rows)
    assert packed_flex.und_len % FLEX_PAD_MULTIPLE == 0 and packed_flex.und_len > sum(len(r.input_ids) for r in rows)
    v_flex = flex.velocity(packed_flex, latents, timesteps)
    tiny_generator.install_processors()  # the shared model gets its own processors back
    v_sdpa = tiny_generator.velocity(tiny_generator.pack(rows), latents, timesteps)
    for a, b in zip(v_flex, v_sdpa):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-5)
    assert (v_sdpa[0] - v_sdpa[1]).abs().max() > 1e-2
