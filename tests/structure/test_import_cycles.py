"""No import cycle between the package's modules, function-level imports included (read from each module's syntax
tree, so an import hidden inside a function to dodge a cycle at load time counts as the cycle it is)."""

from __future__ import annotations

import ast
import os

PACKAGE = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "grpo_mse")


def modules(root: str) -> dict[str, str]:
    """{dotted module name: file} of every module under ``root`` (a package ``__init__`` under the package's name)."""
    found = {}
    for folder, _, names in os.walk(root):
        for name in names:
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                dotted = os.path.relpath(path, os.path.dirname(root))[: -len(".py")].replace(os.sep, ".")
                found[dotted.removesuffix(".__init__")] = path
    return found


def import_graph(root: str = PACKAGE) -> dict[str, set[str]]:
    """{module: the package's modules it imports anywhere in its file}; ``from a.b import c`` means the module
    a.b.c when there is one, else a.b; an import of a module's attribute counts as an import of the module."""
    known = modules(root)
    top = os.path.basename(root)
    graph = {}
    for module, path in known.items():
        package = module if path.endswith("__init__.py") else module.rsplit(".", 1)[0]
        targets = set()
        for node in ast.walk(ast.parse(open(path, encoding="utf-8").read(), filename=path)):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")
                    base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
                names = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
            else:
                continue
            for name in names:
                while name and name not in known:  # an attribute of a module: the module
                    name = name.rsplit(".", 1)[0] if "." in name else ""
                if name and name != module and name.split(".")[0] == top:
                    targets.add(name)
        graph[module] = targets
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan's algorithm, iterative)."""
    index, low, on_stack, stack, found, counter = {}, {}, set(), [], [], 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_import_cycle_between_modules():
    assert cycles(import_graph()) == []


def test_a_cycle_through_a_function_level_import_is_found(tmp_path):
    """The check itself: a imports b at module level, b imports a inside a function (the dodge advisor and
    measured_curve once used); a third module importing both is not part of the cycle."""
    root = tmp_path / "pkg"
    (root / "room").mkdir(parents=True)
    for name, source in (
        ("__init__.py", ""),
        ("room/__init__.py", ""),
        ("room/a.py", "from pkg.room import b\n"),
        ("room/b.py", "def f():\n    from pkg.room.a import g\n    return g\n"),
        ("room/c.py", "from pkg.room import a, b\n"),
    ):
        (root / name).write_text(source)
    assert cycles(import_graph(str(root))) == [["pkg.room.a", "pkg.room.b"]]
    (root / "room/b.py").write_text("def f():\n    return 1\n")
    assert cycles(import_graph(str(root))) == []


def function_level_imports(root: str = PACKAGE) -> list[tuple[str, str]]:
    """(module, imported package module) for every import of the package made inside a function."""
    found = []
    for module, path in modules(root).items():
        for function in ast.walk(ast.parse(open(path, encoding="utf-8").read(), filename=path)):
            if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                found += [
                    (module, node.module)
                    for node in ast.walk(function)
                    if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("grpo_mse")
                ]
    return found


def test_what_every_command_loads_is_imported_at_the_top():
    """A function-level import is for a module that a command's --help or a default run should not load (torch,
    matplotlib, an optional format or feature). grpo_mse.errors is loaded by every command line (cli imports it): the
    seven function-level imports of it (issue 57) hid a dependency and saved nothing."""
    assert [(module, target) for module, target in function_level_imports() if target == "grpo_mse.errors"] == []
