"""``labkit measure --full --fsdp N`` / ``--tp N``: one rank's step of an FSDP2 or tensor-parallel layout over a
fake world of N ranks (``labkit.measure.fake_sharded``), beside ``labkit advise``'s bytes for that layout."""

from __future__ import annotations

import argparse
import json

from labkit.cli.common import parse_int
from labkit.errors import LabkitError

NOT_SHARDED = ("finetune", "snapshot", "recompute", "device", "calibration", "dropout")


def add_sharded_flags(p: argparse.ArgumentParser) -> None:
    """``--fsdp N`` and ``--tp N`` (each needs ``--full``)."""
    p.add_argument("--fsdp", help="with --full: one rank of FSDP2 (fully_shard per layer) over N fake ranks, beside "
                   "labkit advise's dp=N ZeRO-3 bytes")
    p.add_argument("--tp", help="with --full: one rank of DTensor tensor parallelism (Megatron's column/row plan) "
                   "over N fake ranks, beside labkit advise's tp=N bytes")


def wants_sharded(a: argparse.Namespace) -> bool:
    return getattr(a, "fsdp", None) is not None or getattr(a, "tp", None) is not None


def run_sharded(a: argparse.Namespace, batch: int, seq: int, layers: int | None) -> int:
    """Check the flags, measure the rank, print it (``--json``)."""
    from labkit.measure.fake_sharded import measure_sharded

    if a.fsdp is not None and a.tp is not None:
        raise LabkitError("fsdp and tp cannot be given together: the sharded fake step measures one layout")
    flag = "fsdp" if a.fsdp is not None else "tp"
    if not a.full:
        raise LabkitError(f"{flag} needs --full: the sharded step runs on a fake process group under fake tensors")
    if a.hf_config is None:
        raise LabkitError(f"{flag} needs --hf-config: the fake path builds a transformers model from its config")
    for other in NOT_SHARDED:
        if getattr(a, other, None) not in (None, False):
            raise LabkitError(f"{other} does not apply with --{flag}: the sharded step measures full training")
    if a.cache:
        raise LabkitError(f"cache does not apply with --{flag}: the sharded step trains with use_cache=False")
    world = parse_int(flag, getattr(a, flag))
    report = measure_sharded(a.hf_config, flag, world, batch, seq, a.precision, layers)
    print(json.dumps(report.to_json(), indent=2) if a.json else str(report))
    return 0
