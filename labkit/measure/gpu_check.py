"""The GPU check (``tools/gpu_check.sh``): calibrate, then three models measured beside predicted, in one table.

On a CUDA device, in bf16-mixed with sdpa and no dropout (the H200 reference's setup):

1. ``labkit calibrate``'s run on the GPU (``labkit.measure.calibrate``), written to ``OUT/calibration.json``;
2. three models of different families and sizes (the tiny GPT, GPT-2 medium, TinyLlama-1.1B, Qwen2-1.5B
   from ``datasets/hf_configs``): the whole-step peak measured (``torch.cuda.max_memory_allocated``) beside
   ``labkit.predict.step_peak``'s, with its phase and the caching allocator's reserve, and the step's time
   measured beside the kernel model's (``labkit.predict.step_seconds``) on the catalogue's datasheet for
   this GPU and on the calibration;
3. Mistral-7B with 4 layers at 4,096 tokens: the tensors its first layer saves, to explain its
   sliding-window attention's extra activations on the H200.

Every result is appended to ``OUT/gpu_check.jsonl`` as it is measured, so a run cut short keeps what it
had. Without CUDA it says so, runs the tiny GPT's CPU part and exits 0.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

from labkit.measure.own_model import compare_model
from labkit.measure.step_time import catalogue_gpu

MODELS = ((None, 8, 256), ("gpt2-medium", 8, 1024), ("tinyllama-1.1b", 4, 1024), ("qwen2-1.5b", 2, 2048))


def _append(out: Path, record: dict) -> None:
    with (out / "gpu_check.jsonl").open("a", encoding="utf-8") as f:
        f.write(json.dumps(record, default=str) + "\n")


def _row(r) -> list[str]:
    pk, t = r.peak, r.timing
    pred = t["predicted"]

    def ratio(v):
        return f"{t['measured'] / v:.2f}" if v else "-"

    return [r.model, f"{r.setup['batch']}x{r.setup['seq']}", f"{pk['measured'] / 1e9:.3f}",
            f"{pk['predicted'] / 1e9:.3f}", f"{pk['measured'] / pk['predicted']:.3f}",
            f"{pk['phase']}/{pk['predicted_phase']}", f"{pk['allocator_reserve'] / 1e9:.2f}",
            f"{t['measured'] * 1e3:.1f}", ratio(pred["datasheet"]), ratio(pred["calibrated"])]


def _mistral_layer(out: Path) -> None:
    """What Mistral-7B's first layer saves at 1 x 4096 (4 layers), tensor by tensor, beside the prediction."""
    from labkit.measure import measure_step
    from labkit.measure.own_model import build_trainer

    _, trainer, _, per_layer, *_ = build_trainer("mistral-7b", 1, 4096, "bf16-mixed", "sdpa", False, 0.0, "cuda", 4)
    trainer.step()
    step = measure_step(trainer)
    saved = [{"module": t.module, "shape": t.shape, "dtype": t.dtype, "bytes": t.nbytes} for t in step.saved
             if t.layer == 0]
    rec = {"what": "mistral layer 0", "measured": step.activations_per_layer()[0], "predicted": per_layer,
           "by_role": step.by_role(0), "saved": saved}
    _append(out, rec)
    print(f"\nmistral-7b (4 layers) 1x4096, layer 0: measured {rec['measured']:,} B, predicted {per_layer:,.0f} B")
    for role, nbytes in sorted(rec["by_role"].items(), key=lambda kv: -kv[1])[:8]:
        print(f"  {role:40s} {nbytes:>14,}")
    del trainer
    torch.cuda.empty_cache()


def main(argv: list[str] | None = None) -> int:
    from labkit.predict.tables import text_table

    parser = argparse.ArgumentParser(prog="gpu_check", description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="gpu_check_out", help="folder for calibration.json and gpu_check.jsonl")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("gpu_check: no CUDA device: running the CPU-safe part only (the tiny GPT, one step on the CPU)")
        r = compare_model(None, batch=2, seq=32, precision="bf16-mixed", attention="sdpa", device="cpu", timed=False)
        print(f"tiny-gpt cpu bf16-mixed: whole-step peak {r.peak['measured']:,} B measured, "
              f"{r.peak['predicted']:,.0f} B predicted ({r.peak['measured'] / r.peak['predicted']:.3f}x, "
              f"{r.peak['phase']} phase)")
        print("gpu_check: skipped the GPU measurements (no CUDA)")
        return 0
    from labkit.hardware.calibration import save
    from labkit.measure.calibrate import calibrate
    from labkit.shapes.hf_config import shape_from_hf_config

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    name = torch.cuda.get_device_name()
    gpu = catalogue_gpu(name)
    print(f"gpu_check on {name} (catalogue: {gpu.name if gpu else 'no entry'}), torch {torch.__version__}")
    cal = calibrate(shape_from_hf_config("llama-2-7b"), "cuda")
    save(cal, out / "calibration.json")
    torch.cuda.empty_cache()  # the calibration's large tensors would stay cached and count as the next reserve
    _append(out, {"what": "calibration"} | cal.to_json())
    print(f"calibration: GEMM {cal.gemm_flops / 1e12:.1f} TFLOP/s, sdpa {cal.attention_flops['sdpa'] / 1e12:.1f} "
          f"TFLOP/s, element-wise {cal.memory_bandwidth / 1e9:.0f} GB/s, launch {cal.launch_s * 1e6:.1f} us, "
          f"AdamW {cal.adamw_s_per_param * 1e12:.1f} ps/param")
    rows = []
    for config, batch, seq in MODELS:
        r = compare_model(config, batch=batch, seq=seq, precision="bf16-mixed", attention="sdpa", dropout=0.0,
                          device="cuda", calibration=cal)
        _append(out, {"what": "model", "config": config} | r.to_json())
        rows.append(_row(r))
        print("  measured " + " ".join(rows[-1]), flush=True)
        del r
        torch.cuda.empty_cache()
    print("\n" + text_table(["model", "b x s", "peak GB", "predicted GB", "ratio", "phase meas/pred", "reserve GB",
                             "step ms", "ms ratio datasheet", "ms ratio calibrated"], rows))
    print("(ratios are measured/predicted; peak in GB = 1e9 bytes)")
    _mistral_layer(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
