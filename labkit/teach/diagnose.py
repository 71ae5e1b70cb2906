"""Name the slip behind a wrong number: a unit off by a prefix, time in the wrong unit, percent for fraction.

A learner who types 16e9 where the answer is 16 (GB) understood the physics and slipped
on the unit; telling them "too high" teaches nothing. :func:`diagnose` compares the ratio
of the answer to the right value with the ratios the usual slips produce and names the
first that matches within 1%. The slips offered depend on the unit the question asks in
(``unit``): byte prefixes only for sizes, seconds/minutes/hours/days only for times, grams
for masses, so a grams question is never told "MB given where GB were asked". Each text
names what was given and what was asked, so it points the right way in both directions.
Written by hand: no library does this.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

GIB_PER_GB = 2**30 / 1e9


@dataclass(frozen=True)
class Slip:
    """A ratio of the learner's answer to the right one, and what most likely produced it."""

    factor: float
    text: str


# Units of one kind: name -> size in the kind's base unit (bytes, seconds, grams, joules).
_BYTES = {"B": 1.0, "KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12, "PB": 1e15,
          "KiB": 2.0**10, "MiB": 2.0**20, "GiB": 2.0**30, "TiB": 2.0**40}
_TIME = {"ms": 1e-3, "s": 1.0, "min": 60.0, "h": 3600.0, "days": 86400.0}
_MASS = {"g": 1.0, "kg": 1e3, "t": 1e6}
_ENERGY = {"J": 1.0, "Wh": 3600.0, "kWh": 3.6e6, "MWh": 3.6e9}
_KINDS = (_BYTES, _TIME, _MASS, _ENERGY)
_WORDS = {"ms": "milliseconds", "s": "seconds", "min": "minutes", "h": "hours", "days": "days", "B": "bytes",
          "g": "grams", "kg": "kg", "t": "tonnes"}
_NEAR = {"B": ("KB", "MB", "GB", "TB", "KiB", "MiB", "GiB"), "GB": ("B", "MB", "TB", "GiB", "MiB"),
         "MB": ("B", "KB", "GB", "MiB"), "TB": ("B", "GB", "PB", "TiB"), "KB": ("B", "MB", "KiB"),
         "PB": ("TB", "GB"), "GiB": ("B", "MiB", "TiB", "GB"), "MiB": ("B", "KiB", "GiB", "MB"),
         "TiB": ("B", "GiB", "TB"), "KiB": ("B", "MiB", "KB")}
_TWIN = {"KB": "KiB", "MB": "MiB", "GB": "GiB", "TB": "TiB", "KiB": "KB", "MiB": "MB", "GiB": "GB", "TiB": "TB"}
# A question may ask in a unit a kind does not name directly: a rate, a share, a per-bit energy.
FRACTION, PERCENT = "fraction", "%"
_RATES = {"/day": "days", "/h": "h", "/min": "min", "/s": "s"}
_PER_BIT = ("pJ/bit", "J/bit")
_SIGN = Slip(-1.0, "the right size with the wrong sign")


def _word(unit: str) -> str:
    return _WORDS.get(unit, unit)


def _kind(unit: str) -> dict[str, float] | None:
    return next((k for k in _KINDS if unit in k), None)


def slips(unit: str = "") -> tuple[Slip, ...]:
    """The slips worth naming for a question asked in ``unit`` ("" when it is not known: sizes assumed)."""
    if unit in (FRACTION, PERCENT):
        other, factor = (PERCENT, 100.0) if unit == FRACTION else (FRACTION, 0.01)
        given = "a percentage" if other == PERCENT else "a fraction (0..1)"
        asked = "a fraction (0..1)" if unit == FRACTION else "a percentage"
        return Slip(factor, f"{given} given where {asked} was asked?"), _SIGN
    if unit in _RATES:
        per = _RATES[unit]
        return (*(Slip(_TIME[v] / _TIME[per], f"per {_word(v)[:-1] if v != 's' else 'second'} given where per "
                                                f"{_word(per)[:-1]} was asked?")
                  for v in _TIME if v != per and v != "ms"), _SIGN)
    if unit in _PER_BIT:
        return (Slip(8.0, "a per-byte figure given where per bit was asked (a byte is 8 bits)?"),
                Slip(1 / 8, "a per-bit figure divided by 8 again: per bit was asked?"), _SIGN)
    if not unit:
        return _GENERIC
    kind = _kind(unit)
    if kind is None:
        return (_SIGN,)
    near = _NEAR.get(unit, tuple(kind)) if kind is _BYTES else tuple(kind)
    found = [Slip(kind[unit] / kind[v], f"{_word(v)} given where {_word(unit)} were asked?") for v in near if v != unit]
    if kind is _BYTES:
        twin = _TWIN.get(unit)
        if twin:  # the decimal/binary factor applied the wrong way round gives the opposite ratio
            found.append(Slip(kind[twin] / kind[unit], f"about {100 * abs(kind[twin] / kind[unit] - 1):.0f}% off: "
                              f"the {twin}/{unit} factor applied the wrong way round?"))
        found += [Slip(8.0, "bits counted where bytes were asked?"),
                  Slip(1 / 8, "divided by 8 once too often: bytes were asked, not bits?")]
    return (*found, _SIGN)


# When the question's unit is not known, the texts name the slip without claiming which side is which.
_GENERIC: tuple[Slip, ...] = (
    Slip(1e9, "a factor of 1e9 too large: a unit nine orders of magnitude too small (bytes for GB)?"),
    Slip(1e-9, "a factor of 1e9 too small: a unit nine orders of magnitude too large (GB for bytes)?"),
    Slip(1e12, "a factor of 1e12 too large: a unit twelve orders of magnitude too small (bytes for TB)?"),
    Slip(1e-12, "a factor of 1e12 too small: a unit twelve orders of magnitude too large (TB for bytes)?"),
    Slip(1e6, "a factor of 1e6 too large: a unit prefix two steps too small (MB for TB, bytes for MB)?"),
    Slip(1e-6, "a factor of 1e6 too small: a unit prefix two steps too large (TB for MB, MB for bytes)?"),
    Slip(1e3, "a factor of 1,000 too large: a unit prefix one step too small (MB for GB, GB for TB)?"),
    Slip(1e-3, "a factor of 1,000 too small: a unit prefix one step too large (GB for MB, TB for GB)?"),
    Slip(100.0, "100 times too large: a percentage given where a fraction (0..1) was asked?"),
    Slip(0.01, "100 times too small: a fraction given where a percentage was asked?"),
    Slip(8.0, "8 times too large: bits counted where bytes were asked?"),
    Slip(1 / 8, "8 times too small: divided by 8 once too often (bytes were asked, not bits)?"),
    Slip(GIB_PER_GB, "about 7% off: GB (1e9 bytes) and GiB (2**30 bytes) mixed up?"),
    Slip(1 / GIB_PER_GB, "about 7% off: GB (1e9 bytes) and GiB (2**30 bytes) mixed up?"),
    _SIGN,
)


def diagnose(value: float, right: float, rel: float = 0.01, unit: str = "") -> str:
    """The unit or scale slip that turns ``right`` into ``value`` for a question asked in ``unit``, or ""."""
    if right == 0 or not math.isfinite(value):
        return ""
    ratio = value / right
    for slip in slips(unit):
        if abs(ratio - slip.factor) <= rel * abs(slip.factor):
            return slip.text
    return ""


def named_mistake(value: float, right: float, mistakes: dict[str, float], rel: float = 0.0) -> str:
    """The name of the listed mistake that ``value`` matches (within ``rel``, at least 0.1%), or "".

    A question's own likely mistakes ("GPipe's peak where 1F1B's was asked") come before the unit
    slips: they say what the learner thought, not only what unit they wrote.
    """
    for name, wrong in mistakes.items():
        if wrong != right and abs(value - wrong) <= max(rel, 1e-3) * abs(wrong) + 1e-12:
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
