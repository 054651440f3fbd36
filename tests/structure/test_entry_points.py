"""One entry-point form: every command line is a Flags config run under cli.run (read from each file's syntax tree).

Only grpo_mse/flags.py and grpo_mse/cli.py may import argparse, touch sys.argv, build an ArgumentParser or exit;
every ``if __name__ == "__main__":`` block calls ``cli.run``. Tests are left out: they stand in for a user's
command line (runpy, sys.argv) on purpose.
"""

import ast
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
COMMAND_LINE_ROOMS = {"grpo_mse/flags.py", "grpo_mse/cli.py"}
NOT_A_COMMAND = {"grpo_mse/rewards/worker_pool.py"}  # a reward worker: started by the pool, talks over pipes


def python_files() -> list[str]:
    """The repository's tracked and untracked (not ignored) .py files outside tests/."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "*.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    names = [name for name in listed.stdout.split() if not name.startswith("tests/") and (ROOT / name).is_file()]
    assert len(names) > 50, names  # the listing worked
    return names


def command_line_uses(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, what) of every argparse import, sys.argv use, ArgumentParser, SystemExit or sys.exit in ``tree``."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, f"import {a.name}") for a in node.names if a.name.split(".")[0] == "argparse"]
        elif isinstance(node, ast.ImportFrom) and node.module:
            if node.module.split(".")[0] == "argparse" or (
                node.module == "sys" and any(a.name in ("argv", "exit") for a in node.names)
            ):
                found.append((node.lineno, f"from {node.module} import ..."))
        elif isinstance(node, ast.Attribute):
            owner = node.value.id if isinstance(node.value, ast.Name) else None
            if (owner == "sys" and node.attr in ("argv", "exit")) or node.attr in ("argparse", "ArgumentParser"):
                found.append((node.lineno, f"{owner or '...'}.{node.attr}"))
        elif isinstance(node, ast.Name) and node.id == "SystemExit":
            found.append((node.lineno, "SystemExit"))
    return found


def main_blocks(tree: ast.Module) -> list[ast.If]:
    """The module's ``if __name__ == "__main__":`` blocks."""
    return [
        node
        for node in tree.body
        if isinstance(node, ast.If)
        and isinstance(node.test, ast.Compare)
        and isinstance(node.test.left, ast.Name)
        and node.test.left.id == "__name__"
        and any(isinstance(c, ast.Constant) and c.value == "__main__" for c in node.test.comparators)
    ]


def calls_cli_run(block: ast.If) -> bool:
    return any(
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "run"
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "cli"
        for node in ast.walk(block)
    )


def test_only_flags_and_cli_parse_command_lines():
    offenders = []
    for name in python_files():
        if name in COMMAND_LINE_ROOMS:
            continue
        tree = ast.parse((ROOT / name).read_text(encoding="utf-8"), filename=name)
        offenders += [f"{name}:{line}: {what}" for line, what in command_line_uses(tree)]
    assert not offenders, "parse flags with a grpo_mse.flags config, exit through cli.run:\n" + "\n".join(offenders)


def test_every_main_block_runs_under_cli_run():
    entry_points, offenders = 0, []
    for name in python_files():
        tree = ast.parse((ROOT / name).read_text(encoding="utf-8"), filename=name)
        for block in main_blocks(tree):
            entry_points += 1
            if name not in NOT_A_COMMAND and not calls_cli_run(block):
                offenders.append(f"{name}:{block.lineno}")
    assert entry_points > 30 and not offenders, offenders


def test_the_checks_see_what_they_forbid():
    """The syntax-tree checks flag each forbidden form (a check that finds nothing would pass vacuously)."""
    source = (
        "import argparse\nfrom argparse import Namespace\nimport sys\nfrom sys import argv\n"
        "x = sys.argv[1:]\np = cli.ArgumentParser()\nraise SystemExit(1)\nsys.exit(2)\ncli.argparse.Action\n"
        "if __name__ == '__main__':\n    sys.exit(main())\n"
    )
    tree = ast.parse(source)
    assert [line for line, _ in command_line_uses(tree)] == [1, 2, 4, 5, 6, 7, 8, 9, 11]
    assert not calls_cli_run(main_blocks(tree)[0])
    assert calls_cli_run(main_blocks(ast.parse("if __name__ == '__main__':\n    cli.run(main)\n"))[0])
