"""Which saved storages leave the device: vDNN's kinds of offload policy."""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass

from labkit.errors import LabkitError, require_choice, require_positive
from labkit.offload.trace import Trace

POLICIES = ("all", "conv-like", "largest-k", "modules")


COMPUTE_HEAVY = ("Linear", "MatMul")


@dataclass(frozen=True)
class OffloadPolicy:
    """Which saved storages leave the device; see the module docstring for the kinds."""

    kind: str = "all"
    min_bytes: int = 0
    k: int = 0
    modules: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        require_choice("policy", self.kind, POLICIES)
        if self.kind == "largest-k":
            require_positive("k", self.k)
        if self.kind == "modules" and not self.modules:
            raise LabkitError("modules must name at least one module pattern for policy 'modules'")

    def wants(self, module: str, module_type: str, nbytes: int) -> bool:
        if nbytes < self.min_bytes:
            return False
        if self.kind == "conv-like":
            return module_type in COMPUTE_HEAVY
        if self.kind == "modules":
            return any(fnmatch.fnmatchcase(module, p) for p in self.modules)
        return True

    def select(self, trace: Trace) -> set[int]:
        """Indices of the trace entries this policy offloads."""
        ok = [e for e in trace.entries if self.wants(e.module, e.module_type, e.nbytes)]
        if self.kind == "largest-k":
            ok = sorted(ok, key=lambda e: (-e.nbytes, e.index))[: self.k]
        return {e.index for e in ok}
