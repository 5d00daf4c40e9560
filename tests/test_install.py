"""A non-editable `pip install .` registers the env ids and ships presets and the tiny model."""

import os
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Every Cosmos 3 env id (Cosmos3PushT-v0 too: registered without gym-pusht, it says what to install).
COSMOS3_IDS = sorted(['Cosmos3ForwardDynamicsRollout-v0', 'Cosmos3InverseDynamicsRollout-v0', 'Cosmos3PolicyRollout-v0',
                      'Cosmos3PushT-v0', 'Cosmos3Rollout-v0', 'Cosmos3RolloutAV-v0', 'Cosmos3RolloutI2V-v0',
                      'Cosmos3RolloutT2I-v0', 'Cosmos3RolloutV2V-v0', 'Cosmos3World-v0'])


def test_non_editable_install_registers_env_ids(tmp_path):
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    python = env_dir / "bin" / "python"
    # Dependencies and the build backend come from this interpreter's environment (appended after the
    # venv's own site-packages), so that the install needs no package index.
    new_site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                              check=True, capture_output=True, text=True).stdout.strip()
    outer = [p for p in sys.path if p and os.path.isdir(p) and Path(p).resolve() != ROOT]
    Path(new_site, "_deps.pth").write_text("\n".join(outer) + "\n")
    subprocess.run([python, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", str(ROOT)],
                   check=True, env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1",
                                    "PYTHONPATH": os.pathsep.join(outer)})  # this setuptools, not the venv's
    code = (
        "import gymnasium as gym, cosmos3_gym, pathlib;"
        "assert 'site-packages' in cosmos3_gym.__file__, cosmos3_gym.__file__;"
        "print(sorted(i for i in gym.registry if i.startswith('Cosmos3')));"
        "env = gym.make('Cosmos3RolloutT2I-v0', num_steps=1); env.reset(seed=0);"
        "print(env.step(env.unwrapped.default_action)[2])"
    )
    out = subprocess.run([python, "-c", code], cwd=tmp_path, check=True, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": ""}).stdout
    assert str(COSMOS3_IDS) in out
    assert out.strip().endswith("True")
