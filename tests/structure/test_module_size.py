"""What a reader must open (issues 35 and 57): no module of the package or of studies/ is over MAX_LINES lines, and the
files one default run_tracecov.py (a real tiny run on the shipped tiny policy, flags otherwise at their defaults)
passes through are the ones docs/architecture.md names in "The files of one run".

The run's imports are recorded from ``sys.modules``, so a module reached through a function-level import or an
importlib string counts like any other: the test asks that the run's path be documented, not that it be short (the
layers and the absence of import cycles are tests/structure/test_layers.py and test_import_cycles.py). A package
``__init__.py`` that holds only a docstring is not a file a reader opens.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PACKAGE = os.path.join(ROOT, "grpo_mse")
MAX_LINES = 450
ARCHITECTURE = os.path.join(ROOT, "docs", "architecture.md")
TABLE = "results/demo/oracle_v_n256_tiny_policy_20261201_225502.jsonl"

# Runs the script as ``python Gradient_evaluation/run_tracecov.py ...`` would and writes, at exit, the package's
# modules that were imported (those with a file).
RECORD_IMPORTS = """
import atexit, runpy, sys
out = sys.argv.pop(1)

def record():
    names = [m for m, mod in sys.modules.items() if m.split(".")[0] == "grpo_mse" and getattr(mod, "__file__", None)]
    open(out, "w").write("\\n".join(sorted(names)))

atexit.register(record)
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def module_path(name: str) -> str:
    path = os.path.join(ROOT, *name.split("."))
    return path + ".py" if os.path.isfile(path + ".py") else os.path.join(path, "__init__.py")


def only_a_docstring(path: str) -> bool:
    """True for a file whose body is at most a docstring (an empty file too)."""
    body = ast.parse(open(path, encoding="utf-8").read(), filename=path).body
    return all(isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) for node in body)


def project_files(modules: list[str]) -> list[str]:
    """The modules a reader opens: all but the package __init__ files that hold only a docstring."""
    return [name for name in modules if not only_a_docstring(module_path(name))]


def long_modules(root: str = PACKAGE, limit: int = MAX_LINES) -> list[str]:
    """``path: N lines`` for every module under ``root`` longer than ``limit`` lines."""
    found = []
    for folder, _, names in os.walk(root):
        for name in sorted(names):
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                with open(path, encoding="utf-8") as f:
                    count = len(f.read().splitlines())
                if count > limit:
                    found.append(f"{os.path.relpath(path, ROOT)}: {count} lines")
    return found


def test_no_module_is_over_the_limit():
    assert long_modules() == []
    assert long_modules(os.path.join(ROOT, "studies")) == []  # the studies beside the package too


def test_the_line_check_finds_a_long_module(tmp_path):
    (tmp_path / "short.py").write_text("x = 1\n" * MAX_LINES)
    (tmp_path / "long.py").write_text("x = 1\n" * (MAX_LINES + 1))
    assert [line.split(os.sep)[-1] for line in long_modules(str(tmp_path))] == [f"long.py: {MAX_LINES + 1} lines"]


def test_an_init_file_with_only_a_docstring_does_not_count(tmp_path):
    docstring, reexport, empty = tmp_path / "a.py", tmp_path / "b.py", tmp_path / "c.py"
    docstring.write_text('"""A room."""\n')
    reexport.write_text('"""A room."""\n\nfrom x import y  # noqa\n')
    empty.write_text("")
    assert [only_a_docstring(str(p)) for p in (docstring, reexport, empty)] == [True, False, True]


def documented_run_files(path: str = ARCHITECTURE) -> set[str]:
    """The package modules named (as ``room/file.py`` or ``file.py`` in backquotes) in the numbered steps of
    architecture.md's "The files of one run"."""
    text = open(path, encoding="utf-8").read()
    section = text.split("## The files of one run", 1)[1].split("\n## ", 1)[0]
    steps = "\n".join(line for line in section.split("\n\n") if re.match(r"\d+\. ", line))
    found = set()
    for name in re.findall(r"`([\w/]+)\.py`", steps):
        if os.path.isfile(os.path.join(PACKAGE, name + ".py")):  # a package's own __init__.py names the package
            found.add("grpo_mse." + name.removesuffix("/__init__").replace("/", "."))
    return found


def test_the_documented_steps_are_read(tmp_path):
    page = tmp_path / "architecture.md"
    page.write_text(
        "## The files of one run\n\nIntro naming `tables/formats.py`.\n\n"
        "1. flags: `cli.py` -> `Gradient_evaluation/run_tracecov.py`,\n   `runs/tracecov.py` and `no/such.py`;\n"
        "2. write: `tables/outputs.py`.\n\n## Next\n`flags.py`\n"
    )
    assert documented_run_files(str(page)) == {"grpo_mse.cli", "grpo_mse.runs.tracecov", "grpo_mse.tables.outputs"}


def recorded_run(tmp_path, *extra: str) -> list[str]:
    """The package's modules a tiny run_tracecov.py run (with ``extra`` flags) imports, after checking it ran."""
    out, record = tmp_path / "run", tmp_path / "imports.txt"
    argv = ["--model", "assets/tiny_policy", "--oracle_table", TABLE, "--device", "cpu", "--dtype", "fp32"]
    argv += ["--save_json", str(out), "--plot_path", str(out), "--T", "4", "--M", "2", "--K_list", "2", "4", *extra]
    env = {**os.environ, "PYTHONPATH": ROOT, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-c", RECORD_IMPORTS, str(record), "Gradient_evaluation/run_tracecov.py", *argv],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert list(out.glob("tracecov_*.png")) and list(out.glob("tracecov_*_per_prompt.csv"))  # a whole run
    modules = record.read_text().split()
    assert "grpo_mse.runs.tracecov" in modules and "grpo_mse.figures.tracecov" in modules  # the record worked
    return modules


@pytest.mark.slow
def test_a_run_without_the_advisor_imports_none_of_it(tmp_path):
    """The advisor observes the run through its hook (runs/advisor_hook.py), imported only when it is on: a run with
    --no_advisor loads none of the advisor's modules, and fewer files than a default run."""
    modules = recorded_run(tmp_path, "--no_advisor")
    advisor = {"analysis.advisor", "analysis.measured_curve", "analysis.error_model"}
    advisor |= {"runs.advisor_hook"}
    assert not {f"grpo_mse.{name}" for name in advisor} & set(modules)
    assert set(project_files(modules)) < documented_run_files()  # fewer files than a default run


@pytest.mark.slow
def test_a_default_tracecov_run_passes_through_few_files(tmp_path):
    modules = recorded_run(tmp_path)
    assert "grpo_mse.runs.advisor_hook" in modules  # the advisor is on by default
    files = set(project_files(modules))
    documented = documented_run_files()
    assert files - documented == set(), "imported by the run but not named in architecture.md's steps"
    # what a default run does not use stays unimported; the steps may name it as such
    lazy = {
        "policy.gguf_convert",
        "policy.model_cache",
        "policy.adapters",
        "policy.vllm_sampler",
        "rewards.worker_pool",
        "rewards.gsm8k",  # the demo's rows are arithmetic: the other rules load at the first row they may judge
        "rewards.boxed_math",
        "analysis.measured_curve",  # std-GRPO's measured error: only for --advisor_estimator grpo_std
        "tables.formats",  # the demo's table is JSON lines: parquet, a JSON list, a dataset folder or hub id only
    }
    assert not {f"grpo_mse.{name}" for name in lazy} & set(modules)
    assert documented - files <= {f"grpo_mse.{name}" for name in lazy}, "named in the steps but not imported"
