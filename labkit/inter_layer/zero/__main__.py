"""torchrun --nproc-per-node 2 -m labkit.inter_layer.zero --strategy zero3 --steps 2: one ZeRO-DP run."""

from __future__ import annotations

import argparse

from labkit import dist as ldist
from labkit.inter_layer.zero.engines import STRATEGIES
from labkit.inter_layer.zero.worker import train_rank

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--strategy", default="zero3", choices=list(STRATEGIES))
parser.add_argument("--steps", type=int, default=5)
a = parser.parse_args()
ldist.main_under_torchrun(train_rank, strategy=a.strategy, steps=a.steps)
