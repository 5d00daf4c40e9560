"""docs/envs.md is what the presets and the envs' spaces say today."""

from cosmos3_gym.env.reference import PAGE, page


def test_the_env_reference_page_is_up_to_date():
    assert PAGE.read_text() == page(), "docs/envs.md is stale: run python -m cosmos3_gym.env.reference"


def test_the_page_names_every_preset_and_its_observation_keys():
    import cosmos3_gym

    text = page()
    assert all(f"## `{env_id}`" in text for env_id in cosmos3_gym.ENV_IDS)
    assert "`sound_latent` float32" in text and "`action_latent` float32" in text
