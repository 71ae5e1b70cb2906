"""The lab's optimizer's host time per parameter tensor, in bare ops: what ``profiles.LAB_ADAMW_HOST_OPS`` stores.

``MasterWeightAdamW.step`` (``labkit.rig.train``) is a Python loop over the parameter tensors: the gradient's
cast to fp32 (``p.grad.float()``), torch's single-tensor AdamW (``foreach=False``: ``_single_tensor_adamw`` in
``torch/optim/adamw.py``, with weight decay 0: the step count's increment, ``lerp_``, ``mul_``, ``addcmul_``,
``sqrt``, the division, ``add_``, ``addcdiv_``) and the copy back (``p.copy_(m)``). On tensors of a few elements
the kernels do next to nothing, so its seconds per tensor are the host's: Python, the dispatcher and each op's
launch. They are measured here in bare ops (``calibrate.in_bare_ops``: rounds alternating the step with one bare op
timed as ``labkit calibrate`` times its ``launch_s``, reported as their ratio); ``labkit bench`` prints them.
"""

from __future__ import annotations

import torch

from labkit.measure.calibrate import in_bare_ops
from labkit.rig.step import optimizer_step
from labkit.rig.train import MasterWeightAdamW


def lab_adamw_host_ops(master_weights: bool = True, tensors: int = 300, numel: int = 8, rounds: int = 7,
                       calls: int = 3000) -> dict[str, float]:
    """Seconds per tensor of the lab's optimizer step over ``tensors`` tensors of ``numel`` elements (after a first
    step that creates AdamW's state), seconds of one bare op, and their ratio (``calibrate.in_bare_ops`` over
    ``rounds``, each bare op the mean of ``calls``). ``master_weights``: bf16-mixed's ``MasterWeightAdamW`` over
    bf16 weights, else fp32's plain ``torch.optim.AdamW(foreach=False)``."""
    dtype = torch.bfloat16 if master_weights else torch.float32
    params = [torch.nn.Parameter(torch.randn(numel, dtype=dtype)) for _ in range(tensors)]
    opt = (MasterWeightAdamW(params, lr=1e-3) if master_weights
           else torch.optim.AdamW(params, lr=1e-3, weight_decay=0.0, foreach=False))
    for p in params:
        p.grad = torch.randn_like(p)

    def step() -> None:  # the lab's one optimizer step (rig.step), gradients kept for the next round
        optimizer_step(opt, zero_grad=False)

    step()
    r = in_bare_ops(step, rounds, calls)
    return {"per_tensor_s": r["fn_s"] / tensors, "bare_op_s": r["bare_op_s"], "ops": r["ops"] / tensors}
