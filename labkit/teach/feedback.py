"""What a learner reads after an answer: the one feedback type every check, reveal and exercise returns."""

from __future__ import annotations

from dataclasses import dataclass


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
