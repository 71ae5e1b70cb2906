"""Does a LoRA/QLoRA fine-tune fit one GPU, by how much, and which lever makes it fit.

The verdict is judged on the whole step's predicted peak on CUDA (``labkit.predict.finetune_peak``:
cuBLAS's workspaces and the batch included) against what torch can allocate of the card (the
catalogue's ``usable_memory_bytes``), with the caching allocator's measured margin stated beside it
(``labkit.predict.allocator``). The levers are the ones a practitioner has: gradient checkpointing,
the sequence length, the rank and the targets; ``longest_seq`` finds the longest sequence that fits.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from labkit.predict.allocator import reserve_share
from labkit.predict.finetune import Finetune, parse_targets
from labkit.predict.finetune_peak import FinetuneStep, finetune_peak
from labkit.shapes import ModelShape


def fit(shape: ModelShape, ft: Finetune, batch: int, seq: int, device) -> dict[str, Any]:
    """The predicted peak on one GPU of the catalogue, its margin and whether it fits (bytes)."""
    pk = finetune_peak(FinetuneStep(shape, ft, batch, seq, "bf16-mixed", "cuda"), reserve_share())
    usable = device.usable_memory_bytes
    return {"bytes": pk.peak, "phase": pk.phase, "by_phase": pk.by_phase, "reserve_bytes": pk.reserve.bytes,
            "terms": {t.name: t.bytes for t in pk.phases[pk.phase] if t.bytes}, "usable_bytes": usable,
            "headroom_bytes": usable - pk.peak, "fits": pk.peak <= usable}


def longest_seq(shape: ModelShape, ft: Finetune, batch: int, device) -> int:
    """The longest sequence (up to the model's positions) whose predicted peak fits ``device``; 0 if none."""
    lo, hi = 0, shape.seq
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if fit(shape, ft, batch, mid, device)["fits"] else (lo, mid - 1)
    return lo


@dataclass(frozen=True)
class FitRow:
    """One setting of a fine-tune on one GPU: its predicted peak (bytes) and the verdict."""

    label: str
    peak: float
    headroom: float

    @property
    def fits(self) -> bool:
        return self.headroom >= 0


def lever_rows(shape: ModelShape, ft: Finetune, batch: int, seq: int, device) -> list[FitRow]:
    """The base setting, then one lever moved at a time: longer sequences, higher ranks, every linear layer,
    gradient checkpointing, QLoRA's 4-bit base (or LoRA's 16-bit one)."""
    def row(label: str, f: Finetune, s: int = seq) -> FitRow:
        out = fit(shape, f, batch, s, device)
        return FitRow(label, out["bytes"], out["headroom_bytes"])

    rows = [row(f"as given: {ft.method} r={ft.rank} on {','.join(ft.targets)}, seq {seq}", ft)]
    rows += [row(f"seq {s}", ft, s) for s in (2 * seq, 4 * seq) if s <= shape.seq]
    rows += [row(f"rank {r}", replace(ft, rank=r)) for r in (4 * ft.rank, 16 * ft.rank)]
    rows.append(row("all-linear targets", replace(ft, targets=parse_targets("all-linear", shape.gated))))
    rows.append(row("gradient checkpointing " + ("off" if ft.checkpointing else "on"),
                    replace(ft, checkpointing=not ft.checkpointing)))
    other = "lora" if ft.method == "qlora" else "qlora"
    rows.append(row(f"{other} instead", replace(ft, method=other)))
    return rows


SEVEN_B, SEVEN_B_RANK, SEVEN_B_SEQ = "llama-2-7b", 16, 1024  # notebook 05's fine-tuning question: W_q and W_v


def seven_b_figures(device_name: str = "RTX-4090") -> dict[str, float]:
    """Notebook 05's 7B fine-tune, and the wrong answers its mistakes give (bytes): Llama-2 7B, LoRA r = 16 on
    W_q and W_v, micro-batch 1, 1,024 tokens, bf16 mixed, no checkpointing, on ``device_name``."""
    from labkit.hardware import load_catalogue
    from labkit.predict.finetune import finetune_bytes, matrix_shapes, nf4_bytes
    from labkit.shapes.hf_config import shape_from_hf_config

    shape = shape_from_hf_config(SEVEN_B)
    lora = Finetune("lora", SEVEN_B_RANK, ("q", "v"))
    qlora = replace(lora, method="qlora")
    peak = fit(shape, lora, 1, SEVEN_B_SEQ, load_catalogue().gpu(device_name))["bytes"]
    fb = finetune_bytes(shape, lora, SEVEN_B_SEQ, 1, "bf16-mixed")
    base4 = finetune_bytes(shape, qlora, SEVEN_B_SEQ, 1, "bf16-mixed").frozen
    matrices = [i * o for i, o in matrix_shapes(shape).values()] * shape.layers
    scales = sum(nf4_bytes(n) - n // 2 for n in matrices)
    return {"lora peak": peak, "lora activations": fb.activations, "frozen params": shape.params,
            "adam states for frozen": 12.0 * shape.params, "full fine-tune states": 16.0 * shape.params,
            "qlora base": base4, "qlora base without scales": base4 - scales, "all 4-bit": 0.5 * shape.params,
            "16-bit base": 2.0 * shape.params}
