"""``labkit calibrate``: this machine's rates, measured with real kernels in under a minute on a CPU.

What the step-time model (``labkit.predict.compute``) prices, each timed here on the device itself
(the fastest of a few repeats after a warm-up; CUDA synchronised around each timing):

* GEMMs over the shapes a model uses (its Q/K/V, output, MLP and output-layer projections at
  ``rows`` = batch x sequence), each forward GEMM and its backward's two: the calibrated rate is a
  training step's GEMM FLOPs over their measured seconds (``step_gemm_rate``; a median of the
  per-shape rates was 1.5-1.9x slow on this course's CPU: the weight gradients, whose inner size is
  the rows, run up to twice as fast as the forward there), and the same at ``GRID``'s sizes, so that
  ``Calibration.gemm_rate`` reads a model it never saw off a line through them;
* attention, eager (``softmax(Q K^T) V`` written out) and sdpa (``scaled_dot_product_attention``):
  achieved FLOP/s of its two products (4 b a s^2 d);
* an element-wise kernel (``torch.mul`` of a large tensor by a scalar): bytes read plus written per second;
* launch and dispatch: one op's fixed cost, averaged over many calls (on a CPU the OpenMP region an op
  above ATen's grain opens, ``_launch``);
* the cross-entropy's forward and backward on fp32 logits, seconds per logit;
* the optimizer step: torch's single-tensor AdamW (the lab's) over a few million parameters, seconds per parameter.

The file it writes is ``labkit.hardware.calibration``'s, with the model's kernel shares recorded.
"""

from __future__ import annotations

import datetime
import platform
import statistics
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

from labkit.hardware.calibration import Calibration
from labkit.predict.compute import GEMM_EFFICIENCY, HBM_EFFICIENCY
from labkit.predict.step_seconds import gemm_shapes, model_gemms
from labkit.shapes import ModelShape


def _timed(fn: Callable[[], object], device: torch.device, repeats: int = 5) -> float:
    """Fastest seconds of ``fn`` over ``repeats`` after one warm-up call: the machine's rate when nothing else
    runs (on a shared CPU the median of five GEMM timings swung 1.5x between runs a minute apart; the
    fastest moved less), compared with ``step_time.measured_step_seconds``'s fastest step."""
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda *a: None)
    fn()
    times = []
    for _ in range(repeats):
        sync(device)
        t0 = time.perf_counter()
        fn()
        sync(device)
        times.append(time.perf_counter() - t0)
    return min(times)


# (n, k) of projections spanning the models the lab trains, from 0.06 M to 4 M weights: the rate of a model the
# calibration did not see is interpolated between them (``Calibration.gemm_rate``)
GRID = ((256, 256), (1024, 256), (512, 512), (2048, 512), (1024, 1024), (4096, 1024))


def _gemms(shape: ModelShape, rows: int, device: torch.device, dtype: torch.dtype,
           extra: tuple[tuple[int, int], ...] = ()) -> list[dict]:
    """Each projection's forward GEMM and its backward's two (input gradient: (m x n) @ (n x k); weight
    gradient: (k x m) @ (m x n), whose inner size is the rows): a training step runs all three, and on a CPU
    the long inner size of the weight gradient runs up to twice as fast as the forward."""
    out = []
    for m, n, k in [*gemm_shapes(shape, rows), *((rows, n, k) for n, k in extra)]:
        w = torch.randn(k, n, device=device, dtype=dtype)
        x, g = torch.randn(m, k, device=device, dtype=dtype), torch.randn(m, n, device=device, dtype=dtype)
        s = _timed(lambda x=x, w=w: x @ w, device)
        s_back = _timed(lambda g=g, w=w: g @ w.T, device) + _timed(lambda x=x, g=g: x.T @ g, device)
        out.append({"m": m, "n": n, "k": k, "seconds": s, "flops_per_s": 2.0 * m * n * k / s,
                    "backward_seconds": s_back})
    return out


def step_gemm_rate(shape: ModelShape, shapes: list[dict]) -> float:
    """FLOP/s of a training step's GEMMs on the measured shapes: their forward and backward FLOPs, each layer's
    projections ``shape.layers`` times and the output layer once, over their measured seconds (so the slow
    shapes weigh as much as they cost a step, not one vote each as in a median)."""
    weights = [c for *_, c in model_gemms(shape, 1)]
    flops = sum(w * 3 * 2.0 * s["m"] * s["n"] * s["k"] for w, s in zip(weights, shapes, strict=False))
    seconds = sum(w * (s["seconds"] + s.get("backward_seconds", 2 * s["seconds"]))
                  for w, s in zip(weights, shapes, strict=False))
    return flops / seconds


def _attention(shape: ModelShape, seq: int, device: torch.device, dtype: torch.dtype) -> dict[str, float]:
    heads, d = shape.heads, shape.hidden // shape.heads
    q, k, v = (torch.randn(1, heads, seq, d, device=device, dtype=dtype) for _ in range(3))
    flops = 4.0 * heads * seq * seq * d
    eager = _timed(lambda: torch.softmax(q @ k.transpose(-1, -2) / d**0.5, dim=-1) @ v, device)
    sdpa = _timed(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=False), device)
    return {"eager": flops / eager, "sdpa": flops / sdpa}


def _bandwidth(device: torch.device, nbytes: int) -> float:
    x = torch.randn(nbytes // 4, device=device)
    out = torch.empty_like(x)
    return 2.0 * x.nbytes / _timed(lambda: torch.mul(x, 2.0, out=out), device)


def _per_call(x: torch.Tensor, calls: int, device: torch.device) -> float:
    out = torch.empty_like(x)

    def many() -> None:
        for _ in range(calls):
            torch.mul(x, 2.0, out=out)

    return _timed(many, device, repeats=3) / calls


def bare_op_seconds(calls: int = 3000, device: torch.device | None = None) -> float:
    """One bare op: a one-element ``torch.mul`` into a preallocated output in a Python loop, timed exactly as
    ``launch_s`` is on a GPU (the unit the eager profile's host figures are measured in, ``measure.host_time``)."""
    device = device or torch.device("cpu")
    return _per_call(torch.zeros(1, device=device), calls, device)


def in_bare_ops(fn: Callable[[], object], rounds: int = 7, calls: int = 3000,
                device: torch.device | None = None) -> dict[str, float]:
    """``fn``'s seconds in bare ops: rounds that alternate ``fn`` (the fastest of 5 runs) with a bare op, so a
    shared machine that slows one slows both; the median of the rounds' ratios (``ops``) and the fastest of each
    seen (``fn_s``, ``bare_op_s``)."""
    device = device or torch.device("cpu")
    runs, bares = [], []
    for _ in range(rounds):
        runs.append(_timed(fn, device, repeats=5))
        bares.append(bare_op_seconds(calls, device))
    return {"ops": statistics.median(r / b for r, b in zip(runs, bares, strict=True)), "fn_s": min(runs),
            "bare_op_s": min(bares)}


def _launch(device: torch.device, calls: int) -> float:
    """One op's fixed cost. On CUDA: a one-element op (the launch; the kernel itself takes less). On a CPU an op
    on more than ATen's grain (32,768 elements, ``at::internal::GRAIN_SIZE``) runs in an OpenMP parallel region
    whose threads wake and join every call: about 50 us on this course's VM (OMP_WAIT_POLICY=PASSIVE) against
    3 us below the grain, and a model's activations are above it. So on a CPU: the fixed part of a line through
    an op's time at 2^16 and 2^18 elements (their bytes' share taken off), else the one-element op's if larger."""
    tiny = _per_call(torch.zeros(1, device=device), calls, device)
    if device.type == "cuda":
        return tiny
    small, large = 2**16, 2**18
    t_small = _per_call(torch.randn(small, device=device), calls // 10, device)
    t_large = _per_call(torch.randn(large, device=device), calls // 10, device)
    fixed = t_small - (t_large - t_small) * small / (large - small)
    return max(tiny, fixed)


def _loss(device: torch.device, rows: int, vocab: int) -> float:
    """Seconds per logit of the cross-entropy's forward and backward on fp32 logits (``F.cross_entropy``, the
    loss transformers and the tiny GPT call after ``logits.float()``): on a CPU its exp and log are compute-bound,
    eight times the four passes' bytes at the element-wise bandwidth on this course's VM."""
    logits = torch.randn(rows, vocab, device=device, requires_grad=True)
    labels = torch.randint(0, vocab, (rows,), device=device)

    def step() -> None:
        F.cross_entropy(logits, labels).backward()
        logits.grad = None

    return _timed(step, device, repeats=3) / (rows * vocab)


def _adamw(device: torch.device, params: int) -> float:
    ps = [torch.nn.Parameter(torch.randn(params // 4, device=device)) for _ in range(4)]
    for p in ps:
        p.grad = torch.randn_like(p)
    opt = torch.optim.AdamW(ps, lr=1e-3, foreach=False)
    return _timed(opt.step, device, repeats=3) / sum(p.numel() for p in ps)


def calibrate(shape: ModelShape, device: str = "cpu", rows: int | None = None, seq: int | None = None,
              progress: Callable[[str], None] | None = None) -> Calibration:
    """Measure this machine's rates on ``device`` with ``shape``'s GEMMs (the file's figures, not yet saved)."""
    dev = torch.device(device)
    cuda = dev.type == "cuda"
    dtype, name = (torch.bfloat16, "bf16") if cuda else (torch.float32, "fp32")
    rows, seq = rows or (8192 if cuda else 256), seq or (4096 if cuda else 256)
    say = progress or (lambda _: None)
    say("GEMMs")
    shapes = _gemms(shape, rows, dev, dtype, GRID)
    say("attention")
    attention = _attention(shape, seq, dev, dtype)
    say("element-wise bandwidth")
    bandwidth = _bandwidth(dev, 2**30 if cuda else 2**26)
    say("launch and dispatch")
    launch = _launch(dev, 2000 if cuda else 5000)
    say("cross-entropy")
    loss = _loss(dev, rows, shape.vocab)
    say("AdamW step")
    adamw = _adamw(dev, 2**26 if cuda else 2**22)
    machine = torch.cuda.get_device_name(dev) if cuda else (platform.processor() or platform.machine())
    return Calibration(f"{platform.node()}: {machine}", dev.type, torch.__version__,
                       datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"), name,
                       step_gemm_rate(shape, shapes), bandwidth, launch, adamw, attention,
                       shapes, GEMM_EFFICIENCY, HBM_EFFICIENCY, loss)
