"""Hypothesis strategies of gold answers as tables hold them (issue 36, case 7), each with its verdict written down
here, independently of the reward code: whole numbers as the answer side reads numbers (an optional minus, digits,
commas between groups of exactly three, a decimal part of zeros), numbers that are not whole, and malformed texts
the answer side would read as another number or as several."""

from __future__ import annotations

from hypothesis import strategies as st

WHOLE, NOT_WHOLE, MALFORMED = "whole", "not whole", "malformed"
MINUS_SIGNS = ["-", "\u2212", "\u2013"]  # ASCII, Unicode minus, en dash


@st.composite
def well_formed(draw, whole: bool):
    """(text, value or None): a number written as answers are read; ``whole``: its decimals are zeros."""
    magnitude = draw(st.integers(0, 10**15))
    digits = f"{magnitude:,}" if magnitude >= 1000 and draw(st.booleans()) else str(magnitude)
    negative = draw(st.booleans())
    sign = draw(st.sampled_from(MINUS_SIGNS)) if negative else ""
    if whole:
        decimals = draw(st.sampled_from(["", ".0", ".00"]))
    else:
        decimals = "." + draw(st.sampled_from(["5", "25", "01", "999"]))
    pad = draw(st.sampled_from(["", " ", "\n", "\t "]))
    text = f"{pad}{sign}{digits}{decimals}{pad}"
    return text, ((-magnitude if negative else magnitude) if whole else None)


def _regroup(magnitude: int) -> str:
    """Commas not between groups of three: "1,2345" (read as 1 and 2345 in an answer)."""
    digits = str(magnitude)
    return f"{digits[:1]},{digits[1:]}" if len(digits) % 3 != 1 else f"{digits[:2]},{digits[2:]}"


MALFORMED_TEXTS = st.one_of(
    st.integers(10, 10**9).map(_regroup),
    st.integers(1, 99).map(lambda n: f"{n},{n}"),  # a group of fewer than three digits after the comma
    st.integers(0, 999).map(lambda n: f"{n}e{n % 9}"),  # an exponent: the answer side reads two numbers
    st.integers(1000, 10**6).map(lambda n: f"{n:_}"),  # Python's underscores
    st.integers(0, 999).map(lambda n: f"+{n}"),
    st.integers(0, 999).map(lambda n: f"0x{n:x}"),
    st.integers(0, 999).map(lambda n: f"{n}."),
    st.integers(1, 999).map(lambda n: f".{n}"),
    st.integers(1000, 10**6).map(lambda n: f"{str(n)[:1]} {str(n)[1:]}"),
    st.integers(0, 999).map(lambda n: f"--{n}"),
    st.sampled_from(["", " ", "inf", "-inf", "nan", "1,234,", ",123", "1,,234", "٣e2", "1/2", "½"]),
)


def golds():
    """(gold text, verdict, value): a whole number (value), a number that is not whole, or a malformed text."""
    return st.one_of(
        well_formed(whole=True).map(lambda case: (case[0], WHOLE, case[1])),
        well_formed(whole=False).map(lambda case: (case[0], NOT_WHOLE, None)),
        MALFORMED_TEXTS.map(lambda text: (text, MALFORMED, None)),
    )
