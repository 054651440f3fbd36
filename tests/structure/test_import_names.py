"""One name per module where two readings collide (issue 35 item 6), read from every file's syntax tree:

- ``bs`` reads as batch size in ML code, so nothing is imported as ``bs`` (the bootstrap module is ``bootstrap``);
- ``dist`` reads as ``torch.distributed``, so the project's ``grpo_mse.distributed`` is never imported as ``dist``
  and ``dist`` names nothing else."""

from __future__ import annotations

import ast
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FOLDERS = (
    "grpo_mse",
    "studies",
    "tests",
    "scripts",
    "Gradient_evaluation",
    "Policy_Optimization",
    "plots",
)


def imports():
    """(file relative to the root, imported module, the name it is bound to) for every import in the tree."""
    for folder in FOLDERS:
        for directory, _, files in os.walk(os.path.join(ROOT, folder)):
            for name in files:
                if not name.endswith(".py"):
                    continue
                path = os.path.join(directory, name)
                with open(path, encoding="utf-8") as handle:
                    tree = ast.parse(handle.read(), path)
                where = os.path.relpath(path, ROOT)
                for node in ast.walk(tree):
                    if isinstance(node, ast.Import):
                        for alias in node.names:
                            yield where, alias.name, alias.asname or alias.name.split(".")[0]
                    elif isinstance(node, ast.ImportFrom) and node.module:
                        for alias in node.names:
                            yield where, f"{node.module}.{alias.name}", alias.asname or alias.name


def test_nothing_is_imported_as_bs():
    assert [(where, module) for where, module, bound in imports() if bound == "bs"] == []


def test_dist_is_only_torch_distributed():
    wrong = [(where, module) for where, module, bound in imports() if bound == "dist" and module != "torch.distributed"]
    assert wrong == []


def test_the_bootstrap_module_is_called_bootstrap():
    wrong = [
        (where, bound)
        for where, module, bound in imports()
        if module == "grpo_mse.analysis.bootstrap" and bound != "bootstrap"
    ]
    assert wrong == []


def error_names() -> set[str]:
    """The names whose one home is grpo_mse.errors: its error types and ``require``."""
    from grpo_mse import errors

    types = {name for name, value in vars(errors).items() if isinstance(value, type) and issubclass(value, Exception)}
    return {name for name in types if getattr(errors, name).__module__ == errors.__name__} | {"require"}


def test_the_error_types_and_require_are_taken_from_errors_only():
    """Issue 57: cli.py, tables/inputs.py and policy/loading.py re-exported the error types, and ``cli.require`` was a
    second home of ``errors.require``: a reader could not tell which one a module meant. Imported by name or reached
    as another module's attribute (``cli.require``), they come from grpo_mse.errors."""
    names = error_names()
    wrong = [
        (where, module)
        for where, module, _ in imports()
        if module.startswith("grpo_mse.") and module.rsplit(".", 1)[1] in names
        if module.rsplit(".", 1)[0] != "grpo_mse.errors"
    ]
    for folder in FOLDERS:
        for directory, _, files in os.walk(os.path.join(ROOT, folder)):
            for name in (f for f in files if f.endswith(".py")):
                path = os.path.join(directory, name)
                with open(path, encoding="utf-8") as handle:
                    tree = ast.parse(handle.read(), path)
                wrong += [
                    (os.path.relpath(path, ROOT), f"{node.value.id}.{node.attr}")
                    for node in ast.walk(tree)
                    if isinstance(node, ast.Attribute) and node.attr in names and isinstance(node.value, ast.Name)
                    if node.value.id not in ("errors", "self", "cls", "pytest")
                ]
    assert {"require", "UsageError", "ModelError", "DataError"} <= names and wrong == []
