"""torchrun --nproc-per-node 8 -m labkit.intra_layer.multidim: the 3d mode on a torchrun job."""

from __future__ import annotations

from labkit import dist as ldist
from labkit.intra_layer.multidim.runs import run_configs

ldist.main_under_torchrun(run_configs, configs=({"mode": "3d"},), pieces=False)
