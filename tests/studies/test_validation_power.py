"""studies.advisor.validation_power (scripts/power_analysis.py): the power formula against simulated experiments,
the normal approximation at large n, the relative errors, the calibration and the contrast on known inputs, and
its refusals."""

import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest
from conftest import ROOT
from scipy import stats

from studies.advisor import validation_power as power


@pytest.mark.parametrize("effect, sigma, alpha", [(0.012, 0.016, 0.025), (0.02, 0.014, 0.05)])
def test_power_formula_matches_simulated_experiments(effect, sigma, alpha):
    n = power.seeds_for_power(effect, sigma, alpha)
    assert power.contrast_power(effect, sigma, n, alpha) >= 0.8 > power.contrast_power(effect, sigma, n - 1, alpha)
    runs = 6000
    for size in (n, max(2, n // 3)):
        formula = power.contrast_power(effect, sigma, size, alpha)
        simulated = power.simulated_power(effect, sigma, size, alpha, runs, seed=size)
        assert abs(simulated - formula) < 4 * math.sqrt(formula * (1 - formula) / runs), (size, simulated, formula)


def test_no_effect_rejects_at_the_level_and_needs_no_finite_n():
    assert power.contrast_power(0.0, 0.016, 20, 0.05) == pytest.approx(0.05, abs=1e-9)
    assert power.seeds_for_power(0.0, 0.016, 0.05) is None


def test_large_n_agrees_with_the_normal_formula():
    effect, sigma, alpha = 0.001, 0.016, 0.025
    normal = 4 * sigma**2 * (stats.norm.ppf(1 - alpha / 2) + stats.norm.ppf(0.8)) ** 2 / effect**2
    assert power.seeds_for_power(effect, sigma, alpha) == pytest.approx(normal, rel=0.002)


def test_relative_errors_known_answer():
    # E(2) = 1*2 + 0 + 9/1 = 11, E(4) = 4 + 3 = 7, E(8) = 8 + 9/7
    expected = np.array([11.0, 7.0, 8 + 9 / 7]) / 7.0
    assert np.allclose(power.relative_errors(1.0, 0.0, 9.0, [2, 4, 8]), expected)


def test_calibration_recovers_a_planted_slope_and_sd():
    rng = np.random.default_rng(1)
    noise = rng.normal(size=8)
    noise = (noise - noise.mean()) / noise.std(ddof=1)  # exactly mean 0, sd 1 per cell
    sweeps = {}
    for shift, relative in ((0.1, np.array([1.5, 1.0, 1.2])), (0.3, np.array([1.0, 1.1, 1.8]))):
        cells = {k: shift - 0.02 * r + 0.01 * noise for k, r in zip((2, 4, 8), relative)}
        sweeps[shift] = (cells, relative)
    fitted = power.calibration(sweeps)
    assert fitted.beta == pytest.approx(-0.02, abs=1e-12)
    assert fitted.seed_sd == pytest.approx(0.01, abs=1e-12)
    assert fitted.seed_sd_dof == 6 * 7
    assert fitted.beta_ci95 == pytest.approx([-0.02, -0.02], abs=1e-9)  # an exact line: a zero-width interval
    means = {k: values + 0.001 * (k == 4) for k, values in sweeps[0.3][0].items()}  # one mean off the line
    sweeps[0.3] = (means, sweeps[0.3][1])
    x = np.array([1.5, 1.0, 1.2, 1.0, 1.1, 1.8])
    x = x - np.repeat([x[:3].mean(), x[3:].mean()], 3)
    y = -0.02 * x + np.array([0, 0, 0, -1, 2, -1]) / 3 * 0.001  # the centred means
    beta = x @ y / (x @ x)
    half = stats.t.ppf(0.975, 3) * np.sqrt(((y - beta * x) ** 2).sum() / 3 / (x @ x))
    assert power.calibration(sweeps).beta_ci95 == pytest.approx([beta - half, beta + half])


def test_best_contrast_and_separated_pairs_on_known_settings():
    flat = {"setting": "flat", "c": [1.0, 10.0, 1.0], "K_star_ci95": [1.5, 2.5]}  # K* = 2
    steep = {"setting": "steep", "c": [1.0, 10.0, 49.0], "K_star_ci95": [6.0, 10.0]}  # K* = 8
    best = power.best_contrast([flat, steep], [2, 4, 8])
    ra, rb = power.relative_errors(1, 10, 1, [2, 4, 8]), power.relative_errors(1, 10, 49, [2, 4, 8])
    values = {(i, j): (ra[i] - ra[j]) - (rb[i] - rb[j]) for i, j in ((0, 1), (0, 2), (1, 2))}
    top = max(values, key=lambda key: abs(values[key]))
    assert best.K == [[2, 4, 8][top[0]], [2, 4, 8][top[1]]]
    assert best.relative_contrast == pytest.approx(values[top])
    assert power.separated_pairs([flat, steep]) == [["flat", "steep"]]
    overlapping = {**steep, "K_star_ci95": [2.0, 10.0]}
    assert power.separated_pairs([flat, overlapping]) == []


def test_bad_input_is_one_line_and_writes_nothing(tmp_path):
    out = tmp_path / "power.json"

    def power_analysis(*args):
        script = os.path.join(ROOT, "scripts", "power_analysis.py")
        return subprocess.run([sys.executable, script, *args], cwd=ROOT, capture_output=True, text=True)

    stop = power_analysis("--k_map", str(tmp_path / "missing.json"), "--out", str(out))
    assert stop.returncode == 2 and not out.exists()
    k_map = tmp_path / "k_map.json"
    k_map.write_text(json.dumps({"settings": [{"setting": "a", "c1": 1.0, "c2": -1.0, "c3": 2.0}] * 2}))
    stop = power_analysis("--k_map", str(k_map), "--out", str(out))
    assert stop.returncode == 2 and not out.exists()
    assert "c1, c2, c3 must be positive" in stop.stderr
