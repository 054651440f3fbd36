"""studies.audits.student_t: Student's t tail and quantile (the limits of compare_tracecov_runs.py's tests at a
few prompts) against scipy.stats.t, from 1 degree of freedom to many and out to the Bonferroni tails."""

import math

import pytest
from scipy import stats

from studies.audits.student_t import incomplete_beta, two_sided_quantile, two_sided_tail


@pytest.mark.parametrize("df", [1, 2, 3, 4, 7, 12, 31, 100, 1000, 100000])
@pytest.mark.parametrize("p", [0.5, 0.05, 1e-3, 2.8e-5, 1e-8])
def test_quantile_and_tail_match_scipy(df, p):
    reference = stats.t.isf(p / 2, df)
    assert two_sided_quantile(p, df) == pytest.approx(reference, rel=1e-9)
    assert two_sided_tail(reference, df) == pytest.approx(p, rel=1e-8)


def test_edges():
    assert two_sided_tail(0.0, 5) == 1.0 and two_sided_tail(math.inf, 5) == 0.0
    assert incomplete_beta(2.0, 0.5, 0.0) == 0.0 and incomplete_beta(2.0, 0.5, 1.0) == 1.0
    assert two_sided_quantile(1e-4, 3) > 20 > 3.9 > two_sided_quantile(1e-4, 10**6)  # few prompts: far wider
