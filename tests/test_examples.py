"""The examples run (at a small scale) and the notebook executes, so that none of them rots."""

import dataclasses
import importlib.util
import json
import re
import runpy
import subprocess
import sys
from pathlib import Path

import imageio.v2 as imageio
import nbformat
import pytest
from nbclient import NotebookClient

pytestmark = pytest.mark.slow  # the slowest quarter of the suite: `pytest -m "not slow"` skips it

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def run(script, *flags, tmp_path):
    result = subprocess.run([sys.executable, str(EXAMPLES / script), "--out", str(tmp_path), *flags],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout


def test_quickstart(tmp_path):
    out = run("quickstart.py", "--gallery", "2", tmp_path=tmp_path)
    assert "log_prob" in out and (tmp_path / "quickstart.gif").exists() and (tmp_path / "rollouts.gif").exists()


def test_ppo_control_smoke(tmp_path):
    out = run("ppo_control.py", "--quick", "--num-envs", "4", "--total-timesteps", "256", tmp_path=tmp_path)
    assert "episodes; mean reward" in out and (tmp_path / "ppo_reward.png").exists()


def test_grpo_finetune_smoke(tmp_path):
    out = run("grpo_finetune.py", "--num-groups", "2", "--group-size", "2", "--num-steps", "2", "--iterations", "2",
              tmp_path=tmp_path)
    assert "weights_version 2" in out and (tmp_path / "grpo_reward.png").exists()


def test_policy_grpo_smoke(tmp_path):
    out = run("policy_grpo.py", "--quick", "--num-groups", "2", "--group-size", "2", "--num-steps", "2",
              "--iterations", "2", tmp_path=tmp_path)
    assert "weights_version 2" in out and (tmp_path / "policy_grpo.png").exists()
    record = json.loads((tmp_path / "policy_grpo.json").read_text())
    first = float(re.search(r"over the first 1 iterations: ([0-9.]+)", out).group(1))
    assert len(record["success_rate"]) == 2 and round(record["success_rate"][0], 3) == first
    assert record["args"]["iterations"] == 2 and all(r in (0, 0.25, 0.5, 0.75, 1) for r in record["success_rate"])


def test_dream_to_real_smoke(tmp_path):
    out = run("dream_to_real.py", "--timesteps", "32", "--num-envs", "2", "--n-steps", "16", "--num-steps", "2",
              "--eval-episodes", "2", "--success-margin", "1.5", tmp_path=tmp_path)
    assert "PPO trained in imagination" in out and (tmp_path / "dream_to_real.png").exists()
    lines = (tmp_path / "dream_to_real.txt").read_text().strip().splitlines()
    assert lines[-1].startswith("dream / real:") and lines[0].endswith(", success margin 1.5 px)")


def test_pusht_dream_smoke(tmp_path):
    pytest.importorskip("gym_pusht")
    out = run("pusht_dream.py", "--chunks", "1", "--num-steps", "1", tmp_path=tmp_path)
    assert out.startswith("pusher, seed 0: 8 steps; mean imagined-vs-real error: block")
    frames = imageio.mimread(tmp_path / "pusht_dream.gif")
    assert len(frames) == 9 and frames[0].shape[:2] == (3 * 96, 3 * 196)  # real | gap | imagined, 3x
    assert (tmp_path / "pusht_dream.png").read_bytes()[:4] == b"\x89PNG"


def _example(script, monkeypatch):
    spec = importlib.util.spec_from_file_location(script[:-3], EXAMPLES / script)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("script", sorted(path.name for path in EXAMPLES.glob("*.py")))
def test_every_flag_of_every_example_says_what_it_is(script, monkeypatch):
    """--help shows each flag's comment (train.args.field_comments): a flag without one shows only its type."""
    from cosmos3_gym.train.args import field_comments

    args = _example(script, monkeypatch).Args
    assert sorted(field_comments(args)) == sorted(field.name for field in dataclasses.fields(args))


@pytest.mark.parametrize("script", ["quickstart.py", "ppo_control.py", "grpo_finetune.py"])
def test_an_example_takes_the_env_id_as_the_command_line_names_it(script, monkeypatch):
    """``--env`` (the command line's flag) and ``--env-id`` (CleanRL's) set the same field."""
    from cosmos3_gym.train.args import parse_args

    args = _example(script, monkeypatch).Args
    assert args().env_id != "Cosmos3RolloutT2I-v0"
    for flag in ("--env", "--env-id"):
        assert parse_args(args, [flag, "Cosmos3RolloutT2I-v0"]).env_id == "Cosmos3RolloutT2I-v0"


@pytest.mark.parametrize("script, quick", [("ppo_control.py", {"total_timesteps": 4096}),
                                           ("policy_grpo.py", {"iterations": 20}),
                                           ("grpo_finetune.py", {"iterations": 20}),
                                           ("dream_to_real.py", {"timesteps": 2048, "eval_episodes": 50})])
def test_quick_takes_its_values_where_no_flag_is_given(script, quick, monkeypatch):
    """--quick replaces the defaults it names (the smoke runs above pass it with smaller flags,
    which win); the full defaults stay without it."""
    module = _example(script, monkeypatch)
    assert module.Args.QUICK == quick
    default, fast = module.Args(), module.Args(quick=True)
    for name, value in quick.items():
        assert getattr(fast, name) == value != getattr(default, name)
        assert getattr(module.Args(quick=True, **{name: value + 1}), name) == value + 1
    assert "--quick" in module.__doc__


@pytest.mark.parametrize("script, flags, message", [
    ("grpo_finetune.py", ["--group-size", "1"], "--group-size 1 is too small; use 2 or more"),
    ("policy_grpo.py", ["--iterations", "0"], "--iterations 0 is too small; use 1 or more"),
    ("ppo_control.py", ["--num-envs", "2", "--total-timesteps", "1"], "--total-timesteps 1 is too small; use 32 or more"),
    ("dream_to_real.py", ["--eval-episodes", "0"], "--eval-episodes 0 is too small; use 1 or more"),
    ("dream_to_real.py", ["--checkpoint", "/no/such/dir"], "--checkpoint: checkpoint='/no/such/dir' is not a directory"),
    ("dream_to_real.py", ["--success-margin", "-1"], "--success-margin -1.0: use a number of pixels in [0, 4.8)"),
    ("quickstart.py", ["--scale", "0"], "--scale 0 is too small; use 1 or more"),
])
def test_a_budget_too_small_or_a_missing_checkpoint_is_refused_before_anything_loads(script, flags, message, tmp_path,
                                                                                     monkeypatch, capsys, keep_threads):
    """Run as ``python examples/<script>`` runs it (its ``__main__``), in this process: the imports are paid once."""

    def run(*argv) -> int:
        monkeypatch.setattr(sys, "argv", [str(EXAMPLES / script), *argv])
        with pytest.raises(SystemExit) as exit_:
            runpy.run_path(str(EXAMPLES / script), run_name="__main__")
        return exit_.value.code

    assert run("--out", str(tmp_path), *flags) == 2
    err = capsys.readouterr().err
    assert message in err, err[-2000:]
    assert not any(tmp_path.iterdir())  # nothing ran
    assert run("--help") == 0
    usage = " ".join(capsys.readouterr().out.split())  # argparse wraps the help at any space
    assert "(int, default: " in usage and "the folder of" in usage and "(str, default: out)" in usage


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_explore_notebook_executes(tmp_path, monkeypatch):
    # the kernel's torch on one thread, as each test worker's (set for this test alone: the examples run in
    # this process read OMP_NUM_THREADS); beside the other worker it took 38 s on every core, 11 s on one
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    notebook = nbformat.read(EXAMPLES / "explore.ipynb", as_version=4)
    NotebookClient(notebook, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = "".join(o.get("text", "") for cell in notebook.cells for o in cell.get("outputs", []))
    assert "children share the parent's first 3 steps: [True, True, True]" in outputs
    images = [o for cell in notebook.cells for o in cell.get("outputs", []) if "image/png" in o.get("data", {})]
    assert len(images) >= 3


def test_policy_grpo_sweep_reports_each_run_from_its_record(tmp_path):
    """benchmarks/policy_grpo_sweep.py: the first and last fifth it prints are the record's; a run
    that fails before its first iteration is named, not averaged in (nor an earlier sweep's record);
    the figure is written."""
    tiny = "--num-groups 2 --group-size 2 --num-steps 1 --iterations 2"
    (tmp_path / "1-s0").mkdir()
    (tmp_path / "1-s0" / "policy_grpo.json").write_text('{"success_rate": [0.5, 0.5]}')
    result = subprocess.run([sys.executable, str(EXAMPLES.parent / "benchmarks" / "policy_grpo_sweep.py"),
                             "--flag-sets", f"{tiny};{tiny} --micro-batch 0", "--seeds", "0", "--parallel", "2",
                             "--out", str(tmp_path)], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    success = json.loads((tmp_path / "0-s0" / "policy_grpo.json").read_text())["success_rate"]
    assert f"{tiny}: seed 0, 2 it: {success[0]:.3f} -> {success[1]:.3f}; mean" in result.stdout
    assert f"{tiny} --micro-batch 0 --seed 0: no iteration recorded" in result.stdout
    assert "--micro-batch 0 is too small" in (tmp_path / "1-s0" / "log.txt").read_text()
    assert (tmp_path / "policy_grpo_sweep.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("seeds", ["0,x", "", "0,,1", "-1"])
def test_policy_grpo_sweep_refuses_bad_seeds_before_any_run(seeds, tmp_path):
    result = subprocess.run([sys.executable, str(EXAMPLES.parent / "benchmarks" / "policy_grpo_sweep.py"),
                             "--seeds", seeds, "--out", str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and f"--seeds {seeds!r}: give seeds as integers" in result.stderr, result.stderr
    assert not any(tmp_path.iterdir())
