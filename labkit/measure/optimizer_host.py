"""The lab's optimizer's host time per parameter tensor, in bare ops: what ``profiles.LAB_ADAMW_HOST_OPS`` stores.

``MasterWeightAdamW.step`` (``labkit.rig.train``) is a Python loop over the parameter tensors: the gradient's
cast to fp32 (``p.grad.float()``), torch's single-tensor AdamW (``foreach=False``: ``_single_tensor_adamw`` in
``torch/optim/adamw.py``, with weight decay 0: the step count's increment, ``lerp_``, ``mul_``, ``addcmul_``,
``sqrt``, the division, ``add_``, ``addcdiv_``) and the copy back (``p.copy_(m)``). On tensors of a few elements
the kernels do next to nothing, so its seconds per tensor are the host's: Python, the dispatcher and each op's
launch. They are measured here beside one bare op timed exactly as ``labkit calibrate`` times its ``launch_s``
(``calibrate._per_call``: a one-element ``torch.mul`` into a preallocated output, in a Python loop), in rounds
that alternate the two, and reported as their ratio: a shared machine that slows one slows both.
"""

from __future__ import annotations

import statistics

import torch

from labkit.measure.calibrate import _per_call, _timed
from labkit.rig.step import optimizer_step
from labkit.rig.train import MasterWeightAdamW


def lab_adamw_host_ops(master_weights: bool = True, tensors: int = 300, numel: int = 8, rounds: int = 7,
                       calls: int = 3000) -> dict[str, float]:
    """Seconds per tensor of the lab's optimizer step over ``tensors`` tensors of ``numel`` elements (after a first
    step that creates AdamW's state), seconds of one bare op, and the median over ``rounds`` of their ratio (each
    round: the fastest of 5 steps, the mean of ``calls`` ops). ``master_weights``: bf16-mixed's
    ``MasterWeightAdamW`` over bf16 weights, else fp32's plain ``torch.optim.AdamW(foreach=False)``."""
    dev = torch.device("cpu")
    dtype = torch.bfloat16 if master_weights else torch.float32
    params = [torch.nn.Parameter(torch.randn(numel, dtype=dtype)) for _ in range(tensors)]
    opt = (MasterWeightAdamW(params, lr=1e-3) if master_weights
           else torch.optim.AdamW(params, lr=1e-3, weight_decay=0.0, foreach=False))
    for p in params:
        p.grad = torch.randn_like(p)
    def step() -> None:  # the lab's one optimizer step (rig.step), gradients kept for the next round
        optimizer_step(opt, zero_grad=False)

    step()
    per_tensor, bare = [], []
    for _ in range(rounds):
        per_tensor.append(_timed(step, dev, repeats=5) / tensors)
        bare.append(_per_call(torch.zeros(1, device=dev), calls, dev))
    ratios = [t / b for t, b in zip(per_tensor, bare, strict=True)]
    return {"per_tensor_s": min(per_tensor), "bare_op_s": min(bare), "ops": statistics.median(ratios)}


if __name__ == "__main__":
    for master in (True, False):
        r = lab_adamw_host_ops(master)
        print(f"torch {torch.__version__}, {'MasterWeightAdamW' if master else 'AdamW(foreach=False), fp32'}: "
              f"{r['per_tensor_s'] * 1e6:.1f} us per tensor, bare op {r['bare_op_s'] * 1e6:.2f} us, "
              f"ratio {r['ops']:.2f} bare ops per tensor")
