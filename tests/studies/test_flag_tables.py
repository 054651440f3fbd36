"""studies/flag_tables.py: the flag tables of docs/ are generated from the code; --check and --update."""

from __future__ import annotations

from pathlib import Path

from studies import flag_tables

ROOT = Path(__file__).resolve().parents[2]
DOCS = [
    "docs/gradient_evaluation.md",
    "docs/training.md",
    "docs/theory.md",
    "docs/engines.md",
    "docs/commands.md",
    "docs/real_data.md",
]
# every generated table each doc must hold (the check below also catches a table that is stale)
TABLES = {
    "docs/training.md": [
        "grpo_mse.training.data:PrepareDataConfig",
        "grpo_mse.training.sweep:SweepConfig",
        "grpo_mse.training.logs:CollectConfig",
        "grpo_mse.training.trl_train:TrlTrainConfig",
    ],
    "docs/real_data.md": ["scripts/real_data.py:RealDataConfig", "studies.audits.gold_audit:GoldConfig"],
    "docs/engines.md": [
        "studies.benchmarks.bench_cli:BenchCliConfig",
        "scripts/bench_oracle_trees.py:BenchOracleTreesConfig",
        "scripts/tracecov_parts.py:TracecovPartsConfig",
        "scripts/bench_floor.py:BenchFloorConfig",
        "studies.benchmarks.bench_dtype:BenchDtypeConfig",
    ],
    "docs/commands.md": [
        *(f"scripts/k_validation.py:{name}Config" for name in ("Subset", "Predict", "Pilot", "Summarize")),
        "scripts/k_validation.py:AdaptiveConfig",
        "grpo_mse.figures.training:TrainingFiguresConfig",
        "studies.train_demo_summary:DemoSummaryConfig",
        "grpo_mse.training.budget:BudgetConfig",
        "grpo_mse.training.verl_launch:VerlDryRunConfig",
        "studies.advisor.advisor_check:AdvisorCheckConfig",
        "scripts/coverage_heavy_tails.py:CoverageConfig",
        "scripts/power_analysis.py:PowerConfig",
        "studies.audits.compare_oracle_tables:CompareOracleConfig",
        "scripts/compare_tracecov_runs.py:CompareRunsConfig",
        *(f"scripts/gpu_check_steps.py:{name}Config" for name in ("Versions", "Installed", "Advisor")),
        "scripts/c1_plan.py:C1PlanConfig",
        "studies.benchmarks.bench_engines_flags:BenchEnginesConfig",
        "studies.benchmarks.bench_sampling:BenchSamplingConfig",
        "scripts/build_tiny_policy.py:TinyPolicyConfig",
        "studies.flag_tables:TablesConfig",
    ],
}


def test_docs_flag_tables_are_generated_from_the_code(monkeypatch):
    monkeypatch.chdir(ROOT)
    for doc in DOCS:
        text = (ROOT / doc).read_text(encoding="utf-8")
        assert flag_tables.BLOCK.search(text), f"{doc} has no generated flag table"
        assert flag_tables.refresh(text) == text, f"{doc}: run python scripts/flag_tables.py --update {doc}"
    for doc, classes in TABLES.items():
        text = (ROOT / doc).read_text(encoding="utf-8")
        for name in classes:
            assert f"<!-- flags: {name} -->" in text, f"{doc} lacks the flag table of {name}"
    tracecov = (ROOT / "docs/gradient_evaluation.md").read_text(encoding="utf-8")
    for flag in ("--score_distribution", "--budget", "--allowed_K", "--estimators", "--resume"):
        assert f"| `{flag}` |" in tracecov
    assert "`paired`" in tracecov


def test_check_fails_on_a_stale_table_and_update_repairs_it(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    doc = tmp_path / "doc.md"
    fresh = "# t\n\n<!-- flags: grpo_mse.config.gradient_evaluation:OracleConfig -->\n<!-- end flags -->\n\ntext\n"
    doc.write_text(fresh)
    assert flag_tables.main(["--check", str(doc)]) == 1
    assert flag_tables.main(["--update", str(doc)]) == 0
    updated = doc.read_text()
    assert "| `--n_oracle` | `1000` | samples per prompt; >= 1 |" in updated and updated.endswith("\n\ntext\n")
    assert flag_tables.main(["--check", str(doc)]) == 0
    doc.write_text(updated.replace("`1000`", "`100`"))  # a table edited by hand
    assert flag_tables.main(["--check", str(doc)]) == 1


def test_check_runs_from_outside_the_repository(tmp_path, monkeypatch):
    """The docs' blocks name scripts by their repository paths (scripts/...py:Class): found from any directory."""
    monkeypatch.chdir(tmp_path)
    assert flag_tables.main(["--check", str(ROOT / "docs/commands.md")]) == 0
