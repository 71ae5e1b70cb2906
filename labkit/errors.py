"""One error type for bad input, so the API, the CLI and the widgets can all show it.

Every check names the field and what is allowed: a learner who types ``--zero 4``
should read ``zero_stage must be one of 0, 1, 2, 3 (got 4)``, not a traceback.
"""

from __future__ import annotations

import tomllib
from collections.abc import Iterable
from pathlib import Path
from typing import Any


class LabkitError(ValueError):
    """Bad input to labkit: the message names the field and the allowed values."""


def require_choice(field: str, value: Any, allowed: Iterable[Any]) -> Any:
    """Return ``value`` if it is one of ``allowed``, else raise naming the field."""
    options = list(allowed)
    if value not in options:
        shown = ", ".join(str(o) for o in options)
        raise LabkitError(f"{field} must be one of {shown} (got {value!r})")
    return value


def require_positive(field: str, value: Any, *, integer: bool = True) -> Any:
    """Return ``value`` if it is a positive number (an int when ``integer``)."""
    kind = "integer" if integer else "number"
    ok_type = isinstance(value, int) if integer else isinstance(value, (int, float))
    if isinstance(value, bool) or not ok_type or not value > 0:
        raise LabkitError(f"{field} must be a positive {kind} (got {value!r})")
    return value


def require_divides(field: str, value: int, other_field: str, other: int) -> None:
    """Raise unless ``value`` divides ``other`` (e.g. tp must divide heads)."""
    if other % value != 0:
        divisors = [d for d in range(1, other + 1) if other % d == 0]
        shown = ", ".join(str(d) for d in divisors)
        raise LabkitError(
            f"{field} must divide {other_field}={other}: allowed {shown} (got {value})"
        )


def read_toml(path: Path, what: str) -> dict[str, Any]:
    """A data file of ``datasets/`` parsed; an unreadable or malformed file names itself and ``what`` it is."""
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as err:
        raise LabkitError(f"{what} {str(path)!r} cannot be read: {err.strerror}") from None
    except tomllib.TOMLDecodeError as err:
        raise LabkitError(f"{what} {str(path)!r} is not valid TOML: {err}") from None
