"""The command line: input checks before any model loads, output paths, help, import cost, threads."""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import cosmos3_gym
from cosmos3_gym import cli
from cosmos3_gym.model.threads import configure_threads
from cosmos3_gym.world.pusht_coverage import PUSHT_INSTALL

ROOT = Path(__file__).resolve().parents[1]

# Every Cosmos 3 env id (Cosmos3PushT-v0 too: registered without gym-pusht, it says what to install).
COSMOS3_IDS = sorted(['Cosmos3ForwardDynamicsRollout-v0', 'Cosmos3InverseDynamicsRollout-v0', 'Cosmos3PolicyRollout-v0',
                      'Cosmos3PushT-v0', 'Cosmos3Rollout-v0', 'Cosmos3RolloutAV-v0', 'Cosmos3RolloutI2V-v0',
                      'Cosmos3RolloutT2I-v0', 'Cosmos3RolloutV2V-v0', 'Cosmos3World-v0'])


@pytest.fixture
def no_run(monkeypatch):
    """Commands that would fail the test if they started: the checks must stop everything first."""
    def must_not_run(args):
        raise AssertionError(f"{args.command} ran despite a bad input")

    for name in ("demo", "rollout", "evaluate", "bench"):
        monkeypatch.setattr(cli, name, must_not_run)


def cli_error(argv, capsys) -> str:
    """Run the CLI expecting an argparse error; return its message."""
    with pytest.raises(SystemExit) as exit_info:
        cli.main(argv)
    assert exit_info.value.code == 2
    return capsys.readouterr().err


@pytest.mark.parametrize("argv, expected", [
    (["demo", "--steps", "0"], "argument --steps: 0 is invalid; use an integer >= 1"),
    (["demo", "--steps", "-3"], "argument --steps: -3 is invalid; use an integer >= 1"),
    (["demo", "--prompt", ""], "argument --prompt: '' is empty; pass a non-blank prompt"),
    (["demo", "--prompt", "  \t"], "argument --prompt: '  \\t' is empty"),
    (["rollout", "--episodes", "-1"], "argument --episodes: -1 is invalid; use an integer >= 1"),
    (["rollout", "--episodes", "0"], "argument --episodes: 0 is invalid; use an integer >= 1"),
    (["evaluate", "--samples", "0"], "argument --samples: 0 is invalid; use an integer >= 1"),
    (["evaluate", "--noise-level", "1.5"], "--noise-level 1.5 is outside Cosmos3Rollout-v0's bounds [0.0, 1.0]"),
    (["evaluate", "--noise-level", "nan"], "--noise-level nan is outside Cosmos3Rollout-v0's bounds"),
    (["evaluate", "--guidance-scale", "0.5"], "--guidance-scale 0.5 is outside Cosmos3Rollout-v0's bounds [1.0, 10.0]"),
    (["evaluate", "--checkpoint", "/no/such/dir"], "argument --checkpoint: checkpoint='/no/such/dir' is not a "
                                                   "directory; pass a local diffusers-layout Cosmos 3 checkpoint"),
    (["evaluate", "--checkpoint", ""], "argument --checkpoint: '' is empty; pass a checkpoint folder"),
    (["evaluate", "--checkpoint", "/"], "argument --checkpoint: checkpoint='/' is missing component 'transformer'"),
    (["demo", "--threads", "0"], "argument --threads: 0 is invalid; use an integer >= 1"),
    (["demo", "--env", "Nope-v0"], "argument --env: invalid choice: 'Nope-v0' (choose from"),
    (["demo", "--device", "gpu"], "argument --device: 'gpu' is not a torch device; use cpu, cuda or cuda:N"),
    (["bench", "--cpu", "--model", "tiny"], "--model tiny is for --mode world only (got --mode t2v)"),
    (["bench", "--cpu", "--mode", "world", "--workers", "2"], "--workers 2 does not apply to --mode world"),
    (["bench", "--cpu", "--mode", "world", "--width", "64"], "--width 64 does not apply to --mode world"),
    (["bench", "--cpu", "--mode", "world", "--frames", "1"], "--frames 1 is invalid in --mode world: use >= 2"),
    (["demo", "--seed", "-1"], "argument --seed: -1 is invalid; use a seed in [0, 2**63 - 1]"),
    (["demo", "--seed", str(2**63)], f"argument --seed: {2**63} is invalid; use a seed in [0, 2**63 - 1]"),
    (["rollout", "--seed", str(2**63 - 2)], "use a seed in [0, 2**63 - 4] (the seeds used are seed .. seed + 3)"),
    (["evaluate", "--seed", "-1"], "argument --seed: -1 is invalid; use a seed in [0, 2**63 - 128] (the seeds"),
    (["evaluate", "--samples", "1", "--seed", str(2**63 - 2)], "use a seed in [0, 2**63 - 32] (the seeds used are "
                                                               "seed .. seed + 31)"),  # one padded batch of 32
    (["evaluate", "--out", ""], "argument --out: '' is empty; name a path, or leave the flag out"),
    (["demo", "--trajectory", " "], "argument --trajectory: ' ' is empty; name a path"),
    (["rollout", "--out", ""], "argument --out: '' is empty; name a path"),
    (["bench", "--cpu", "--mode", "policy"], "--mode policy does not apply with --cpu: the CPU bench times the env of "
                                             "--env"),
])
def test_bad_inputs_are_argparse_errors(argv, expected, capsys, no_run):
    assert expected in cli_error(argv, capsys)


def test_the_cpu_world_bench_defaults_to_the_embedded_model(monkeypatch):
    """Edge at 480x480 would not finish on a CPU: --cpu --mode world benches the tiny world at 32x32 unless the
    flags say otherwise."""
    seen = []
    monkeypatch.setattr(cli, "bench", lambda args: seen.append((args.model, args.height)) or 0)
    cli.main(["bench", "--cpu", "--mode", "world"])
    cli.main(["bench", "--cpu", "--mode", "world", "--model", "edge"])
    cli.main(["bench", "--cpu", "--mode", "world", "--height", "64"])
    assert seen == [("tiny", 32), ("edge", 480), ("tiny", 64)]


@pytest.mark.parametrize("command", ["demo", "rollout", "evaluate"])
def test_cuda_without_a_cuda_device(command, capsys, monkeypatch, no_run):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    err = cli_error([command, "--device", "cuda"], capsys)
    assert f"cosmos3-gym {command}: error: argument --device: 'cuda' was requested but no CUDA device is " \
           "available" in err
    assert "use --device cpu" in err


def test_existing_outputs_are_refused_without_overwrite(tmp_path, capsys, no_run):
    video, trajectory = tmp_path / "demo.mp4", tmp_path / "t.safetensors"
    video.write_bytes(b"old")
    err = cli_error(["demo", "--device", "cpu", "--out", str(video)], capsys)
    assert f"argument --out: {str(video)!r} exists; pass --overwrite to replace it" in err
    trajectory.write_bytes(b"old")
    err = cli_error(["demo", "--device", "cpu", "--out", str(tmp_path / "new.mp4"), "--trajectory",
                     str(trajectory)], capsys)
    assert f"argument --trajectory: {str(trajectory)!r} exists" in err
    # The T2I env writes a .png whatever the suffix: that is the file checked.
    (tmp_path / "image.png").write_bytes(b"old")
    err = cli_error(["demo", "--env", "Cosmos3RolloutT2I-v0", "--device", "cpu", "--out",
                     str(tmp_path / "image.mp4")], capsys)
    assert f"argument --out: {str(tmp_path / 'image.png')!r} exists" in err
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "episode_0001.safetensors").write_bytes(b"old")
    err = cli_error(["rollout", "--device", "cpu", "--episodes", "2", "--out", str(tmp_path / "runs")], capsys)
    assert "1 of the 2 trajectory files exist" in err and "episode_0001.safetensors" in err
    (tmp_path / "report.txt").write_text("old")
    err = cli_error(["evaluate", "--device", "cpu", "--out", str(tmp_path / "report.txt")], capsys)
    assert "report.txt' exists; pass --overwrite" in err
    assert video.read_bytes() == trajectory.read_bytes() == b"old"


def test_unwritable_outputs_fail_early(tmp_path, capsys, no_run):
    blocker = tmp_path / "a_file"
    blocker.write_text("")  # a folder cannot be made under a file (holds for root too, unlike chmod)
    err = cli_error(["demo", "--device", "cpu", "--out", str(blocker / "demo.mp4")], capsys)
    assert f"argument --out: cannot write to folder {str(blocker)!r}" in err and "choose a writable path" in err
    err = cli_error(["rollout", "--device", "cpu", "--out", str(blocker)], capsys)
    assert f"argument --out: {str(blocker)!r} is a file" in err
    err = cli_error(["demo", "--device", "cpu", "--out", str(tmp_path / "v.mp4"), "--trajectory",
                     str(blocker / "t.safetensors")], capsys)
    assert "argument --trajectory: cannot write to folder" in err


def test_demo_runs_overwrites_and_explains_the_log_probs(tmp_path, capsys, keep_threads):
    out, trajectory = tmp_path / "deep" / "demo.mp4", tmp_path / "t.safetensors"
    tables = []
    for prompt, extra in (("a big red ball slides to the right", []),
                          ("a small green square moves to the left", ["--overwrite"])):
        assert cli.main(["demo", "--device", "cpu", "--steps", "2", "--prompt", prompt, "--out", str(out),
                         "--trajectory", str(trajectory), *extra]) == 0
        captured = capsys.readouterr()
        assert f"prompt {prompt!r}" in captured.out
        assert cli.LOG_PROB_NOTE in captured.out
        assert "denoising" in captured.err and "denoising" not in captured.out  # the bar goes to stderr
        lines = captured.out.splitlines()
        start = next(i for i, line in enumerate(lines) if line.split()[:2] == ["step", "sigma"])
        assert lines[start + 3] == cli.LOG_PROB_NOTE  # right under the 2-row table
        tables.append([line.split()[4] for line in lines[start + 1:start + 3]])  # the log_prob column
        assert out.stat().st_size > 0 and trajectory.stat().st_size > 0
    assert tables[0] == tables[1]  # the note's claim: same seed, different prompt, same log-probs
    assert torch.get_num_threads() == 1  # the CPU default


def test_demo_t2i_writes_png_and_threads_flag(tmp_path, capsys, keep_threads):
    assert cli.main(["demo", "--env", "Cosmos3RolloutT2I-v0", "--device", "cpu", "--steps", "1", "--threads", "2",
                     "--out", str(tmp_path / "image.mp4")]) == 0
    assert f"image (a one-frame env) {tmp_path / 'image.png'}" in capsys.readouterr().out
    assert (tmp_path / "image.png").stat().st_size > 0 and not (tmp_path / "image.mp4").exists()
    assert torch.get_num_threads() == 2


def test_demo_of_an_env_that_decodes_no_frames_prints_its_actions(tmp_path, capsys, keep_threads):
    """Inverse dynamics' reward is "none": no frames are decoded, so no video; the generated actions are shown."""
    out = tmp_path / "id.mp4"
    assert cli.main(["demo", "--env", "Cosmos3InverseDynamicsRollout-v0", "--device", "cpu", "--steps", "1",
                     "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "no frames decoded" in printed and "generated actions (8, 2)" in printed
    assert not out.exists()
    assert cli.main(["demo", "--env", "Cosmos3ForwardDynamicsRollout-v0", "--device", "cpu", "--steps", "1",
                     "--out", str(tmp_path / "fd.mp4")]) == 0
    assert "given actions (8, 2)" in capsys.readouterr().out  # forward dynamics is given its actions


def test_rollout_writes_episodes(tmp_path, capsys, keep_threads):
    argv = ["rollout", "--device", "cpu", "--episodes", "2", "--out", str(tmp_path / "runs")]
    assert cli.main(argv) == 0
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == ["episode_0000.safetensors",
                                                                     "episode_0001.safetensors"]
    assert cosmos3_gym.Trajectory.load(tmp_path / "runs" / "episode_0001.safetensors").seed == 1
    assert "2 trajectories in" in capsys.readouterr().out


def test_evaluate_passes_the_sampler_flags_to_the_envs(tmp_path, capsys, keep_threads):
    from cosmos3_gym.evaluate import adherence, report

    argv = ["evaluate", "--env", "Cosmos3RolloutT2I-v0", "--device", "cpu", "--samples", "8",
            "--noise-level", "0", "--guidance-scale", "1", "--steps", "4", "--out", str(tmp_path / "report.txt")]
    assert cli.main(argv) == 0
    direct = adherence("Cosmos3RolloutT2I-v0", 8, device="cpu", noise_level=0.0, guidance_scale=1.0, num_steps=4)
    assert (tmp_path / "report.txt").read_text() == report(direct) + "\n"
    assert "'noise_level': 0.0, 'guidance_scale': 1.0, 'num_steps': 4" in capsys.readouterr().out
    default = adherence("Cosmos3RolloutT2I-v0", 8, device="cpu")
    assert default["rows"] != direct["rows"]  # the flags change the samples


def test_evaluate_scores_the_checkpoint_it_is_given(tmp_path, capsys, keep_threads):
    """--checkpoint scores other weights (here untrained ones) exactly as the envs load them."""
    from cosmos3_gym.evaluate import adherence, report
    from cosmos3_gym.model.tiny_model import build_tiny_checkpoint

    build_tiny_checkpoint(tmp_path / "untrained")
    argv = ["evaluate", "--env", "Cosmos3RolloutT2I-v0", "--device", "cpu", "--samples", "8",
            "--checkpoint", str(tmp_path / "untrained"), "--out", str(tmp_path / "report.txt")]
    assert cli.main(argv) == 0
    direct = adherence("Cosmos3RolloutT2I-v0", 8, device="cpu", checkpoint=str(tmp_path / "untrained"))
    assert (tmp_path / "report.txt").read_text() == report(direct) + "\n"
    embedded = adherence("Cosmos3RolloutT2I-v0", 8, device="cpu")
    assert [r["detected_color"] for r in direct["rows"]] != [r["detected_color"] for r in embedded["rows"]]


def test_configure_threads(monkeypatch, keep_threads):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    torch.set_num_threads(2)
    assert configure_threads(None, "cuda") == 2 and torch.get_num_threads() == 2  # accelerator: torch's own
    assert configure_threads(None, "cpu") == 1 and torch.get_num_threads() == 1
    assert configure_threads(3, "cpu") == 3 and torch.get_num_threads() == 3
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    torch.set_num_threads(2)
    assert configure_threads(None, "cpu") == 2 and torch.get_num_threads() == 2  # the user's setting wins
    with pytest.raises(ValueError, match="threads=0 is invalid"):
        configure_threads(0)


@pytest.mark.parametrize("command", ["demo", "rollout", "check", "bench", "evaluate"])
def test_a_flag_the_command_does_not_take_gets_the_commands_usage(command, capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main([command, "--bogus", "1"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.startswith(f"usage: cosmos3-gym {command} ")
    assert f"cosmos3-gym {command}: error: unrecognized arguments: --bogus 1; `cosmos3-gym {command} --help`" in err
    with pytest.raises(SystemExit) as exit_:  # a flag the command takes, put before it: the top level's error
        cli.main(["--overwrite", command])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.startswith("usage: cosmos3-gym [-h] [--version] COMMAND")
    assert (f"cosmos3-gym: error: unrecognized arguments: --overwrite; a command's flags go after it: cosmos3-gym "
            f"{command} --overwrite ...") in err


@pytest.mark.parametrize("argv, hint", [(["demo", "--num-steps", "4"], "--num-steps: did you mean --steps?"),
                                         (["world-eval", "--steps", "2"], "--steps: did you mean --num-steps?"),
                                         (["world-eval", "--guidance-scal=2"], "--guidance-scal: did you mean "
                                                                               "--guidance-scale or --guidance?")])
def test_a_flag_spelled_as_another_command_spells_it_gets_that_commands_spelling(argv, hint, capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(argv)
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and f"cosmos3-gym {argv[0]}: error: unrecognized arguments: " in err
    assert f"({hint}); `cosmos3-gym {argv[0]} --help` lists the flags" in err


@pytest.mark.parametrize("command", ["demo", "rollout", "evaluate", "bench"])
def test_a_world_env_given_to_a_rollout_command_says_where_world_envs_go(command, capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main([command, "--env", "Cosmos3PushT-v0"])
    err = " ".join(capsys.readouterr().err.split())
    assert exit_.value.code == 2 and ("argument --env: 'Cosmos3PushT-v0' is a world env, and --env takes a rollout env "
                                      "(Cosmos3ForwardDynamicsRollout-v0, ") in err
    assert "`cosmos3-gym world-eval` scores them (--world pusht for PushT), `bench --mode world` times" in err


def test_every_flag_has_help_and_env_choices_are_the_presets():
    parser = cli.build_parser()
    assert set(parser.commands) == {"demo", "rollout", "check", "bench", "evaluate", "world-eval"}
    assert "evaluate" in parser.format_help() and "evaluate" in parser.description
    for name, command in parser.commands.items():
        for action in command._actions:
            assert action.help, f"{name} {action.option_strings} has no help"
            if "--env" in action.option_strings and name != "check":  # check's: test_check_env_names_the_ids
                assert list(action.choices) == cosmos3_gym.ENV_IDS
                assert {"Cosmos3Rollout-v0", "Cosmos3RolloutT2I-v0", "Cosmos3RolloutI2V-v0"} <= set(action.choices)
                assert all(env_id in action.help for env_id in cosmos3_gym.ENV_IDS)  # listed in --help
        flags = {s for a in command._actions for s in a.option_strings}
        if name in ("demo", "rollout", "evaluate"):
            assert {"--threads", "--overwrite", "--device", "--env"} <= flags
    assert "--threads" in {s for a in parser.commands["bench"]._actions for s in a.option_strings}


def test_import_is_light_and_help_imports_no_torch():
    code = ("import sys, gymnasium as gym, cosmos3_gym; print('torch' in sys.modules);"
            "print(sorted(i for i in gym.registry if i.startswith('Cosmos3')))")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, cwd=ROOT).stdout
    assert out.split("\n")[:2] == ["False", str(COSMOS3_IDS)]
    script = Path(sys.executable).parent / "cosmos3-gym"
    command = [str(script)] if script.exists() else [sys.executable, "-m", "cosmos3_gym.cli"]
    result = subprocess.run([*command, "--help"], capture_output=True, text=True, env={**os.environ})
    assert result.returncode == 0 and "evaluate" in result.stdout
    result = subprocess.run([*command, "--version"], capture_output=True, text=True, env={**os.environ})
    assert result.returncode == 0 and result.stdout.strip() == f"cosmos3-gym {cosmos3_gym.__version__}"
    # --help is fast because building every subcommand's help imports neither torch nor diffusers
    code = ("import sys; from cosmos3_gym import cli; parser = cli.build_parser(); parser.format_help();"
            "[command.format_help() for command in parser.commands.values()];"
            "print(sorted(m for m in ('torch', 'diffusers', 'stable_baselines3') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, cwd=ROOT).stdout
    assert out.strip() == "[]"


def test_each_public_name_resolves_and_tab_completion_offers_it():
    """Every name of ``__all__`` loads (the classes on first use, PEP 562) and ``dir(cosmos3_gym)`` (what tab
    completion offers) lists it before its first use, besides the subpackages imported so far."""
    import cosmos3_gym
    import cosmos3_gym.world  # noqa: F401

    assert set(cosmos3_gym.__all__) <= set(dir(cosmos3_gym)) and "world" in dir(cosmos3_gym)
    assert all(getattr(cosmos3_gym, name) is not None for name in cosmos3_gym.__all__)


def test_bench_cpu_results_on_stdout_bars_on_stderr(capsys, monkeypatch, keep_threads):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert cli.main(["bench", "--cpu", "--num-envs", "2", "--steps", "1", "--episodes", "1"]) == 0
    captured = capsys.readouterr()
    assert "it/s" not in captured.out and "it/s" in captured.err
    assert "torch" in captured.out and ", 1 thread(s)," in captured.out
    assert float(captured.out.split("speedup_vs_sync_vector_env:")[1]) > 0


def test_outputs_on_devices_are_written_in_place_and_a_full_one_is_a_one_line_error(tmp_path, capsys, keep_threads):
    """Guards demo's output writing: --out /dev/full (no extension) ended in imageio's `KeyError: None`
    traceback and --trajectory /dev/null replaced /dev/null with a regular file. Now a suffix-less
    regular path is refused before anything runs, /dev/null is written in place and stays a character
    device, and /dev/full is `argument FLAG: cannot write PATH: No space left on device` (exit 2)."""
    import stat

    if not (os.path.exists("/dev/full") and stat.S_ISCHR(os.stat("/dev/null").st_mode)):
        pytest.skip("needs /dev/null and /dev/full")
    err = cli_error(["demo", "--device", "cpu", "--out", str(tmp_path / "demo")], capsys)
    assert f"argument --out: {str(tmp_path / 'demo')!r}: it has no file extension" in err and ".mp4" in err
    trajectory = tmp_path / "t.safetensors"
    trajectory.symlink_to("/dev/null")  # written through: the link, and /dev/null, stay what they are
    assert cli.main(["demo", "--device", "cpu", "--steps", "1", "--out", "/dev/null", "--trajectory", str(trajectory),
                     "--overwrite"]) == 0
    assert "video /dev/null" in capsys.readouterr().out
    assert trajectory.is_symlink() and stat.S_ISCHR(os.stat("/dev/null").st_mode)
    for argv, flag in ((["--out", "/dev/full"], "--out"), (["--out", "/dev/null", "--trajectory", "/dev/full"],
                                                           "--trajectory")):
        err = cli_error(["demo", "--device", "cpu", "--steps", "1", "--overwrite", *argv], capsys)
        assert f"cosmos3-gym demo: error: argument {flag}: cannot write '/dev/full': No space left on device; " \
               f"free some space, or choose another path" in err
        assert "Traceback" not in err
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode) and stat.S_ISCHR(os.stat("/dev/full").st_mode)


def test_check_covers_the_world_envs_and_does_not_call_a_dict_action_space_fit_for_sb3(monkeypatch, capsys,
                                                                                       keep_threads):
    """`check` runs both checkers on the world envs too, and says that SB3's algorithms refuse the
    Dict action space of a multi-stream env's noise mode even though SB3's checker passes it."""
    import cosmos3_gym

    monkeypatch.setattr(cosmos3_gym, "ENV_IDS", ["Cosmos3RolloutAV-v0"])
    monkeypatch.setattr(cosmos3_gym, "WORLD_ENV_IDS", ["ProceduralWorld-v0", "Cosmos3World-v0"])
    monkeypatch.setattr(cosmos3_gym, "PUSHT_ENV_IDS", [])  # the next test's
    assert cli.main(["check"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 9  # (2 modes + 2 worlds) x 2 checkers, then the count
    assert lines[-1].startswith("8 checks (4 envs and action modes x Gymnasium, SB3): none failed")
    assert sum(line.endswith(" ok") for line in lines) == 7  # SB3's pass of the Dict space is the eighth
    for world in ("ProceduralWorld-v0", "Cosmos3World-v0"):
        assert [line.split()[-1] for line in lines if line.startswith(world)] == ["ok", "ok"]
    noise_sb3 = [line for line in lines if " noise " in line and " sb3 " in line]
    assert len(noise_sb3) == 1 and "take no Dict action space" in noise_sb3[0] and not noise_sb3[0].endswith(" ok")


def test_check_env_checks_only_the_ids_named(capsys, keep_threads):
    """`check --env ID` (again for more) runs the checkers on those ids alone; an id that is not registered is
    refused before anything runs, with the closest one named, as gym.make names it."""
    assert cli.main(["check", "--env", "ProceduralWorld-v0", "--env", "Cosmos3RolloutT2I-v0"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[:3] for line in lines[:-1]] == [
        ["Cosmos3RolloutT2I-v0", mode, checker] for mode in ("control", "noise") for checker in ("gymnasium", "sb3")
    ] + [["ProceduralWorld-v0", "-", "gymnasium"], ["ProceduralWorld-v0", "-", "sb3"]]
    assert lines[-1].startswith("6 checks (3 envs and action modes x Gymnasium, SB3): none failed, 1 refused by SB3")
    for argv, suggestion in ((["check", "--env", "Cosmos3Wrld-v0"], "; did you mean 'Cosmos3World-v0'? (choose from"),
                             (["demo", "--env", "Cosmos3Rolout-v0"], "; did you mean 'Cosmos3Rollout-v0'? (choose")):
        with pytest.raises(SystemExit) as exit_:
            cli.main(argv)
        err = " ".join(capsys.readouterr().err.split())
        assert exit_.value.code == 2 and f"argument --env: invalid choice: '{argv[-1]}'{suggestion}" in err


@pytest.fixture
def only_pusht_twin(monkeypatch):
    import cosmos3_gym

    monkeypatch.setattr(cosmos3_gym, "ENV_IDS", [])
    monkeypatch.setattr(cosmos3_gym, "WORLD_ENV_IDS", [])
    monkeypatch.setattr(cosmos3_gym, "PUSHT_ENV_IDS", ["PushT-Twin-v0"])


def test_check_covers_the_pusht_envs_where_gym_pusht_is_installed(only_pusht_twin, capsys, keep_threads):
    """PushT's ids are checked too (the twin stands for both here: the dream's checks are test_pusht's)."""
    pytest.importorskip("gym_pusht")
    assert cli.main(["check"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in out[:2]] == ["PushT-Twin-v0"] * 2 and all(l.endswith(" ok") for l in out[:2])
    assert out[-1].startswith("2 checks (1 env in one action mode x Gymnasium, SB3): none failed")


def test_check_says_the_pusht_envs_were_not_checked_without_gym_pusht(only_pusht_twin, monkeypatch, capsys,
                                                                      keep_threads):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "gym_pusht" else real(name, *a))
    assert cli.main(["check"]) == 0
    captured = capsys.readouterr()
    assert captured.out.startswith("0 checks")
    assert f"PushT-Twin-v0 not checked: gym-pusht is not installed: {PUSHT_INSTALL}" in captured.err
    assert cli.main(["check", "--env", "PushT-Twin-v0"]) == 2  # asked for by name: not a quiet pass
    captured = capsys.readouterr()
    assert captured.out == ""
    assert f"PushT-Twin-v0 not checked: gym-pusht is not installed: {PUSHT_INSTALL}" in captured.err


def test_world_eval_takes_the_envs_keyword_names_for_its_sampler_flags(tmp_path, keep_threads):
    """--guidance-scale and --noise-level (the env's keywords, as `evaluate` spells them) set --guidance and
    --sde-noise; --noise-levels stays the policies' command noise."""
    from cosmos3_gym.train.args import parse_args
    from cosmos3_gym.world_eval import WorldEvalArgs

    args = parse_args(WorldEvalArgs, ["--guidance-scale", "2", "--noise-level", "0.3", "--noise-levels", "0,1",
                                      "--device", "cpu", "--out", str(tmp_path)])
    assert (args.guidance, args.sde_noise, args.noise_levels) == (2.0, "0.3", "0,1")
    assert args.sampler == {"guidance_scale": 2.0, "noise_level": 0.3}


def test_world_eval_passes_the_sampler_and_success_flags_to_the_imagined_env(tmp_path, keep_threads):
    from cosmos3_gym.world_eval import WorldEvalArgs, _worlds

    for flags, expected in (({}, (1.0, 0.7, 4.8)), ({"sde_noise": "0", "guidance": 2.0, "success_margin": 1.5},
                                                   (2.0, 0.0, 3.3))):
        dream = _worlds(WorldEvalArgs(device="cpu", progress=False, out=str(tmp_path), **flags))[3](2)
        vector = dream.unwrapped.vector
        assert (vector.preset.guidance_scale, vector.preset.noise_level) == expected[:2]
        assert vector.success_radius * vector.size == pytest.approx(expected[2])  # pixels
        assert vector.engine.model.dtype == torch.float32  # the CPU's default
        dream.close()
    dream = _worlds(WorldEvalArgs(device="cpu", dtype="bfloat16", progress=False, out=str(tmp_path)))[3](1)
    assert dream.unwrapped.vector.engine.model.dtype == torch.bfloat16
    dream.close()


def test_check_counts_its_failures(monkeypatch, capsys, keep_threads):
    import cosmos3_gym

    monkeypatch.setattr(cosmos3_gym, "ENV_IDS", ["NoSuchEnv-v0"])
    monkeypatch.setattr(cosmos3_gym, "WORLD_ENV_IDS", [])
    monkeypatch.setattr(cosmos3_gym, "PUSHT_ENV_IDS", [])
    assert cli.main(["check"]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert sum("FAILED: " in line for line in lines) == 4
    assert lines[-1] == "4 checks (2 envs and action modes x Gymnasium, SB3): 4 FAILED (above)"  # no advice
    monkeypatch.setattr(cosmos3_gym, "ENV_IDS", ["Cosmos3Rollout-v0"])  # SB3 refuses its noise mode, by design
    assert cli.main(["check"]) == 0
    last = capsys.readouterr().out.splitlines()[-1]
    assert last.startswith("4 checks (2 envs and action modes x Gymnasium, SB3): none failed, 1 refused by SB3 "
                           "as designed (noise mode); ") and last.endswith(" lines of the checkers' advice on stderr")


def test_world_eval_takes_its_own_flags(capsys, keep_threads):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["world-eval", "--help"])
    assert exit_.value.code == 0 and "usage: cosmos3-gym world-eval" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exit_:
        cli.main(["world-eval", "--episodes", "1"])
    assert exit_.value.code == 2 and "--episodes 1 is too small; use 2 or more" in capsys.readouterr().err
    for flags, message in ((["--clone-clips", "4"], "--clone-clips is PushT's"),
                           (["--noise-levels", "0,-1"], "--noise-levels 0,-1: use distinct finite values >= 0"),
                           (["--noise-levels", "1,1"], "--noise-levels 1,1: use distinct finite values >= 0"),
                           (["--noise-levels", "nan,0"], "--noise-levels nan,0: use distinct finite values >= 0"),
                           (["--noise-levels", "0,1e400"], "--noise-levels 0,1e400: use distinct finite values >= 0"),
                           (["--num-steps", "4,x"], "--num-steps '4,x': use comma-separated integers, e.g. 8,4\n"),
                           (["--noise-levels", "0,x"], "--noise-levels '0,x': use comma-separated numbers, e.g. 0,1,2\n"),
                           (["--guidance", "0.5"], "--guidance 0.5: use 0 (the env's default) or a finite scale >= 1"),
                           (["--guidance", "nan"], "--guidance nan: use 0 (the env's default) or a finite scale"),
                           (["--sde-noise", "1.5"], "--sde-noise 1.5: use a noise level in [0, 1]"),
                           (["--sde-noise", "nan"], "--sde-noise nan: use a noise level in [0, 1]"),
                           (["--success-margin", "5"], "--success-margin 5.0: use a number of pixels in [0, 4.8)"),
                           (["--dtype", "fp32"], "--dtype 'fp32' is not one of ['float32', 'bfloat16']"),
                           (["--world", "pusht", "--success-margin", "1"], "--success-margin are the procedural")):
        with pytest.raises(SystemExit) as exit_:
            cli.main(["world-eval", *flags])
        assert exit_.value.code == 2 and message in capsys.readouterr().err


def test_world_eval_checks_goal_device_and_out_before_anything_loads(tmp_path, capsys, keep_threads):
    """As every command: one line and exit 2, before a model loads; a run's files are kept unless --overwrite."""
    (tmp_path / "done").mkdir()
    (tmp_path / "done" / "world_eval.md").write_text("an earlier run")
    (tmp_path / "a_file").write_text("")
    cases = [(["--goal", "top-left"], "--goal 'top-left' is not a goal corner; use one of"),
             (["--out", str(tmp_path / "a_file")], "is a file; world-eval writes a folder"),
             (["--out", str(tmp_path / "done")], "already holds world_eval.md; add --overwrite"),
             (["--threads", "-1"], "--threads -1 is too small"),
             (["--seed", "-1"], "--seed -1: use a seed in [0, 2**63 - 12] (the reset seeds are seed .. seed + 11"),
             (["--seed", str(2**63 - 2), "--episodes", "3"], "use a seed in [0, 2**63 - 3]"),  # 2**63 - 3 runs
             (["--num-steps", "4,4"], "--num-steps 4,4: use distinct integers >= 1"),
             (["--out", ""], "--out '' names no folder; name one"),
             (["--out", str(tmp_path / "a_file" / "sub")], f"cannot write to folder {str(tmp_path / 'a_file' / 'sub')!r}")]
    (tmp_path / "gone").symlink_to(tmp_path / "nowhere")
    cases.append((["--out", str(tmp_path / "gone")], f"cannot write to folder {str(tmp_path / 'gone')!r}"))
    for world in ("procedural", "pusht"):  # a checkpoint that is not there, in either world
        cases.append((["--world", world, "--checkpoint", str(tmp_path / "nope"), "--out", str(tmp_path / "new")],
                      f"--checkpoint: checkpoint={str(tmp_path / 'nope')!r} is not a directory"))
    # what the imagined env's preset refuses, and a checkpoint trained for the other world
    from cosmos3_gym.model.tiny_model import TINY_CHECKPOINT
    from cosmos3_gym.world.pusht import PUSHT_CHECKPOINT

    new = ["--out", str(tmp_path / "new")]
    cases += [(["--num-steps", "4,1001", *new], "--num-steps: preset 'Cosmos3World-v0': num_steps=1001 is invalid"),
              (["--guidance", "11", *new], "--num-steps, --guidance: preset 'Cosmos3World-v0': guidance_scale=11.0 "
                                           "lies outside guidance_bounds=[1.0, 10.0]"),
              (["--checkpoint", str(PUSHT_CHECKPOINT), *new], "was trained for Cosmos3PushT-v0"),
              (["--world", "pusht", "--checkpoint", str(TINY_CHECKPOINT), *new],
               "was trained for Cosmos3World-v0 (")]
    if not torch.cuda.is_available():
        cases.append((["--device", "cuda", "--out", str(tmp_path / "new")], "no CUDA device is available"))
    for flags, message in cases:
        with pytest.raises(SystemExit) as exit_:
            cli.main(["world-eval", *flags])
        err = capsys.readouterr().err
        assert exit_.value.code == 2 and message in err and "Traceback" not in err
    assert (tmp_path / "done" / "world_eval.md").read_text() == "an earlier run"
    assert not (tmp_path / "new").exists()  # refused before --out was made


@pytest.mark.slow
def test_world_eval_writes_its_record_table_and_figure(tmp_path, monkeypatch, keep_threads):
    import json

    from cosmos3_gym import world_eval

    policies, make, made = world_eval.scripted_policies, world_eval.gym.make, []
    monkeypatch.setattr(world_eval, "scripted_policies",
                        lambda **kw: {k: v for k, v in policies(**kw).items() if k in ("greedy", "away")})
    monkeypatch.setattr(world_eval.gym, "make", lambda env_id, **kw: made.append((env_id, kw)) or make(env_id, **kw))
    assert cli.main(["world-eval", "--episodes", "2", "--num-steps", "1", "--noise-levels", "0", "--guidance", "4",
                     "--horizon", "2", "--out", str(tmp_path), "--no-progress", "--device", "cpu"]) == 0
    record = json.loads((tmp_path / "world_eval.json").read_text())
    assert [kw["guidance_scale"] for env_id, kw in made if env_id == "Cosmos3World-v0"] == [4.0]
    assert [kw["horizon"] for _, kw in made] == [2, 2]  # both worlds
    assert record["records"]["num_steps=1"]["sensitivity"]["horizon"] == 2
    assert (tmp_path / "world_eval.md").read_text().count("| greedy |") == 1
    assert "world-eval --horizon 2 --episodes 2 " in (tmp_path / "world_eval.md").read_text().splitlines()[0]
    assert "--guidance 4 " in (tmp_path / "world_eval.md").read_text().splitlines()[0]
    assert " --device cpu --dtype float32;" in (tmp_path / "world_eval.md").read_text().splitlines()[0]
    md = (tmp_path / "world_eval.md").read_text()
    assert "How to read it" in md and "MMRV (mean maximum rank violation" in md
    assert md.count("- against the targets of this world: sensitivity ratio ") == 1  # one setting, one verdict
    assert json.loads((tmp_path / "world_eval.json").read_text())["args"]["dtype"] == "float32"  # as run, not ""
    assert (tmp_path / "world_eval.png").read_bytes()[:4] == b"\x89PNG" and record


@pytest.mark.slow
def test_world_eval_scores_the_shipped_pusht_model_against_gym_pusht(tmp_path, monkeypatch, capsys, keep_threads):
    pytest.importorskip("gym_pusht")
    import json

    from cosmos3_gym.world import pusht_eval

    policies = pusht_eval.pusht_policies
    monkeypatch.setattr(pusht_eval, "pusht_policies",
                        lambda **kw: {k: v for k, v in policies(**kw).items() if k in ("pusher", "still", "clone")})
    assert cli.main(["world-eval", "--world", "pusht", "--episodes", "2", "--num-steps", "1", "--horizon", "1",
                     "--clone-clips", "4", "--out", str(tmp_path), "--no-progress", "--device", "cpu"]) == 0
    record = json.loads((tmp_path / "world_eval.json").read_text())["records"]["num_steps=1"]
    assert [row["name"] for row in record["policies"]] == ["pusher", "still", "clone"]
    assert set(record["sensitivity"]["metrics"]) == {"block IoU", "coverage error", "block error (px)", "agent lost"}
    assert 0.0 <= record["sensitivity"]["metrics"]["block IoU"]["mean"] <= 1.0
    text = (tmp_path / "world_eval.md").read_text()
    assert text.startswith("# cosmos3-gym world-eval --world pusht --horizon 1")
    assert "Cosmos3PushT-v0 (actions in the canvas frame) num_steps=1 vs PushT-Twin-v0" in text
    assert "block IoU under the true actions" in text
    # PushT's legend: positions are the agent's and the block's, held actions stand for zero ones, lost is the T's
    assert "the agent's and the block's colour masses" in text and "held ones" in text and "no T pose fits" in text
    assert "zero actions" not in text.split("## ")[0]
    assert (tmp_path / "world_eval.png").read_bytes()[:4] == b"\x89PNG"
    assert f"wrote world_eval.json, world_eval.md, world_eval.png in {tmp_path}/" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exit_:
        cli.main(["world-eval", "--world", "pusht", "--goal", "top left"])
    assert exit_.value.code == 2 and "leave them out with --world pusht" in capsys.readouterr().err


def test_a_value_the_env_refuses_after_the_model_loads_is_a_one_line_error(tmp_path, capsys, keep_threads):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["demo", "--steps", "1", "--prompt", "red ball " * 400, "--out", str(tmp_path / "demo.mp4")])
    err = capsys.readouterr().err  # the token budget is the tokenizer's to count: known only once the model loads
    assert exit_.value.code == 2 and "cosmos3-gym demo: error: prompt 'red ball red ball" in err
    assert "the budget is max_prompt_tokens=1024: shorten it" in err
    assert "Traceback" not in err


def test_world_eval_without_gym_pusht_says_what_to_install(monkeypatch, capsys):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "gym_pusht" else real(name, *a))
    with pytest.raises(SystemExit) as exit_:
        cli.main(["world-eval", "--world", "pusht"])
    assert exit_.value.code == 2 and (f"--world pusht needs gym-pusht: {PUSHT_INSTALL}"
                                      in capsys.readouterr().err)
    pin = "gym-pusht>=0.1.8,<0.2"  # the install hint asks for the [pusht] extra's pin
    assert f"pip install '{pin}'" in PUSHT_INSTALL
    assert f"\n    {pin}\n" in (Path(cli.__file__).parents[1] / "setup.cfg").read_text()


def test_world_eval_help_loads_neither_torch_nor_diffusers():
    code = ("import sys; from cosmos3_gym import cli\n"
            "try:\n    cli.main(['world-eval', '--help'])\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in ('torch', 'diffusers') if m in sys.modules), file=sys.stderr)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert "How far can the dream be trusted?" in result.stdout and ":func:" not in result.stdout
    assert result.stderr.strip().endswith("[]")


def test_python_dash_m_runs_the_command_line():
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "cosmos3_gym", "--help"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.startswith("usage: cosmos3-gym")
