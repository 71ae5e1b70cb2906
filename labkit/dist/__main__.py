"""``torchrun --nproc-per-node N -m labkit.dist``: a smoke test of the group (an all-reduce on every rank)."""

from labkit.dist import main_under_torchrun
from labkit.dist.workers import all_reduce_demo

main_under_torchrun(all_reduce_demo)
