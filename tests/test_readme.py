"""Every README snippet runs as written, each in a fresh interpreter."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
SNIPPETS = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def test_the_readme_has_snippets():
    assert len(SNIPPETS) >= 4


@pytest.mark.slow
@pytest.mark.parametrize("index", range(len(SNIPPETS)))
def test_snippet_runs_in_a_fresh_interpreter(index, tmp_path):
    result = subprocess.run([sys.executable, "-c", SNIPPETS[index]], cwd=tmp_path, capture_output=True, text=True,
                            timeout=600, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert result.returncode == 0, f"README snippet {index + 1} failed:\n{SNIPPETS[index]}\n{result.stderr[-3000:]}"
    if "trajectory.save" in SNIPPETS[index]:
        assert (tmp_path / "episode.safetensors").exists() and "ratio - 1: 0.0" in result.stdout
    if "update_weights" in SNIPPETS[index]:
        assert result.stdout.strip().endswith("weights_version 1")
