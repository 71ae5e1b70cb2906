"""The matrix multiplies' operand bytes of a real training step, counted as torch runs them.

Every 2-D matrix multiply torch dispatches (``aten.mm``, ``aten.addmm``: the linear layers and
the LM head, forward and backward) reads its two operands and writes its result; summing their
sizes gives the bytes a roofline counts for the step (Williams et al., CACM 2009), the
measurement ``traffic.gemm_traffic`` predicts (its ``recompute=False`` form: no recompute here).
Attention's own products run as batched ``bmm`` and are not counted on either side.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from labkit.rig.model import GPTConfig, TinyGPT

_ATEN = torch.ops.aten


@dataclass(frozen=True)
class MeasuredGemms:
    """Operand and result bytes of the 2-D matrix multiplies of one step, and how many ran."""

    nbytes: int
    calls: int


class _CountMatmuls(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.nbytes = self.calls = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func in (_ATEN.mm.default, _ATEN.addmm.default):
            a, b = (args[0], args[1]) if func is _ATEN.mm.default else (args[1], args[2])
            self.nbytes += (a.numel() + b.numel() + out.numel()) * a.element_size()
            self.calls += 1
        return out


def measure_gemm_bytes(cfg: GPTConfig, batch_size: int, seed: int = 0) -> MeasuredGemms:
    """Run one forward and backward of a fresh tiny GPT (fp32) and count its matrix multiplies' bytes."""
    torch.manual_seed(seed)
    model = TinyGPT(cfg)
    idx = torch.randint(0, cfg.vocab_size, (batch_size, cfg.seq_len))
    counter = _CountMatmuls()
    with counter:
        out = model(idx, idx)
        loss = out[1] if isinstance(out, tuple) else out
        loss.backward()
    return MeasuredGemms(counter.nbytes, counter.calls)
