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
