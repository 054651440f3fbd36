"""Student's t at the far tails a Bonferroni limit needs (e.g. a 0.1% level over 18 tests: 0.003% each), without
scipy at run time (it is a test dependency only). At a few prompts the normal quantile is far too small: with 3
degrees of freedom |t| > 3.76 has probability 3%, not the 0.008% the normal quantile 3.76 stands for.

``two_sided_tail(t, df)`` = P(|T| > t) = I_x(df/2, 1/2) with x = df / (df + t^2), the regularized incomplete beta
function by its continued fraction (modified Lentz); ``two_sided_quantile(p, df)`` inverts it by bisection.
Checked against scipy.stats.t in tests/studies/test_student_t.py.
"""

from __future__ import annotations

import math

TINY = 1e-300  # keeps the continued fraction's denominators off zero


def _continued_fraction(a: float, b: float, x: float) -> float:
    """The continued fraction of I_x(a, b) (converges fast for x < (a + 1) / (a + b + 2))."""

    def guarded(value: float) -> float:
        return TINY if abs(value) < TINY else value

    c, d = 1.0, 1.0 / guarded(1.0 - (a + b) * x / (a + 1.0))
    result = d
    for m in range(1, 1000):
        even = m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m))
        d, c = 1.0 / guarded(1.0 + even * d), guarded(1.0 + even / c)
        result *= d * c
        odd = -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))
        d, c = 1.0 / guarded(1.0 + odd * d), guarded(1.0 + odd / c)
        step = d * c
        result *= step
        if abs(step - 1.0) < 1e-15:
            break
    return result


def incomplete_beta(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b), 0 <= x <= 1."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _continued_fraction(a, b, x) / a
    return 1.0 - math.exp(log_front) * _continued_fraction(b, a, 1.0 - x) / b


def two_sided_tail(t: float, df: int) -> float:
    """P(|T| > t) for Student's t with ``df`` degrees of freedom."""
    if math.isinf(t):
        return 0.0
    return incomplete_beta(df / 2.0, 0.5, df / (df + t * t))


def two_sided_quantile(p: float, df: int) -> float:
    """The t > 0 with P(|T| > t) = p (0 < p < 1), by bisection to a relative 1e-12."""
    low, high = 0.0, 1.0
    while two_sided_tail(high, df) > p:  # the tail falls as t grows: bracket the root
        low, high = high, high * 2.0
    while high - low > 1e-12 * high:
        middle = (low + high) / 2.0
        low, high = (middle, high) if two_sided_tail(middle, df) > p else (low, middle)
    return (low + high) / 2.0
