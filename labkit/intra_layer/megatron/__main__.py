"""torchrun --nproc-per-node 2 -m labkit.intra_layer.megatron --sp: one tensor-parallel run."""

from __future__ import annotations

import argparse

from labkit import dist as ldist
from labkit.intra_layer.megatron.worker import train_tp

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--sp", action="store_true", help="sequence parallelism too")
parser.add_argument("--steps", type=int, default=1)
a = parser.parse_args()
ldist.main_under_torchrun(train_tp, sp=a.sp, steps=a.steps)
