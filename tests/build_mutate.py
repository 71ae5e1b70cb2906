"""Wrong build-it modules as named mutations of the reference: one small edit each, applied in the test.

A mutation is ``(old, new)``: ``old`` must occur exactly once in the reference module (so an edit of the
reference that moves the line fails loudly here, not by silently testing the reference itself), and the
mutant is the reference with that text replaced. Several edits may be given for one bug. This replaces
the whole wrong modules that ``tests/build_wrong/`` used to copy.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = ROOT / "instructor" / "build"


def mutant(folder: Path, stub: str, *edits: tuple[str, str]) -> Path:
    """Write ``instructor/build/<stub>`` with each ``(old, new)`` applied to ``folder/<stub>``; its path."""
    source = (REFERENCE / stub).read_text()
    for old, new in edits:
        count = source.count(old)
        if count != 1:
            raise AssertionError(f"mutation target must occur once in {stub}, found {count}: {old!r}")
        source = source.replace(old, new)
    path = Path(folder) / stub
    path.write_text(source)
    return path
