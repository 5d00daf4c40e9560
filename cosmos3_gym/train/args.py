"""Command-line flags from a typed dataclass (the examples' and the trainer's arguments)."""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import io
import math
import tokenize
from typing import NoReturn

from ..env.docstrings import plain_text


def field_comments(cls) -> dict[str, str]:
    """The comment written after each field of dataclass ``cls`` (``lr: float = 1e-4  # the step size``),
    by field name: the examples document their flags there, and ``--help`` shows it."""
    try:
        source = inspect.getsource(cls)
    except (OSError, TypeError):  # defined where no source is kept (an interactive session)
        return {}
    comments, names = {}, set(f.name for f in dataclasses.fields(cls))
    line_of_field = {}
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.NAME and token.start[1] == 4 and token.string in names:
            line_of_field.setdefault(token.start[0], token.string)
        elif token.type == tokenize.COMMENT and token.start[0] in line_of_field:
            comments[line_of_field[token.start[0]]] = token.string.lstrip("#").strip()
    return comments


def unknown_flags_error(parser: argparse.ArgumentParser, unknown: list[str], command: str | None = None) -> NoReturn:
    """Exit with argparse's usage error for flags ``parser`` does not take, naming its close flags for
    each (``--steps`` where the command spells it ``--num-steps``; every close one, since the nearest
    in spelling may mean something else) and where the full list is."""
    import difflib

    names = [option[2:] for action in parser._actions for option in action.option_strings if option.startswith("--")]
    flags = unknown[:unknown.index("--")] if "--" in unknown else unknown  # after "--" nothing is a flag
    hints = []
    for given in dict.fromkeys(item.split("=", 1)[0] for item in flags if item.startswith("--")):
        near = difflib.get_close_matches(given[2:], names, n=3, cutoff=0.7)
        hints += [f"{given}: did you mean {' or '.join('--' + name for name in near)}?"] if near else []
    parser.error(f"unrecognized arguments: {' '.join(unknown)}" + (f" ({'; '.join(hints)})" if hints else "")
                 + f"; `{command or '--help'}{' --help' if command else ''}` lists the flags")


def parse_args(cls, argv=None, description: str | None = None, prog: str | None = None, check=None):
    """An instance of dataclass ``cls`` with each field settable as ``--field-name`` (and as the other names
    ``cls.FLAG_ALIASES`` gives it, ``{field: ("--alias", ...)}``: the env keyword a flag sets, where the
    flag is named otherwise); ``check(args)``, where given, is a command's own check of its flags (a
    ``ValueError`` is a usage error, as the dataclass's own).

    Also applies the package's thread policy (:func:`cosmos3_gym.model.threads.configure_threads`:
    one torch thread on the CPU unless ``OMP_NUM_THREADS`` says otherwise)."""
    from ..model.threads import configure_threads

    # allow_abbrev=False: a prefix is not silently taken for a longer flag (--noise-level for --noise-levels)
    parser = argparse.ArgumentParser(prog=prog, description=description and plain_text(description),
                                     formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False)
    comments, aliases = field_comments(cls), getattr(cls, "FLAG_ALIASES", {})
    for field in dataclasses.fields(cls):
        options = (f"--{field.name.replace('_', '-')}", *aliases.get(field.name, ()))
        about = plain_text(comments.get(field.name, "")).replace("%", "%%")
        if isinstance(field.default, bool):  # the action appends "(default: ...)" itself
            parser.add_argument(*options, action=argparse.BooleanOptionalAction, default=field.default, help=about)
        else:
            shown = "%(default)s" if field.default != "" else '""'  # an empty default shows as ""
            kind = f"{type(field.default).__name__}, default: {shown}"
            parser.add_argument(*options, type=type(field.default), default=field.default, dest=field.name,
                                help=f"{about} ({kind})" if about else f"({kind})")
    flags, unknown = parser.parse_known_args(argv)
    if unknown:
        unknown_flags_error(parser, unknown, prog)
    flags = vars(flags)
    configure_threads()  # after the flags: --help loads no torch
    try:
        args = cls(**flags)
        if check is not None:
            check(args)
        return args
    except ValueError as error:  # a dataclass's own checks (require_at_least): usage and message, exit 2
        parser.error(str(error))


def require_at_least(args, **minimums) -> None:
    """Raise ``ValueError`` for the first field of ``args`` below its minimum, named as its flag,
    so a budget too small to run fails before any model loads (call from ``__post_init__``)."""
    for name, minimum in minimums.items():
        value = getattr(args, name)
        if value < minimum:
            raise ValueError(f"--{name.replace('_', '-')} {value} is too small; use {minimum} or more")


def comma_separated(flag: str, text: str, kind, what: str) -> list:
    """``text``'s comma-separated values as ``kind``; a ``ValueError`` naming ``flag`` otherwise (for a
    list flag, checked in ``__post_init__``)."""
    try:
        return [kind(part) for part in text.split(",")]
    except ValueError:
        raise ValueError(f"{flag} {text!r}: use comma-separated {what}, e.g. "
                         f"{'8,4' if kind is int else '0,1,2'}") from None


def refuse_to_replace_a_checkpoint(args) -> None:
    """A trainer's ``--out`` that already holds a checkpoint is refused before anything trains, unless
    ``--overwrite``: a run does not silently replace weights someone kept (the shipped ones included).
    A command-line check (``parse_args(..., check=)``), not the dataclass's: code that builds the
    arguments without running the trainer does not care what the folder holds."""
    from pathlib import Path

    out, overwrite = args.out, args.overwrite
    if (Path(out) / "model_index.json").exists() and not overwrite:
        raise ValueError(f"--out {out!r} already holds a checkpoint; add --overwrite to replace it, or choose "
                         "another folder")


def require_finite_non_negative(args, **meanings) -> None:
    """Raise ``ValueError`` for the first float field of ``args`` that is negative, infinite or NaN, named
    as its flag, with what its value means (a weight or a noise scale; call from ``__post_init__``)."""
    for name, meaning in meanings.items():
        value = getattr(args, name)
        if not (math.isfinite(value) and value >= 0.0):
            raise ValueError(f"--{name.replace('_', '-')} {value} is not a finite number >= 0 ({meaning})")


def check_trainer_flags(args) -> None:
    """The flags both world-model trainers share, refused before anything loads (call from
    ``__post_init__``): a NaN or infinite rate or weight trains to a checkpoint of NaNs without a word,
    and an empty ``--out`` would write into the working directory."""
    if not args.out.strip():
        raise ValueError(f"--out {args.out!r} names no folder; give the folder to write the checkpoint to")
    for name, meaning in (("lr", "the transformer's peak learning rate"), ("vae_lr", "the VAE's peak learning rate")):
        value = getattr(args, name)
        if not (math.isfinite(value) and value > 0.0):
            raise ValueError(f"--{name.replace('_', '-')} {value} is not a finite number > 0 ({meaning})")
    require_finite_non_negative(args, kl_weight="the weight of the VAE's KL term", max_minutes="0: no time limit")
    if not 0.0 <= args.uncond_prob <= 1.0:
        raise ValueError(f"--uncond-prob {args.uncond_prob} is not a share in [0, 1]")


def check_trainer_command(args) -> None:
    """A trainer's command-line checks (``parse_args(..., check=)``): :func:`refuse_to_replace_a_checkpoint`,
    and an ``--init-from`` that is not a checkpoint refused as a usage error before anything loads."""
    from ..model.checkpoint import check_checkpoint

    refuse_to_replace_a_checkpoint(args)
    if args.init_from:
        try:
            check_checkpoint(args.init_from)
        except (FileNotFoundError, ValueError) as error:
            raise ValueError(f"--init-from: {error}") from None


def apply_quick(args, quick: dict) -> None:
    """An example's ``--quick``: each of ``quick``'s values replaces its field where the field is still
    at its default, so that a flag given beside ``--quick`` wins."""
    fields = {f.name: f for f in dataclasses.fields(args)}
    for name, value in quick.items():
        if getattr(args, name) == fields[name].default:
            setattr(args, name, value)


def guidance_override(args) -> dict:
    """A ``--guidance`` flag (``args.guidance``) as the imagined env's keyword arguments: 0 keeps the
    env's default, a finite scale >= 1 is passed as ``guidance_scale``; ``ValueError`` for anything
    else, so that calling it in ``__post_init__`` refuses a bad flag before anything loads."""
    if not (args.guidance == 0 or (math.isfinite(args.guidance) and args.guidance >= 1)):
        raise ValueError(f"--guidance {args.guidance}: use 0 (the env's default) or a finite scale >= 1 "
                         f"(1: no classifier-free guidance)")
    return {"guidance_scale": args.guidance} if args.guidance else {}
