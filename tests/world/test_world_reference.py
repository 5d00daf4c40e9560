"""docs/worlds.md is what the world envs' docstrings and spaces say today."""

import pytest

from cosmos3_gym.world.reference import PAGE, markdown, page


@pytest.fixture(scope="module")
def text():
    """The page as the generator writes it (it builds each world env, PushT's too)."""
    pytest.importorskip("gym_pusht")
    return page()


def test_the_world_reference_page_is_up_to_date(text):
    assert PAGE.read_text() == text, "docs/worlds.md is stale: run python -m cosmos3_gym.world.reference"


def test_the_page_has_every_world_env_its_spaces_and_its_vector_envs_details(text):
    import re

    import cosmos3_gym

    assert all(f"## `{env_id}`" in text for env_id in cosmos3_gym.WORLD_ENV_IDS + cosmos3_gym.PUSHT_ENV_IDS)
    assert "| ground truth | `Box` float32 (8, 2) in [-1, 1] | `Box` uint8 (32, 32, 3) |" in text
    assert "| imagined by Cosmos 3 | `Box` float32 (8, 2) in [0, 512] | `Box` uint8 (96, 96, 3) |" in text
    assert '### `gym.make_vec("Cosmos3World-v0", num_envs=n)`: `Cosmos3WorldVectorEnv`' in text
    assert "success_margin" in text and "exact_coverage" in text  # the vector envs' own arguments
    # each row links to its section: the anchor a heading gets (lower case, backquotes and dots dropped)
    anchors = {re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-") for heading in re.findall(r"^#+ (.*)$", text, re.M)}
    links = re.findall(r"\]\(#([^)]*)\)", text)
    assert len(links) == 4 and set(links) <= anchors, (links, anchors)


def test_docstrings_read_as_markdown():
    doc = "Sum.\n\n## Rewards\n:func:`~a.b.task_reward` of ``frames``; :data:`a.MAX` px."
    assert markdown(doc) == "Sum.\n\n### Rewards\n`task_reward` of `frames`; `a.MAX` px."


@pytest.mark.parametrize("env_id", ["Cosmos3World-v0", "Cosmos3PushT-v0"])
def test_an_imagined_envs_arguments_line_is_its_vector_envs_signature(env_id):
    """The single env's docstring (what ``help(env.unwrapped)`` shows) lists every keyword the env
    takes with its default, as the vector env's signature has them."""
    import ast
    import inspect
    import re

    import gymnasium as gym

    from cosmos3_gym.world import pusht

    spec = gym.spec(env_id)
    env_class = gym.envs.registration.load_env_creator(spec.entry_point)
    vector_class = inspect.signature(gym.envs.registration.load_env_creator(spec.vector_entry_point)).return_annotation
    vector_class = getattr(inspect.getmodule(env_class), vector_class)
    line = re.search(rf'``gym.make\("{env_id}", (.*?)\)``', " ".join(inspect.getdoc(env_class).split()), re.S)[1]
    listed = dict(item.split("=", 1) for item in line.split(", "))
    expected = {name: p.default for name, p in inspect.signature(vector_class).parameters.items()
                if name not in ("num_envs", "autoreset_mode")}
    assert sorted(listed) == sorted(expected)
    names = {"PROMPT": pusht.PROMPT}
    assert {name: names[text] if text in names else ast.literal_eval(text) for name, text in listed.items()} == expected
