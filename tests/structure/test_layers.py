"""The floors of docs/architecture.md, read from each module's syntax tree (so lazy imports count too):

- every room imports only rooms at its level or below;
- the maths rooms (gradients, analysis, policy, tables, rewards) import neither the command line (cli, flags)
  nor the configs: they take plain values, and the configs check flags and the environment;
- on the top floor runs, training and figures stack in one direction (figures -> training -> runs) through
  declared doors only: training reaches the runs through runs.group_size (adaptive K's advisor), figures read
  training's saved records through training.run_identity and training.runs_table; a run draws no figure."""

from __future__ import annotations

import ast
import os

import pytest

PACKAGE = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "grpo_mse")

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
    "training": 6,
    "figures": 7,
    "commands": 8,
}
MATHS = ("gradients", "analysis", "policy", "tables", "rewards")
COMMAND_LINE = ("cli", "flags", "config")  # what the maths rooms must not import
TOP = ("runs", "training", "figures")
# The only imports from one top-floor room into another: (importing room, imported module).
DOORS = {
    ("training", "grpo_mse.runs.group_size"),
    ("figures", "grpo_mse.training.run_identity"),
    ("figures", "grpo_mse.training.runs_table"),
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


def maths_command_line_imports(root: str = PACKAGE) -> list[str]:
    """``file:line: room imports module`` for every import of cli, flags or a config by a maths room."""
    problems = []
    for path, module in package_modules(root):
        if module.count(".") and room(module) in MATHS:
            for line, target in imported_modules(path, module):
                if room(target) in COMMAND_LINE:
                    problems.append(
                        f"{os.path.relpath(path, os.path.dirname(root))}:{line}: {room(module)} imports {target}"
                    )
    return problems


def top_floor_imports(root: str = PACKAGE) -> list[str]:
    """``file:line: room imports module`` for every import from one top-floor room into another that is not a
    declared door."""
    problems = []
    for path, module in package_modules(root):
        own = room(module) if module.count(".") else None
        if own not in TOP:
            continue
        for line, target in imported_modules(path, module):
            if room(target) in TOP and room(target) != own and (own, target) not in DOORS:
                problems.append(f"{os.path.relpath(path, os.path.dirname(root))}:{line}: {own} imports {target}")
    return problems


def fake_package(tmp_path, room_name: str, source: str) -> str:
    """A package ``grpo_mse`` under ``tmp_path`` whose room ``room_name`` holds one module with ``source``."""
    root = tmp_path / "grpo_mse"
    (root / room_name).mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / room_name / "__init__.py").write_text("")
    (root / room_name / "job.py").write_text(source)
    return str(root)


def test_every_room_has_a_level():
    rooms = {room(module) for _, module in package_modules() if module.count(".")}
    assert rooms <= set(LEVELS), f"rooms without a level: {sorted(rooms - set(LEVELS))}"


def test_no_room_imports_a_room_above_it():
    assert upward_imports() == []


def test_maths_rooms_import_no_command_line():
    assert maths_command_line_imports() == []


def test_top_floor_rooms_meet_only_through_their_doors():
    assert top_floor_imports() == []


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
    assert len(upward_imports(fake_package(tmp_path, "gradients", source))) == expected


@pytest.mark.parametrize(
    "room_name, source, expected",
    [
        ("gradients", "from grpo_mse.cli import require\n", 1),
        ("policy", "def f():\n    from grpo_mse import flags\n", 1),
        ("tables", "from grpo_mse.errors import UsageError\n", 0),  # error types are not the command line
        ("runs", "from grpo_mse.cli import require\n", 0),  # above the maths: allowed
    ],
)
def test_the_check_finds_command_line_imports_in_the_maths(tmp_path, room_name, source, expected):
    assert len(maths_command_line_imports(fake_package(tmp_path, room_name, source))) == expected


@pytest.mark.parametrize(
    "room_name, source, expected",
    [
        ("runs", "def f():\n    from grpo_mse.figures.tracecov import plot_run\n", 1),  # a run drawing
        ("training", "from grpo_mse.runs.tracecov import run_tracecov\n", 1),  # past the door
        ("training", "from grpo_mse.runs.group_size import measure_advice\n", 0),  # the door
        ("training", "from grpo_mse.figures.training import table2\n", 1),
        ("figures", "from grpo_mse.training.runs_table import read_training\n", 0),
        ("figures", "from grpo_mse.runs.oracle import run_oracle\n", 1),
        ("figures", "from grpo_mse.figures.training import table2\n", 0),  # within a room
    ],
)
def test_the_check_finds_top_floor_imports_past_the_doors(tmp_path, room_name, source, expected):
    assert len(top_floor_imports(fake_package(tmp_path, room_name, source))) == expected
