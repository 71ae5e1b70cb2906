"""Name the slip behind a wrong number: units, scale, percent for fraction, bits for bytes.

A learner who types 16e9 where the answer is 16 (GB) understood the physics and slipped
on the unit; telling them "too high" teaches nothing. :func:`diagnose` compares the ratio
of the answer to the right value with the ratios the usual slips produce and names the
first that matches within 1%. Written by hand: no library does this.
"""

from __future__ import annotations

import math

GIB_PER_GB = 2**30 / 1e9
_SLIPS: tuple[tuple[float, str], ...] = (
    (1e9, "a factor of 1e9 too large: bytes given where GB (1e9 bytes) were asked?"),
    (1e-9, "a factor of 1e9 too small: GB given where bytes were asked?"),
    (1e6, "a factor of 1e6 too large: bytes where MB were asked, or MB where TB were asked?"),
    (1e-6, "a factor of 1e6 too small: MB where bytes were asked?"),
    (1e3, "a factor of 1,000 too large: a unit prefix off by one step (MB vs GB, GB vs TB)?"),
    (1e-3, "a factor of 1,000 too small: a unit prefix off by one step (GB vs MB, TB vs GB)?"),
    (1e12, "a factor of 1e12 too large: bytes where TB were asked?"),
    (100.0, "100 times too large: a percentage given where a fraction (0..1) was asked?"),
    (0.01, "100 times too small: a fraction given where a percentage was asked?"),
    (8.0, "8 times too large: bits counted where bytes were asked?"),
    (1 / 8, "8 times too small: bytes counted where bits were asked?"),
    (1 / GIB_PER_GB, "about 7% too small: GiB (2**30 bytes) given where GB (1e9 bytes) were asked?"),
    (GIB_PER_GB, "about 7% too large: GB given where GiB (2**30 bytes) were asked?"),
    (-1.0, "the right size with the wrong sign"),
)


def diagnose(value: float, right: float, rel: float = 0.01) -> str:
    """The unit or scale slip that turns ``right`` into ``value``, or "" when none matches."""
    if right == 0 or not math.isfinite(value):
        return ""
    ratio = value / right
    for factor, name in _SLIPS:
        if abs(ratio - factor) <= rel * abs(factor):
            return name
    return ""


def same_text(a: float, b: float, digits: int = 4) -> tuple[str, str]:
    """``a`` and ``b`` formatted with as many significant digits as it takes to tell them apart.

    A wrong answer must never print like the right one (16.0004 vs 16.0 both read "16"
    at 3 digits), so digits are added until the two texts differ or reach 10.
    """
    if a == b:
        return (_fmt(a, digits),) * 2
    for d in range(digits, 11):
        ta, tb = _fmt(a, d), _fmt(b, d)
        if ta != tb:
            return ta, tb
    return repr(a), repr(b)


def _fmt(x: float, digits: int) -> str:
    if x != 0 and (abs(x) >= 1e7 or abs(x) < 1e-3):
        return f"{x:.{digits - 1}e}"
    if float(x).is_integer():
        return f"{x:,.0f}"
    text = f"{x:,.{digits}g}" if abs(x) < 1e4 else f"{x:,.0f}"
    return text
