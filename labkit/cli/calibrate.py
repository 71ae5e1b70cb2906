"""``labkit calibrate``: measure this machine's rates with real kernels and write a calibration file.

``labkit estimate|advise|measure --calibration FILE`` then price steps on the measured rates instead of the
catalogue's datasheet figures (``labkit.hardware.calibration``), and ``labkit bench --calibration FILE``
prints predicted beside measured step time for three models calibration did not use.
"""

from __future__ import annotations

import argparse
import sys

from labkit.cli.common import parse_int
from labkit.errors import LabkitError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("calibrate", help="measure this machine's GEMM, attention, memory, launch and AdamW rates")
    p.add_argument("--out", default="calibration.json", help="the file to write (default calibration.json)")
    p.add_argument("--hf-config", default="gpt2", help="the model whose GEMM shapes are timed (default gpt2)")
    p.add_argument("--rows", help="tokens per GEMM (batch x sequence; default 256 on a CPU, 8192 on a GPU)")
    p.add_argument("--device", help="cpu or cuda (default: cuda when present)")
    p.set_defaults(run=run)


def run(a: argparse.Namespace) -> int:
    import torch

    from labkit.hardware.calibration import save
    from labkit.measure.calibrate import calibrate
    from labkit.shapes.hf_config import shape_from_hf_config

    device = a.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device not in (["cpu", "cuda"] if torch.cuda.is_available() else ["cpu"]):
        raise LabkitError(f"device must be one of {'cpu, cuda' if torch.cuda.is_available() else 'cpu'} "
                          f"(got {device!r})")
    rows = parse_int("rows", a.rows) if a.rows is not None else None
    cal = calibrate(shape_from_hf_config(a.hf_config), device, rows,
                    progress=lambda what: print(f"calibrate: {what}", file=sys.stderr))
    path = save(cal, a.out)
    print(f"{cal.machine}, torch {cal.torch}, {cal.date}")
    print(f"GEMM {cal.gemm_flops / 1e12:.3f} TFLOP/s ({cal.dtype}, a step's forward and backward GEMMs "
          f"over {len(cal.gemm_shapes)} shapes); "
          f"attention eager {cal.attention_flops['eager'] / 1e12:.3f}, sdpa {cal.attention_flops['sdpa'] / 1e12:.3f} "
          f"TFLOP/s; element-wise {cal.memory_bandwidth / 1e9:.1f} GB/s; launch {cal.launch_s * 1e6:.1f} us; "
          f"cross-entropy {cal.loss_s_per_logit * 1e9:.2f} ns per logit; AdamW {cal.adamw_s_per_param * 1e9:.2f} ns "
          "per parameter")
    print(f"written to {path}")
    return 0


def load_calibration(path: str | None):
    """The calibration named by ``--calibration``, or None (a bad file is one line, exit 2)."""
    if path is None:
        return None
    from labkit.hardware.calibration import load

    return load(path)
