"""No number from nothing: every consumer of saved advice (the advisor's printout, k_validation predict and
summarize with their figures, the --advisor figure, adaptive K, the Algorithm 1 summary) given constants that
identify no K (zero, negative, inf, nan, null, "inf" text, intervals reaching 0) runs without a traceback and
states no K*; identified constants (the control) still give one."""

import json
import math
import os
import re
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from grpo_mse.analysis import advisor, error_model
from grpo_mse.analysis.bootstrap import read_calibration
from grpo_mse.tables.outputs import to_json
from grpo_mse.training import adaptive_k
from studies.advisor import k_validation as kv
from studies.advisor import k_validation_figures as kv_figures
from studies.advisor import sweep_stats
from studies.advisor.simulated_records import simulated_batch, simulated_prompt
from studies.advisor.training_runs import run_means
from studies.simulation import summary as simulation

ALLOWED, BUDGET = [2, 4, 8, 16], 128
SPECIAL = [0.0, -0.0, -1.5, math.inf, -math.inf, math.nan, None, "inf", "-inf", "nan", "abc"]
METRIC = "val-core/arithmetic_zero_shot/acc/mean@1"

anything = st.one_of(st.sampled_from(SPECIAL), st.floats(1e-6, 1e6))
bad = st.sampled_from(SPECIAL)  # never a finite positive number
interval = st.one_of(st.none(), st.lists(anything, min_size=2, max_size=2), st.just("x"))


@st.composite
def unidentified(draw):
    """Saved advice (as JSON would hold it) whose c1 or c3 is not a finite positive number, or whose c1 or c3
    interval reaches 0 or is unusable."""
    names = ("c1", "c2", "c3")
    values = {n: draw(anything) for n in names}
    which = draw(st.sampled_from(["c1", "c3", "ci_c1", "ci_c3"]))
    ci = {n: draw(interval) for n in names}
    if which in ("c1", "c3"):
        values[which] = draw(bad)
    else:  # positive constants, but an interval whose lower end is 0, negative, null, text or missing
        values["c1"], values["c3"] = draw(st.floats(1e-3, 1e3)), draw(st.floats(1e-3, 1e3))
        ci[which[3:]] = draw(st.one_of(st.none(), st.lists(bad, min_size=2, max_size=2)))
    k_star = draw(st.sampled_from([None, "inf", 4.2, math.nan, 1.0]))
    return saved(values, ci, k_star, best=draw(st.sampled_from([None, 16.0, 2.0, "inf"])))


def saved(values: dict, ci: dict, k_star, best) -> dict:
    return {
        "pooled": {**values, "K_star_exact": k_star, "K_star_paper": k_star, "K_best": best},
        "ci95": {**ci, "K_star_exact": [1.5, "inf"], "K_best": [2.0, 16.0]},
        "allowed_K": ALLOWED,
        "budget": BUDGET,
        "degenerate_replicates": {"n_boot": 100, "c1<=0": 3, "c3<=0": 0},
        "recommendation": {"identified": False, "K_best": None, "message": "saved message"},
        "simulated_coverage": {"status": "unknown", "reason": "test", "T": 48, "largest_prompt_share": 0.3},
    }


IDENTIFIED = saved({"c1": 15.0, "c2": 160.0, "c3": 380.0}, {"c1": [5, 30], "c3": [160, 800]}, 6.03, 8.0)


def frame(ks=(2, 4, 8, 16), seeds=3) -> pd.DataFrame:
    rows = []
    for k in ks:
        for seed in range(seeds):
            for step in (0, 3):
                rows.append(
                    {"K": k, "seed": seed, "step": step, "metric": METRIC, "value": 0.1 + 0.01 * k + 0.003 * seed}
                )
    return pd.DataFrame(rows)


def test_identified_constants_still_give_a_k():
    """The control: c1, c3 > 0 with intervals off 0 name K* = 1 + sqrt(c3/c1) and the best allowed K."""
    now = error_model.advice_status(IDENTIFIED)
    assert now.identified and now.K_star_exact == pytest.approx(1 + math.sqrt(380 / 15)) and now.K_best == 8
    assert "best K in [2, 4, 8, 16] = 8" in advisor.describe(IDENTIFIED)
    pred = kv.predict({"group_size_advisor": IDENTIFIED}, "s", written_at="t")
    assert pred.best_allowed_K == 8 and pred.K_star_exact == pytest.approx(now.K_star_exact)
    assert adaptive_k.chosen_k(IDENTIFIED, current=2) == 8


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(unidentified())
def test_no_consumer_states_a_k_from_unidentified_constants(advice):
    now = error_model.advice_status(advice)
    assert not now.identified and now.K_star_exact is None and now.K_best is None
    text = advisor.describe(advice)
    assert "not identified" in text and "best K in [2, 4, 8, 16] =" not in text and "K* = 1+sqrt(c3/c1) =" not in text
    pred = kv.predict({"group_size_advisor": advice}, "s", written_at="t")
    assert pred.K_star_exact is None and pred.best_allowed_K is None and pred.ci95 is None
    assert not pred.identified and "not identified" in kv.describe_prediction(pred)
    json.loads(to_json(pred.to_json()))  # strict JSON
    summary = kv.setting_summary("a", run_means(frame(), METRIC), pred, "t", METRIC)
    assert summary.advisor.K_star_exact is None and summary.advisor.best_allowed_K is None
    other = kv.setting_summary(
        "b", run_means(frame(), METRIC), kv.predict({"group_size_advisor": IDENTIFIED}, "b", "t"), "t", METRIC
    )
    draws = np.full(50, 8)
    for pair in ((summary, other), (other, summary)):
        assert kv.compare(*pair, draws, draws).advisor_direction == 0  # no direction from an unidentified K*
    assert adaptive_k.chosen_k(advice, current=4) == 4 or all(
        isinstance(advice["pooled"][n], float) and 0 < advice["pooled"][n] < math.inf for n in ("c1", "c3")
    )  # positive constants whose interval reaches 0: the point-estimate argmin, as documented
    assert "adaptive_k/K_star_exact" not in adaptive_k.advice_metrics(advice, 4)
    constants = {c: getattr(pred, c) for c in ("c1", "c2", "c3")}
    assert math.isnan(sweep_stats.predicted_error(constants, 4)) or all(
        isinstance(constants[c], (int, float)) and math.isfinite(constants[c]) for c in ("c1", "c2", "c3")
    )


@settings(
    max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(advice=unidentified())
def test_figures_draw_unidentified_constants_without_a_k(advice, tmp_path):
    """k_validation's per-setting and all-settings figures, the --advisor figure (constants it can draw), and the
    Algorithm 1 summary's advisor entry."""
    pred = kv.predict({"group_size_advisor": advice}, "s", written_at="t")
    summary = kv.setting_summary("s", run_means(frame(), METRIC), pred, "t", METRIC)
    kv_figures.plot_setting(summary.to_json(), str(tmp_path / "one.png"), run_means(frame(), METRIC))
    kv_figures.plot_settings([summary.to_json(), summary.to_json()], str(tmp_path / "all.png"))
    result = {"group_size_advisor": advice}
    from grpo_mse.figures.comparisons import plot_advisor

    drawable = all(isinstance(advice["pooled"][c], (int, float)) for c in ("c1", "c2", "c3"))
    if drawable:  # make_figures refuses non-numbers with one line (test_cli_errors); numbers are drawn
        assert plot_advisor(result, str(tmp_path / "advisor"))
    path = tmp_path / "run.json"
    path.write_text(json.dumps(result))
    read = simulation.read_advisor(str(path))
    assert read.K_star is None and read.K_best is None and read.K_star_ci95 is None
    assert simulation.agreement(4, [4], read.K_star, ALLOWED)[0] == "no K*"


def run_script(args):
    """scripts/k_validation.py with ``args`` (exit 0 asserted)."""
    script = os.path.join(os.path.dirname(__file__), "..", "..", "scripts", "k_validation.py")
    done = subprocess.run([sys.executable, script, *args], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done


@pytest.mark.parametrize("c1", [0.0, -2.0, math.inf, math.nan, None, "inf"])
def test_predict_and_summarize_cli_state_no_k(tmp_path, c1):
    """The two CLI stages end to end: exit 0, "K* not identified" printed, null K in the files."""
    advice = saved({"c1": c1, "c2": 160.0, "c3": 380.0}, {"c1": [-1, 3], "c3": [160, 800]}, "inf", 16.0)
    run = tmp_path / "run.json"
    run.write_text(json.dumps({"group_size_advisor": advice}))
    out = tmp_path / "prediction.json"
    done = run_script(["predict", str(run), "--name", "s", "--out", str(out)])
    assert "K* not identified" in done.stdout
    pred = json.loads(out.read_text())
    assert pred["K_star_exact"] is None and pred["best_allowed_K"] is None
    csv = tmp_path / "runs.csv"
    frame().to_csv(csv, index=False)
    done = run_script(["summarize", "--setting", "s", str(csv), str(out), "t", "--out_dir", str(tmp_path / "sum")])
    assert "advisor K* not identified" in done.stdout
    summary = json.loads((tmp_path / "sum" / "summary.json").read_text())
    assert summary["settings"][0]["advisor"]["best_allowed_K"] is None


def test_n_oracle_is_a_whole_number_or_null_where_it_is_read():
    """The oracle-noise correction V (1 - V) / (n_oracle - 1) reads n_oracle: 256 and 256.0 give it, null (an exact
    V; NaN is pandas' null) gives 0, and '256', 256.5, 0, True are refused in one line (not a silent 0)."""
    from grpo_mse.analysis.paired import oracle_value_variance
    from grpo_mse.errors import DataError
    from grpo_mse.tables.inputs import check_oracle_counts

    for n in (256, 256.0, np.int64(256)):
        assert oracle_value_variance(0.25, n) == pytest.approx(0.25 * 0.75 / 255)
    assert oracle_value_variance(0.25, None) == 0.0 == oracle_value_variance(0.25, math.nan)
    check_oracle_counts([{"n_oracle": 256}, {"n_oracle": 4.0}, {"n_oracle": None}, {}, {"n_oracle": math.nan}], "t")
    for bad in ("256", 256.5, 0, -3, True, math.inf, [256]):
        with pytest.raises(DataError, match="n_oracle"):
            oracle_value_variance(0.25, bad)
        with pytest.raises(DataError, match=re.escape(f"t: row 1 has n_oracle {bad!r};")):
            check_oracle_counts([{"n_oracle": 8}, {"n_oracle": bad}], "t")


def test_advise_checks_allowed_k_against_the_budget():
    """advise() itself refuses allowed K that do not fit the budget (3 does not divide 128, 256 exceeds it), in
    one line, instead of answering "best K = 3"."""
    from grpo_mse.errors import InputError

    records = {2: [simulated_prompt(2, i, {"grpo": 2.0 + i, "oracleV": 1.0 + i}) for i in range(4)]}
    with pytest.raises(InputError, match=re.escape("allowed K [3, 256] do not fit the budget 128")):
        advisor.advise(records, {}, n_boot=50, budget=128, allowed=[3, 256], calibration=read_calibration())
    with pytest.raises(InputError, match="budget must be a whole number"):
        advisor.advise(records, {}, n_boot=50, budget=100.5, calibration=read_calibration())
    assert advisor.advise(
        records, {}, n_boot=50, budget=128, allowed=[2, 4.0], calibration=read_calibration()
    ).allowed_K == [2, 4]


def test_a_higher_level_widens_the_studentized_intervals():
    """advise(level=0.99) (coverage studies): the pooled constants' and K*'s intervals contain the 95% ones from the
    same replicates and the point estimates are unchanged; the level is recorded."""
    rng = np.random.default_rng(3)
    records = {
        k: [
            simulated_prompt(k, i, {"oracleV": o, "grpo": o + g / (k * (k - 1))})
            for i, (o, g) in enumerate(zip(rng.uniform(1, 3, 32), rng.uniform(2, 9, 32)))
        ]
        for k in (2, 4)
    }
    means = rng.normal(size=(32, 3)) + 1.0
    batches = {
        k: [
            simulated_batch(k, idx, (means[idx] @ means[idx].T).tolist(), [0.05] * 8)
            for idx in (list(range(s, s + 8)) for s in range(0, 32, 8))
        ]
        for k in (2, 4)
    }
    wide = advisor.advise(records, batches, n_boot=400, budget=64, level=0.99, calibration=read_calibration()).to_json()
    usual = advisor.advise(records, batches, n_boot=400, budget=64, calibration=read_calibration()).to_json()
    assert wide["interval_level"] == 0.99 and "interval_level" not in usual
    for name in ("c1", "c2", "c3", "K_star_exact"):
        (lo99, hi99), (lo95, hi95) = (error_model.interval_of(a["ci95"][name]) for a in (wide, usual))
        assert lo99 < lo95 and hi95 < hi99 and wide["pooled"][name] == usual["pooled"][name], name
