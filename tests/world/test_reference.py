"""docs/worlds.md is what the world envs' docstrings and spaces say today."""

import pytest

from cosmos3_gym.world.reference import PAGE, markdown, page

pytest.importorskip("gym_pusht")


def test_the_world_reference_page_is_up_to_date():
    assert PAGE.read_text() == page(), "docs/worlds.md is stale: run python -m cosmos3_gym.world.reference"


def test_the_page_has_every_world_env_its_spaces_and_its_vector_envs_details():
    import cosmos3_gym

    text = page()
    assert all(f"## `{env_id}`" in text for env_id in cosmos3_gym.WORLD_ENV_IDS + cosmos3_gym.PUSHT_ENV_IDS)
    assert "| ground truth | `Box` float32 (8, 2) in [-1, 1] | `Box` uint8 (32, 32, 3) |" in text
    assert "| imagined by Cosmos 3 | `Box` float32 (8, 2) in [0, 512] | `Box` uint8 (96, 96, 3) |" in text
    assert '### `gym.make_vec("Cosmos3World-v0", num_envs=n)`: `Cosmos3WorldVectorEnv`' in text
    assert "success_margin" in text and "exact_coverage" in text  # the vector envs' own arguments


def test_docstrings_read_as_markdown():
    doc = "Sum.\n\n## Rewards\n:func:`~a.b.task_reward` of ``frames``; :data:`a.MAX` px."
    assert markdown(doc) == "Sum.\n\n### Rewards\n`task_reward` of `frames`; `a.MAX` px."
