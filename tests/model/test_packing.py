"""Consecutive rows of one shape reach the transformer as one item, their latents joined along
time; each row's prediction is what the transformer gives that row as an item of its own."""

import math

import torch

from cosmos3_gym.model.packing import RowSpec
from cosmos3_gym.model.tasks import checked_domain

CHUNK = 8


def velocities_with_one_item_per_row(model, packed, latents, timesteps):
    """The same forward with one transformer item per row, as the pipeline passes one request:
    diffusers packs and unpacks every row itself (the second code path)."""
    rows, p = packed.rows, model.transformer.config.latent_patch_size
    kwargs = packed.transformer_kwargs(latents, timesteps, torch.float32)
    kwargs.update(
        vision_tokens=latents["video"],
        vision_token_shapes=[(r.latent_frames, math.ceil(r.latent_height / p), math.ceil(r.latent_width / p))
                             for r in rows],
        vision_noisy_frame_indexes=[torch.tensor([f for f in range(r.latent_frames) if f not in r.clean_frames],
                                                 dtype=torch.long) for r in rows])
    if "action" in latents:
        kwargs.update(
            action_tokens=latents["action"], action_token_shapes=[(r.action_len, 1, 1) for r in rows],
            action_noisy_frame_indexes=[torch.tensor([a for a in range(r.action_len) if a not in r.clean_actions],
                                                     dtype=torch.long) for r in rows],
            action_domain_ids=[torch.tensor([r.domain_id]) for r in rows])
    context = model.context
    context.packed, context.text_cached = packed, False
    context.new_text_cache = [None] * model.transformer.config.num_hidden_layers
    try:
        with torch.no_grad():
            video, _, action = model.transformer(**kwargs)
    finally:
        context.packed, context.new_text_cache = None, None
    return [v.squeeze(0) for v in video], action


def assert_rows_equal(model, rows, latents, items):
    packed = model.pack(rows)
    assert packed.items == items
    timesteps = [900.0 - 100.0 * i for i in range(len(rows))]
    joined = model.velocity(packed, latents, timesteps)
    video, action = velocities_with_one_item_per_row(model, packed, latents, timesteps)
    for j, row in enumerate(joined):
        assert torch.equal(row["video"], video[j])
        assert row["video"].is_contiguous()
        if action is not None:
            assert torch.equal(row["action"], action[j])
    # the rows really differ, and clean frames are predicted as zero
    assert (joined[0]["video"] - joined[1]["video"]).abs().max() > 1e-2
    for row, spec in zip(joined, rows):
        for f in spec.clean_frames:
            assert not row["video"][:, f].any()


def test_video_rows_join_by_latent_grid(tiny_model):
    video, image = tiny_model.latent_shape(9, 32, 32), tiny_model.latent_shape(1, 32, 32)

    def row(prompt, shape, clean=()):
        return RowSpec(tuple(tiny_model.tokenize(prompt, "", 9, 32, 32, 24.0)[0]), *shape[1:], 24.0, clean)

    # an image row splits the videos; a conditioned video (clean frame 0) joins the plain ones
    rows = [row("a red ball", video), row("a green square slides left", video), row("a blue ball", image),
            row("a yellow ball", video, (0,)), row("", video)]
    g = torch.Generator().manual_seed(0)
    latents = {"video": [torch.randn(1, video[0], r.latent_frames, r.latent_height, r.latent_width, generator=g)
                         for r in rows]}
    assert_rows_equal(tiny_model, rows, latents, [(0, 2), (2, 1), (3, 2)])


def test_action_rows_join_by_domain(tiny_model):
    shape = tiny_model.latent_shape(9, 32, 32)
    action_dim = tiny_model.transformer.config.action_dim

    pusht, raw_dim = checked_domain("pusht", action_dim)

    def row(prompt, mode, domain_id):
        clean_frames = tuple(range(shape[1])) if mode == "inverse_dynamics" else (0,)
        clean_actions = tuple(range(CHUNK)) if mode == "forward_dynamics" else ()
        return RowSpec(tuple(tiny_model.tokenize(prompt, "", 9, 32, 32, 24.0)[0]), *shape[1:], 24.0, clean_frames,
                       action_len=CHUNK, clean_actions=clean_actions, domain_id=domain_id, raw_action_dim=raw_dim)

    # forward dynamics, inverse dynamics and policy rows of one domain join; another domain splits
    rows = [row("push the red ball up", "forward_dynamics", pusht), row("move it left", "inverse_dynamics", pusht),
            row("to the top left", "policy", pusht), row("the same arm, another domain", "policy", pusht + 1)]
    g = torch.Generator().manual_seed(1)
    latents = {"video": [torch.randn(1, *shape, generator=g) for _ in rows],
               "action": [torch.randn(CHUNK, action_dim, generator=g) for _ in rows]}
    assert_rows_equal(tiny_model, rows, latents, [(0, 3), (3, 1)])
