"""8-bit and 4-bit weight storage for checkpoints: bytes on disk and the error it adds.

A trained model's weight matrices are stored block-wise with an fp32 absmax per block
and linear codes: int8 (k/127) or int4 (k/7, two codes packed per byte). This follows
the storage layout of QLoRA (Dettmers et al., NeurIPS 2023: 4-bit codes, blocks of 64,
one absmax each) with two simplifications said out loud: a linear int4 grid instead of
NF4, and fp32 scales without QLoRA's double quantization of the scales. So 4-bit costs
4 + 32/64 = 4.5 bits per weight, 8-bit 8.5. Vectors (biases, LayerNorm) stay fp32, as in
LLM.int8() and QLoRA, which keep them in 16/32 bits: they are few and sensitive.

The checkpoint is a dict of tensors, ints and strings, written with ``torch.save`` and
read back with ``weights_only=True`` (nothing in it can run code). Bytes are measured
twice: the file's size, and the tensor payload inside the archive (``torch.save`` writes
a zip; each storage is one ``data/N`` entry), which must equal :func:`weight_bytes`
exactly; the difference is the container (pickle and zip headers).
"""

from __future__ import annotations

import math
import os
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn as nn

from labkit.errors import LabkitError, require_choice, require_positive
from labkit.reduction.quantize import SCALE_BYTES, Quantized, code_book, dequantize, pack4, quantize, unpack4
from labkit.rig.train import Trainer

WEIGHT_BITS = (32, 8, 4)
FORMAT = "labkit-blockwise-absmax-v1"


def weight_bytes(n: int, bits: int, block: int = 64) -> int:
    """Exact payload bytes of one tensor of ``n`` weights: codes (packed) + 4 bytes per started block; fp32: 4n."""
    require_positive("n", n)
    require_choice("bits", bits, WEIGHT_BITS)
    require_positive("block", block)
    if bits == 32:
        return 4 * n
    return -(-n * bits // 8) + SCALE_BYTES * -(-n // block)


def _quantized(p: torch.Tensor) -> bool:
    return p.dim() >= 2


def predicted_checkpoint_bytes(model: nn.Module, bits: int, block: int = 64) -> int:
    """:func:`weight_bytes` over the model's parameters (tied ones once); vectors at 4 bytes each."""
    return sum(weight_bytes(p.numel(), bits if _quantized(p) else 32, block) for p in model.parameters())


def quantize_weights(model: nn.Module, bits: int, block: int = 64) -> dict[str, object]:
    """A weights_only-safe checkpoint: matrices as codes + absmax (``bits`` 8 or 4), vectors as fp32."""
    require_choice("bits", bits, WEIGHT_BITS)
    require_positive("block", block)
    tensors: dict[str, object] = {}
    for name, p in model.named_parameters():  # tied weights appear once
        if bits == 32 or not _quantized(p):
            tensors[name] = p.detach().float().clone()
            continue
        q = quantize(p, code_book("linear", signed=True, bits=bits), block)
        codes = pack4(q.codes) if bits == 4 else q.codes
        tensors[name] = {"codes": codes, "absmax": q.absmax, "shape": list(q.shape)}
    return {"format": FORMAT, "bits": bits, "block": block, "tensors": tensors}


def dequantize_weights(ckpt: dict[str, object]) -> dict[str, torch.Tensor]:
    """fp32 weights by parameter name from :func:`quantize_weights`' checkpoint."""
    got = ckpt.get("format") if isinstance(ckpt, dict) else type(ckpt).__name__
    if got != FORMAT:
        raise LabkitError(f"checkpoint format must be {FORMAT!r} (got {got!r})")
    bits, block = int(ckpt["bits"]), int(ckpt["block"])
    out: dict[str, torch.Tensor] = {}
    for name, t in ckpt["tensors"].items():
        if isinstance(t, torch.Tensor):
            out[name] = t
            continue
        shape = tuple(t["shape"])
        codes = unpack4(t["codes"], math.prod(shape)) if bits == 4 else t["codes"]
        out[name] = dequantize(Quantized(codes, t["absmax"], shape, block), code_book("linear", True, bits))
    return out


def save_weights(model: nn.Module, path: str | Path, bits: int, block: int = 64) -> Path:
    """Write the quantized checkpoint to ``path`` (temporary file, then an atomic rename)."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    torch.save(quantize_weights(model, bits, block), tmp)
    os.replace(tmp, path)
    return path


def load_weights(path: str | Path) -> dict[str, torch.Tensor]:
    """Read a checkpoint with ``weights_only=True`` and dequantize it."""
    return dequantize_weights(torch.load(path, weights_only=True))


def archive_payload_bytes(path: str | Path) -> int:
    """Bytes of tensor storage inside a ``torch.save`` archive: the ``data/N`` entries of its zip."""
    with zipfile.ZipFile(path) as z:
        return sum(i.file_size for i in z.infolist() if i.filename.split("/")[-2:-1] == ["data"])


@dataclass(frozen=True)
class WeightStorage:
    """One storage format: bytes on disk (measured, payload, predicted) and what it costs in accuracy."""

    bits: int
    block: int
    n_params: int
    file_bytes: int  # os.path.getsize of the checkpoint
    payload_bytes: int  # tensor bytes inside the archive, measured
    predicted_bytes: int  # predicted_checkpoint_bytes(...)
    rel_error: float  # ||W - W_hat|| / ||W|| over all parameters
    eval_loss: float  # trainer.eval_loss() with the dequantized weights

    @property
    def bytes_per_param(self) -> float:
        return self.payload_bytes / self.n_params


def _apply(model: nn.Module, weights: dict[str, torch.Tensor]) -> None:
    with torch.no_grad():
        for name, w in weights.items():
            model.get_parameter(name).copy_(w)


def measure_storage(trainer: Trainer, bits: int, block: int = 64) -> WeightStorage:
    """Save ``trainer.model`` at ``bits``, load it back, measure bytes, error and eval loss; then restore it."""
    model = trainer.model
    original = {n: p.detach().clone() for n, p in model.named_parameters()}
    with tempfile.TemporaryDirectory(prefix="labkit-wq-") as d:
        path = save_weights(model, Path(d) / f"w{bits}.pt", bits, block)
        file_bytes, payload = path.stat().st_size, archive_payload_bytes(path)
        weights = load_weights(path)
    err = sum(float((weights[n] - w).pow(2).sum()) for n, w in original.items())
    norm = sum(float(w.pow(2).sum()) for w in original.values())
    try:
        _apply(model, weights)
        loss = trainer.eval_loss()
    finally:
        _apply(model, original)
    n = sum(w.numel() for w in original.values())
    return WeightStorage(bits, block, n, file_bytes, payload, predicted_checkpoint_bytes(model, bits, block),
                         math.sqrt(err / norm), loss)


def compare_storage(trainer: Trainer, settings: tuple[tuple[int, int], ...] = ((32, 64), (8, 64), (4, 64))
                    ) -> list[WeightStorage]:
    """:func:`measure_storage` for each ``(bits, block)``: fp32 first, as the reference."""
    return [measure_storage(trainer, bits, block) for bits, block in settings]


def storage_rows(results: list[WeightStorage]) -> list[dict[str, object]]:
    """A notebook table of :func:`compare_storage`'s results."""
    return [{"bits": r.bits, "block": r.block if r.bits != 32 else "-", "file bytes": r.file_bytes,
             "payload bytes": r.payload_bytes, "predicted": r.predicted_bytes,
             "bytes/param": round(r.bytes_per_param, 4), "rel. weight error": f"{r.rel_error:.2e}",
             "eval loss": round(r.eval_loss, 4)} for r in results]
