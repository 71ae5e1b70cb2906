"""``python -m labkit.course``: the course tools from the command line."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from labkit.course.copies import LABS, STUDENT_DIR, make_student_copies
from labkit.errors import LabkitError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m labkit.course")
    sub = parser.add_subparsers(dest="command", required=True)
    cp = sub.add_parser("copies", help="make the student copies (outputs cleared), never overwriting one")
    cp.add_argument("--src", default=str(LABS))
    cp.add_argument("--dst", default=str(STUDENT_DIR))
    a = parser.parse_args(argv)
    try:
        made = make_student_copies(Path(a.src), Path(a.dst))
    except LabkitError as err:
        print(f"labkit: error: {err}", file=sys.stderr)
        return 2
    print(f"student copies in {a.dst}: {len(made.created)} new, {len(made.kept)} kept as they were")
    return 0


if __name__ == "__main__":
    sys.exit(main())
