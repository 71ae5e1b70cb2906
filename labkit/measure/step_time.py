"""A real step's seconds beside the kernel model's, on the datasheet's device and on a calibrated one.

``measured_step_seconds`` times real training steps (median, or fastest, CUDA synchronised).
``predicted_step_times`` prices the same step with ``labkit.predict.step_seconds`` (the one step-time
model: the ``eager`` framework profile, as the lab's training loop is eager PyTorch, with the lab's
single-tensor AdamW and its fp32 master copies under bf16-mixed) twice: on the catalogue's entry for
this GPU (its datasheet; a CPU has none) and, given a calibration (``labkit calibrate``), on the device
with the rates measured here. ``bench_models`` does both for three models that calibration did not use, the
ratio reported (``labkit bench --calibration FILE``), not asserted.
"""

from __future__ import annotations

import statistics
import time

import torch

from labkit.hardware import load_catalogue
from labkit.hardware.calibration import Calibration
from labkit.predict.step_seconds import calibrated_step_seconds, lab_master_weights, step_seconds
from labkit.shapes import ModelShape


def catalogue_gpu(cuda_name: str, name: str | None = None):
    """The catalogue's entry for this GPU: ``name`` if given, else the entry whose model (``A100``, ``H200``)
    appears in ``torch.cuda.get_device_name`` and shares the most of its other tokens (``80GB``, ``SXM``,
    ``PCIe``); None when no entry's model appears."""
    cat = load_catalogue()
    if name:
        return cat.gpu(name)
    text = cuda_name.lower()
    scored = []
    for entry in {cat.gpu(n).name for n in cat.gpu_names()}:
        first, *rest = entry.lower().split("-")
        if first in text:
            scored.append((sum(t in text for t in rest), -len(rest), entry))
    return cat.gpu(max(scored)[2]) if scored else None


def measured_step_seconds(trainer, steps: int = 3, warmup: int = 2, fastest: bool = False) -> float:
    """Median (or, with ``fastest``, the least) seconds of ``steps`` real training steps after ``warmup`` untimed
    ones (a code path's first plain steps run slow while torch initialises it: 0.8 s and 0.3 s before 5 ms for
    the tiny GPT on this CPU). The fastest is what ``labkit calibrate`` measures its kernels by: on a shared
    CPU other processes only ever slow a step down."""
    cuda = trainer.device.type == "cuda"
    times = []
    for _ in range(warmup):
        trainer.step()
    for _ in range(steps):
        if cuda:
            torch.cuda.synchronize(trainer.device)
        t0 = time.perf_counter()
        trainer.step()
        if cuda:
            torch.cuda.synchronize(trainer.device)
        times.append(time.perf_counter() - t0)
    return min(times) if fastest else statistics.median(times)


def predicted_step_times(shape: ModelShape, seq: int, batch: int, precision: str, attention: str, device: str,
                         calibration: Calibration | None = None) -> dict[str, float | None]:
    """Predicted seconds of one step: on the datasheet's device (None on a CPU or an unknown GPU) and calibrated."""
    dtype = "fp32" if precision == "fp32" else "bf16"
    base = catalogue_gpu(torch.cuda.get_device_name(device)) if torch.device(device).type == "cuda" else None
    out: dict[str, float | None] = {"datasheet": None, "calibrated": None}
    master = lab_master_weights(precision)  # the lab's MasterWeightAdamW (labkit.rig.train)
    if base is not None:
        out["datasheet"] = step_seconds(shape, seq, batch, base, dtype, attention, master_weights=master)["total"]
    if calibration is not None:
        out["calibrated"] = calibrated_step_seconds(shape, seq, batch, base, calibration, attention, master)
    return out


BENCH_MODELS = (  # (family, layers, hidden, heads, kv heads, ffn, vocab): none of them is calibrate's default gpt2
    ("llama", 4, 256, 8, 4, 688, 4096), ("qwen2", 4, 384, 6, 2, 1024, 8192), ("mistral", 2, 512, 8, 2, 1376, 4096))


def bench_models(calibration: Calibration, batch: int = 4, seq: int = 128) -> list[dict]:
    """Measured beside predicted step seconds for ``BENCH_MODELS`` on the CPU, fp32, sdpa (a ratio each)."""
    from labkit.rig.train import Trainer
    from labkit.shapes.hf_models import build_model, small_spec

    rows = []
    for family, layers, hidden, heads, kv, ffn, vocab in BENCH_MODELS:
        spec = small_spec(family, layers, hidden, heads, kv, ffn, vocab, positions=seq)
        ids = torch.randint(0, vocab, (batch, seq), generator=torch.Generator().manual_seed(0))
        trainer = Trainer(model=build_model(spec, "sdpa", dropout=0.0, use_cache=False),
                          data={"input_ids": ids, "labels": ids})
        trainer.step()
        measured = measured_step_seconds(trainer, steps=7, fastest=True)
        pred = predicted_step_times(spec.shape, seq, batch, "fp32", "sdpa", "cpu", calibration)["calibrated"]
        rows.append({"model": f"{family} {spec.shape.params / 1e6:.1f} M", "measured_s": measured,
                     "predicted_s": pred, "ratio": measured / pred})
    return rows
