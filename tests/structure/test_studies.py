"""The package is the product (issue 44 item 1), read from the syntax trees (imports inside functions count too):

- every module of ``grpo_mse/`` is reached by a product command line: ``calculate_oracle_v.py``,
  ``run_tracecov.py``, ``plots/make_figures.py``, the files under ``Policy_Optimization/`` and the modules
  ``grpo_train.sh`` runs with ``python -m``; a module that none of them reaches belongs under ``studies/``
  (a registry's entry "grpo_mse.module:attribute", such as a sampling backend's factory, reaches its module);
- nothing in the package imports a study, and the studies import one another without a cycle."""

from __future__ import annotations

import ast
import glob
import os
import re

from test_import_cycles import cycles, import_graph

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PACKAGE = os.path.join(ROOT, "grpo_mse")
STUDIES = os.path.join(ROOT, "studies")
COMMAND_LINES = ["Gradient_evaluation/*.py", "Policy_Optimization/*.py", "plots/make_figures.py"]
LAUNCHER = "Policy_Optimization/grpo_train.sh"


def imported_names(path: str) -> set[str]:
    """Every absolute module name a script imports, at any depth (``from a import b`` gives a and a.b)."""
    names = set()
    for node in ast.walk(ast.parse(open(path, encoding="utf-8").read(), filename=path)):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names |= {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
    return names


def entry_modules(root: str = ROOT) -> set[str]:
    """The package modules the product's command lines import, and those the launcher runs with ``-m``."""
    names = set()
    for pattern in COMMAND_LINES:
        for path in glob.glob(os.path.join(root, pattern)):
            names |= imported_names(path)
    with open(os.path.join(root, LAUNCHER), encoding="utf-8") as handle:
        names |= set(re.findall(r"-m (grpo_mse(?:\.\w+)+)", handle.read()))
    return {name for name in names if name.split(".")[0] == "grpo_mse"}


REGISTERED = re.compile(r"^(grpo_mse(?:\.\w+)+):\w+$")  # "module:attribute", imported when the entry is used


def registered_modules(root: str) -> dict[str, set[str]]:
    """{module: the package modules its registry entries name} (string constants "grpo_mse.a.b:attribute")."""
    found = {}
    for path in glob.glob(os.path.join(root, "grpo_mse", "**", "*.py"), recursive=True):
        module = os.path.relpath(path, root)[: -len(".py")].replace(os.sep, ".").removesuffix(".__init__")
        tree = ast.parse(open(path, encoding="utf-8").read(), filename=path)
        names = {
            REGISTERED.match(node.value).group(1)
            for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and REGISTERED.match(node.value)
        }
        if names:
            found[module] = names
    return found


def reached(graph: dict[str, set[str]], starts: set[str]) -> set[str]:
    """The modules of ``graph`` that ``starts`` reach (a name that is an attribute of a module gives the module)."""
    seen, todo = set(), [name for name in starts if name in graph]
    todo += [name.rsplit(".", 1)[0] for name in starts if name not in graph and name.rsplit(".", 1)[0] in graph]
    while todo:
        module = todo.pop()
        if module not in seen:
            seen.add(module)
            todo += graph[module]
    return seen


def unreached_modules(root: str = ROOT) -> list[str]:
    """The package's modules (docstring-only ``__init__`` files aside) that no product command line reaches."""
    graph = import_graph(os.path.join(root, "grpo_mse"))
    for module, names in registered_modules(root).items():
        graph[module] = graph[module] | {name for name in names if name in graph}
    found = reached(graph, entry_modules(root))
    packages = {name for name in graph if any(module.startswith(name + ".") for module in found)}  # a.b.c: a, a.b
    return sorted(set(graph) - found - packages)


def package_imports_of_studies(root: str = PACKAGE) -> list[str]:
    """``file:line: module`` for every import of ``studies`` inside the package."""
    found = []
    for path in sorted(glob.glob(os.path.join(root, "**", "*.py"), recursive=True)):
        for node in ast.walk(ast.parse(open(path, encoding="utf-8").read(), filename=path)):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                targets = [node.module or ""]
            else:
                continue
            rel = os.path.relpath(path, os.path.dirname(root))
            found += [f"{rel}:{node.lineno}: {name}" for name in targets if name.split(".")[0] == "studies"]
    return found


def test_every_package_module_is_reached_by_a_command_line():
    assert unreached_modules() == [], "move what no product command line reaches to studies/"


def test_the_package_imports_no_study():
    assert package_imports_of_studies() == []


def test_no_import_cycle_between_studies():
    assert cycles(import_graph(STUDIES)) == []


def fake_repo(tmp_path, modules: dict[str, str]) -> str:
    """A checkout with one command line (``plots/make_figures.py`` importing grpo_mse.commands.job), a launcher
    running ``grpo_mse.training.budget`` and the given package modules."""
    for name, source in {
        "plots/make_figures.py": "from grpo_mse.commands.job import main\n",
        LAUNCHER: 'SETTINGS="$(python -m grpo_mse.training.budget 8 1024)"\n',
        "grpo_mse/__init__.py": "",
        "grpo_mse/commands/__init__.py": "",
        "grpo_mse/training/__init__.py": "",
        "grpo_mse/training/budget.py": "",
        **modules,
    }.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source)
    return str(tmp_path)


def test_the_check_finds_a_module_no_command_line_reaches(tmp_path):
    root = fake_repo(
        tmp_path,
        {
            "grpo_mse/commands/job.py": "def main():\n    from grpo_mse.commands import helper\n",
            "grpo_mse/commands/helper.py": "",
            "grpo_mse/commands/bench.py": "from grpo_mse.commands import helper\n",
        },
    )
    assert unreached_modules(root) == ["grpo_mse.commands.bench"]
    os.remove(os.path.join(root, "grpo_mse", "commands", "bench.py"))
    assert unreached_modules(root) == []


def test_a_registry_entry_reaches_its_module(tmp_path):
    """A backend named only in a registry ("module:attribute", imported when used) is reached through it."""
    root = fake_repo(
        tmp_path,
        {
            "grpo_mse/commands/job.py": "from grpo_mse.commands import registry\n",
            "grpo_mse/commands/registry.py": 'BACKENDS = {"x": "grpo_mse.commands.backend_x:make"}\n',
            "grpo_mse/commands/backend_x.py": "",
            "grpo_mse/commands/backend_y.py": "",
        },
    )
    assert unreached_modules(root) == ["grpo_mse.commands.backend_y"]


def test_the_check_finds_a_package_import_of_a_study(tmp_path):
    root = tmp_path / "grpo_mse"
    root.mkdir()
    (root / "a.py").write_text("def f():\n    from studies.exact import theory\n")
    (root / "b.py").write_text("import studies.audits.run_agreement\nfrom grpo_mse import a\n")
    assert [line.split(": ")[1] for line in package_imports_of_studies(str(root))] == [
        "studies.exact",
        "studies.audits.run_agreement",
    ]
