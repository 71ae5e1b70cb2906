"""Parsing and printing shared by the ``labkit`` subcommands: integers that name their flag, plain tables."""

from __future__ import annotations

import math
from typing import Any

from labkit.errors import LabkitError, require_choice, require_limit, require_positive
from labkit.predict.estimate import ZERO_STAGES


def parse_int(field: str, text: str, *, positive: bool = True) -> int:
    """An integer from the command line ("8", "7.5e9") within the field's stated limit (``labkit.errors.LIMITS``)."""
    try:
        value = int(text)
    except ValueError:
        try:
            number = float(text)
        except ValueError:
            number = math.nan
        if not (math.isfinite(number) and number.is_integer()):
            raise LabkitError(f"{field} must be a positive integer (got {text!r})") from None
        value = int(number)
    return require_limit(field, require_positive(field, value) if positive else value)


def parse_zero(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        return require_choice("zero_stage", text, ZERO_STAGES)


def count_text(n: float) -> str:
    for size, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if n >= size:
            return f"{n / size:.1f} {suffix}"
    return f"{n:.0f}"


def _is_number(cell: str) -> bool:
    try:
        float(cell.replace(",", ""))
    except ValueError:
        return cell == "-"
    return True


def table(headers: list[str], rows: list[list[Any]]) -> str:
    """Columns padded to their widest cell: text left, numbers right."""
    body = [["-" if c is None else str(c) for c in r] for r in rows]
    cells = [headers, *body]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    right = [all(_is_number(r[i]) for r in body) for i in range(len(headers))]

    def line(r: list[str]) -> str:
        return "  ".join(
            c.rjust(w) if n else c.ljust(w) for c, w, n in zip(r, widths, right, strict=True)
        ).rstrip()

    return "\n".join([line(headers), line(["-" * w for w in widths]), *map(line, body)])


