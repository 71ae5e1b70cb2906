"""torchrun --nproc-per-node P -m labkit.inter_layer.pipeline --schedule 1f1b ...: one pipeline run."""

from __future__ import annotations

import argparse

from labkit import dist as ldist
from labkit.inter_layer.pipeline.worker import train_pipeline

parser = argparse.ArgumentParser(description="Pipeline-parallel training of the tiny GPT on this torchrun job.")
parser.add_argument("--schedule", default="1f1b")
parser.add_argument("--microbatches", type=int, default=4)
parser.add_argument("--steps", type=int, default=1)
parser.add_argument("--chunks", type=int, default=1, help="v, stages per rank (interleaved only)")
parser.add_argument("--batch-size", type=int, default=8)
a = parser.parse_args()
ldist.main_under_torchrun(train_pipeline, kind=a.schedule, microbatches=a.microbatches, steps=a.steps, v=a.chunks,
                          batch_size=a.batch_size)
