"""The layer rule of docs/architecture.md: every room of the package imports only rooms at its level or below,
also inside functions (read from each module's syntax tree, so lazy imports count too)."""

from __future__ import annotations

import ast
import os

import pytest

PACKAGE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "grpo_mse")

# Room -> level; a module may import rooms of its own level or lower ones.
LEVELS = {
    "cli": 0,
    "errors": 0,
    "flags": 0,
    "distributed": 0,
    "rewards": 0,
    "tables": 0,
    "policy": 1,
    "builtin": 1,
    "gradients": 2,
    "analysis": 3,
    "config": 4,
    "runs": 5,
    "training": 5,
    "figures": 5,
}


def room(module: str) -> str:
    """``grpo_mse.tables.inputs`` -> ``tables``; ``grpo_mse.cli`` -> ``cli``."""
    return module.split(".")[1]


def imported_modules(path: str, module: str) -> list[tuple[int, str]]:
    """(line, absolute module) of every ``grpo_mse`` import in the file, at any depth; relative imports resolved."""
    tree = ast.parse(open(path, encoding="utf-8").read(), filename=path)
    package = module.rsplit(".", 1)[0] if not path.endswith("__init__.py") else module
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            targets = [base] if base != "grpo_mse" else [f"grpo_mse.{alias.name}" for alias in node.names]
            found += [(node.lineno, target) for target in targets]
    return [(line, name) for line, name in found if name.startswith("grpo_mse.")]


def package_modules(root: str = PACKAGE) -> list[tuple[str, str]]:
    """(file path, dotted module name) of every module under ``root``."""
    out = []
    for folder, _, names in os.walk(root):
        for name in sorted(names):
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                relative = os.path.relpath(path, os.path.dirname(root))[: -len(".py")]
                out.append((path, relative.replace(os.sep, ".").removesuffix(".__init__")))
    return out


def upward_imports(root: str = PACKAGE) -> list[str]:
    """``file:line: room imports higher room`` for every import that breaks the layer rule."""
    problems = []
    for path, module in package_modules(root):
        if module.count(".") == 0:
            continue
        own = room(module)
        for line, target in imported_modules(path, module):
            if LEVELS[room(target)] > LEVELS[own]:
                problems.append(
                    f"{os.path.relpath(path, os.path.dirname(root))}:{line}: {own} imports "
                    f"{target} ({room(target)} is above {own})"
                )
    return problems


def test_every_room_has_a_level():
    rooms = {room(module) for _, module in package_modules() if module.count(".")}
    assert rooms <= set(LEVELS), f"rooms without a level: {sorted(rooms - set(LEVELS))}"


def test_no_room_imports_a_room_above_it():
    assert upward_imports() == []


@pytest.mark.parametrize(
    "source, expected",
    [
        ("from grpo_mse.analysis.advisor import BetweenPromptBatch\n", 1),  # module level
        ("def f():\n    from grpo_mse.figures import tracecov\n", 1),  # inside a function
        ("import grpo_mse.runs.tracecov\n", 1),
        ("from grpo_mse import runs\n", 1),
        ("from ..analysis import paired\n", 1),  # relative
        ("from grpo_mse.tables.outputs import write_json\nfrom . import statistics\n", 0),  # down and sideways
    ],
)
def test_the_check_finds_upward_imports(tmp_path, source, expected):
    """A fake package whose gradients room imports the given source: the checker reports exactly ``expected``."""
    root = tmp_path / "grpo_mse"
    (root / "gradients").mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "gradients" / "__init__.py").write_text("")
    (root / "gradients" / "job.py").write_text(source)
    assert len(upward_imports(str(root))) == expected
