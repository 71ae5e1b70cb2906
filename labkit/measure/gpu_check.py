"""The GPU check (``tools/gpu_check.sh``): measured beside predicted on a real CUDA device, in bf16-mixed.

For the tiny GPT and a 1B-class model from a shipped config (TinyLlama-1.1B): the whole-step peak
from ``torch.cuda.max_memory_allocated`` beside the predicted categories (ZeRO's 16 bytes per
parameter plus the activation estimate), the caching allocator's reserve beside it, and one step's
time (median of a few, after warm-up) beside the roofline time for the catalogue's entry for this
GPU (Williams et al. 2009: the slower of FLOPs at the dense bf16 peak and bytes at memory bandwidth,
with bytes = every model-state byte and every saved activation written once and read once).
Without CUDA it runs the CPU-safe part (the tiny GPT on the CPU) and says so.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch

from labkit.hardware import roofline_time
from labkit.measure.flops import fused_training_flops
from labkit.measure.own_model import build_trainer, compare_model
from labkit.measure.step_time import catalogue_gpu
from labkit.rig.data import vocab_size
from labkit.rig.model import GPTConfig
from labkit.shapes import ModelShape
from labkit.shapes.hf_config import shape_from_hf_config

MODELS = ((None, 8, 256), ("tinyllama-1.1b", 4, 1024))  # (config, batch, seq)


def step_seconds(config, batch: int, seq: int, steps: int = 5) -> float:
    _, trainer, *_ = build_trainer(config, batch, seq, "bf16-mixed", "sdpa", False, 0.0, "cuda")
    times = []
    for _ in range(steps + 2):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        trainer.step()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return statistics.median(times[2:])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gpu_check", description=__doc__)
    parser.add_argument("--gpu", help="the catalogue entry of this GPU (default: from its CUDA name)")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("gpu_check: no CUDA device: running the CPU-safe part only (the tiny GPT, one step on the CPU)")
        r = compare_model(None, batch=2, seq=32, precision="bf16-mixed", attention="sdpa", device="cpu")
        print(f"tiny-gpt cpu bf16-mixed: whole-step peak {r.peak['measured']:,} B, predicted (no temporaries) "
              f"{r.peak['predicted']:,.0f} B ({r.peak['measured'] / r.peak['predicted']:.3f}x)")
        print("gpu_check: skipped the GPU measurements (no CUDA)")
        return 0
    name = torch.cuda.get_device_name()
    gpu = catalogue_gpu(name, args.gpu)
    print(f"gpu_check on {name} (catalogue: {gpu.name if gpu else 'no entry'}), torch {torch.__version__}")
    for config, batch, seq in MODELS:
        r = compare_model(config, batch=batch, seq=seq, precision="bf16-mixed", attention="sdpa", dropout=0.0,
                          device="cuda")
        pk = r.peak
        print(f"\n{r.model}: {r.params:,} parameters, bf16-mixed, batch {batch}, seq {seq}")
        for row, m, p in r.rows()[:4]:
            print(f"  {row:18s} measured {m:>16,} predicted {p:>16,.0f}  {m / p:.3f}x")
        print(f"  whole-step peak    measured {pk['measured']:>16,} predicted {pk['predicted']:>16,.0f}  "
              f"{pk['measured'] / pk['predicted']:.3f}x (phase: {pk['phase']}; predicted: no temporaries)")
        print(f"  allocator reserve  {pk['allocator_reserve']:,} B beyond the allocated peak "
              f"(reserved {pk['reserved']:,})")
        if gpu is not None:
            shape = shape_from_hf_config(config) if config else \
                ModelShape.from_config(GPTConfig(vocab_size=vocab_size(), seq_len=seq))
            flops = fused_training_flops(shape, seq, batch, "sdpa")
            nbytes = 2 * (sum(p for _, _, p in r.rows()[:4]))
            predicted = roofline_time(flops, nbytes, gpu, "bf16")
            measured = step_seconds(config, batch, seq)
            print(f"  step time          measured {measured * 1e3:10.2f} ms, roofline {predicted * 1e3:10.2f} ms: "
                  f"ratio {measured / predicted:.2f} ({flops / 1e12:.2f} TFLOP per step)")
        del r
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
