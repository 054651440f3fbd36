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
