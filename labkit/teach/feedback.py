"""What a learner reads after an answer: the one feedback type every check, reveal and exercise returns.

Also what a learner reads after bad input: inside IPython, a ``LabkitError`` raised by a cell is
shown as its one line (``labkit: error: ...``), never as a traceback (:func:`one_line_errors`).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

from labkit.errors import LabkitError


@dataclass(frozen=True)
class Feedback:
    """What a learner reads after answering: truthy when right, shown as its message.

    Returned (not printed), so a notebook cell that ends with ``check(...)`` shows
    the message as the cell's result, and a test can assert on ``bool(feedback)``.
    ``diagnosis`` names the mistake recognised in a wrong answer ("" when none).
    """

    ok: bool
    message: str
    diagnosis: str = ""

    def __bool__(self) -> bool:
        return self.ok

    def __str__(self) -> str:
        return self.message

    def _repr_pretty_(self, p, cycle) -> None:
        p.text(self.message)


def _show_one_line(shell, etype, value, tb, tb_offset=None) -> None:
    print(f"labkit: error: {value}", file=sys.stderr)


def one_line_errors() -> bool:
    """In an IPython kernel, show a cell's ``LabkitError`` as one line; True when installed.

    IPython's ``set_custom_exc`` is the documented hook for this; other exceptions keep their
    traceback (they are bugs, and the traceback is what finds them).
    """
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    if shell is None:
        return False
    shell.set_custom_exc((LabkitError,), _show_one_line)
    return True


one_line_errors()
