"""The package's layers, read from its import statements: arrows point down only.

``model <- rollout <- env <- world <- train <- {cli, bench, evaluate}``: the world-model trainer imagines
with the world env (``--imagined-conditions``, as the PushT trainer does), and no world imports a trainer.
``model/`` and ``rollout/`` never import gymnasium (they are the denoising MDP without Gym, usable by a
trainer that has none).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "cosmos3_gym"
LAYERS = {"model": 0, "rollout": 1, "env": 2, "world": 3, "train": 4}
TOP = 5  # cli, bench, evaluate and the package's __init__


def layer_of(module: str) -> tuple[str, int]:
    """``("model", 0)`` for ``cosmos3_gym.model.packing``; ``("cli", 5)`` for a top-level module."""
    parts = module.split(".")
    name = parts[1] if len(parts) > 1 else "__init__"
    return name, LAYERS.get(name, TOP)


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, source: str | None = None) -> list[tuple[int, str]]:
    """Every module an import statement of ``path`` (or ``source`` read as that file) names,
    function-level imports included, as absolute names."""
    module = module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text() if source is None else source, str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            # "from . import x" names a module x of the package, or an attribute of it
            found += [(node.lineno, f"{base}.{alias.name}" if not node.module else base) for alias in node.names]
    return found


def upward_imports(path: Path, source: str | None = None) -> list[str]:
    """Imports of a higher layer, or of another subpackage of the same layer. The top-level modules
    (cli, bench, evaluate) may use each other."""
    here, rank = layer_of(module_name(path))
    found = []
    for line, target in imports_of(path, source):
        there, their_rank = layer_of(target) if target.startswith("cosmos3_gym.") else (None, -1)
        if there not in (None, here) and (their_rank > rank or their_rank == rank < TOP):
            found.append(f"line {line}: {target} ({there}, layer {their_rank}) from {here} (layer {rank})")
    return found


def gymnasium_imports(path: Path, source: str | None = None) -> list[str]:
    return [f"line {line}: {target}" for line, target in imports_of(path, source) if target.split(".")[0] == "gymnasium"]


SOURCES = sorted(PACKAGE.rglob("*.py"))


def test_the_layers_are_what_the_design_says():
    assert {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()} == set(LAYERS)


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_imports_point_down_only(path):
    assert not upward_imports(path), "imports that point up or sideways:\n" + "\n".join(upward_imports(path))


@pytest.mark.parametrize("path", [p for p in SOURCES if layer_of(module_name(p))[1] <= LAYERS["rollout"]],
                         ids=lambda p: str(p.relative_to(PACKAGE)))
def test_model_and_rollout_never_import_gymnasium(path):
    assert not gymnasium_imports(path), f"{path.name} imports gymnasium: {gymnasium_imports(path)}"


def test_the_checks_see_a_leak():
    """A model module that imported the env layer and gymnasium inside a function, or a world module
    that imported the trainer, would be caught."""
    packing = PACKAGE / "model" / "packing.py"
    leak = packing.read_text() + "\n\ndef _leak():\n    import gymnasium\n    from ..env.presets import Preset\n"
    assert [m for m in upward_imports(packing, leak) if "cosmos3_gym.env.presets" in m]
    assert gymnasium_imports(packing, leak)
    envs = PACKAGE / "world" / "envs.py"
    assert upward_imports(envs, envs.read_text() + "\nfrom ..train import grpo\n")
    assert not upward_imports(packing) and not gymnasium_imports(packing)
