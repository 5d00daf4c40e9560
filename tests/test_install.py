"""A non-editable `pip install .` registers the env ids and ships presets and the tiny model."""

import os
import site
import subprocess
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_non_editable_install_registers_env_ids(tmp_path):
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    python = env_dir / "bin" / "python"
    # Dependencies come from this interpreter's environment (appended after the venv's own site-packages).
    new_site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                              check=True, capture_output=True, text=True).stdout.strip()
    Path(new_site, "_deps.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    subprocess.run([python, "-m", "pip", "install", "-q", "--no-deps", str(ROOT)],
                   check=True, env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"})
    code = (
        "import gymnasium as gym, cosmos3_gym, pathlib;"
        "assert 'site-packages' in cosmos3_gym.__file__, cosmos3_gym.__file__;"
        "print(sorted(i for i in gym.registry if i.startswith('Cosmos3')));"
        "env = gym.make('Cosmos3RolloutT2I-v0', num_steps=1); env.reset(seed=0);"
        "print(env.step(env.unwrapped.default_action)[2])"
    )
    out = subprocess.run([python, "-c", code], cwd=tmp_path, check=True, capture_output=True, text=True).stdout
    assert "['Cosmos3Rollout-v0', 'Cosmos3RolloutT2I-v0']" in out
    assert out.strip().endswith("True")
