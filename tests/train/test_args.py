"""The examples' flags come from a typed dataclass; ``--help`` shows each field's trailing comment."""

from dataclasses import dataclass

import pytest

from cosmos3_gym.env.docstrings import plain_text
from cosmos3_gym.train.args import field_comments, parse_args


@dataclass
class Args:
    learning_rate: float = 1e-4  # the optimizer's step size (100% of it)
    iterations: int = 3
    plot: bool = True  # save the reward curve
    note: str = "x"  # a comment # with a hash inside


def test_each_field_comment_is_read_from_the_source():
    assert field_comments(Args) == {"learning_rate": "the optimizer's step size (100% of it)",
                                    "plot": "save the reward curve", "note": "a comment # with a hash inside"}


def test_help_shows_the_comments_and_defaults(capsys):
    with pytest.raises(SystemExit):
        parse_args(Args, ["--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "--learning-rate LEARNING_RATE the optimizer's step size (100% of it) (float, default: 0.0001)" in out
    assert "--iterations ITERATIONS (int, default: 3)" in out
    assert "save the reward curve" in out
    assert parse_args(Args, ["--iterations", "5", "--no-plot"]) == Args(iterations=5, plot=False)


def test_help_shows_docstrings_without_sphinx_markup():
    assert plain_text("See :func:`~cosmos3_gym.world.harness.evaluate_world` and :mod:`cosmos3_gym.world`, "
                      "``gym.make`` and ``--world pusht``.") == \
        "See `evaluate_world` and `cosmos3_gym.world`, `gym.make` and `--world pusht`."


@dataclass
class Sampling:
    num_steps: int = 8  # denoising steps
    n_steps: int = 64  # the learner's rollout length
    noise_levels: str = "0,1"  # the policies' noise
    sde_noise: float = 0.7  # the sampler's noise


@pytest.mark.parametrize("argv, refused", [
    (["--steps", "3"], "--steps 3 (--steps: did you mean --n-steps or --num-steps?)"),  # every close flag
    (["--noise-level", "0.3"], "--noise-level 0.3 (--noise-level: did you mean --noise-levels?)"),  # no prefix match
    (["--num-stepz=2", "--num-stepz=3"], "--num-stepz=2 --num-stepz=3 (--num-stepz: did you mean --num-steps or "
                                         "--n-steps?);"),  # named once
    (["--", "--num-stepz"], "-- --num-stepz; `--help` lists the flags"),  # after "--" nothing is a flag
    (["--bogus", "1"], "--bogus 1; `--help` lists the flags"),  # nothing close: no guess
])
def test_an_unknown_flag_is_refused_with_the_close_flags(argv, refused, capsys):
    with pytest.raises(SystemExit) as exit_:
        parse_args(Sampling, argv)
    assert exit_.value.code == 2 and f"error: unrecognized arguments: {refused}" in capsys.readouterr().err
