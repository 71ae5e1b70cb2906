"""One offloaded storage (where its bytes are, whether its prefetch beat its use), what a run moved, and the errors."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch

from labkit.errors import LabkitError


class OffloadError(LabkitError):
    """An offloaded tensor could not be written or read back; names the file and the tensor."""


class OffloadDiskFull(OffloadError):
    """The offload directory's quota (or the disk) is full."""


@dataclass
class Slot:
    """One offloaded storage: where its bytes went, whether its read is pending or done, and its error."""

    index: int
    module: str
    nbytes: int
    path: Path | None = None
    name: str | None = None
    buf: torch.Tensor | None = None
    data: torch.Tensor | None = None
    error: LabkitError | None = None
    state: str = "pending"  # pending, reading, ready
    used: bool = False
    in_time: bool | None = None

    def label(self) -> str:
        return f"saved tensor #{self.index} of module {self.module or '<root>'!r} ({self.nbytes:,} bytes)"


@dataclass
class OffloadStats:
    """What one run moved: bytes, and whether each prefetch beat its use."""

    bytes_offloaded: int = 0
    bytes_written: int = 0
    bytes_read: int = 0
    tensors_offloaded: int = 0
    stalls: int = 0
    in_time: int = 0
    offloaded_indices: list[int] = field(default_factory=list)
