"""``labkit hardware``: the catalogue as a table or JSON."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from typing import Any

from labkit.cli.common import table
from labkit.hardware import GB, load_catalogue


def hardware_json() -> dict[str, Any]:
    cat = load_catalogue()
    return {"gpus": [asdict(g) for g in cat.gpus], "tiers": [asdict(t) for t in cat.tiers],
            "links": [asdict(li) for li in cat.links]}  # fmt: skip


def format_hardware() -> str:
    cat = load_catalogue()
    gpus = [[g.name, f"{g.memory_bytes / GB:.1f}", f"{g.memory_bandwidth / 1e12:.2f}", g.nvlink or "none",
             g.pcie, f"{g.tdp_watts:.0f}"] for g in cat.gpus]  # fmt: skip
    tiers = [[t.name, t.kind, f"{t.capacity_bytes / GB:,.0f}", f"{t.read_bandwidth / GB:.2f}",
              f"{t.write_bandwidth / GB:.2f}", f"{t.latency_s * 1e6:g}", f"{t.price_usd_per_gb:g}"]
             for t in cat.tiers]  # fmt: skip
    links = [[li.name, li.kind, f"{li.bandwidth / GB:.1f}", f"{li.latency_s * 1e6:g}"] for li in cat.links]
    return "\n\n".join([
        "GPUs\n" + table(["name", "memory GB", "bandwidth TB/s", "NVLink", "PCIe", "TDP W"], gpus),
        "Memory and storage tiers\n" + table(
            ["name", "kind", "capacity GB", "read GB/s", "write GB/s", "latency us", "USD/GB"], tiers),
        "Links\n" + table(["name", "kind", "bandwidth GB/s (per direction)", "latency us"], links),
        "GB = 1e9 bytes, TB = 1e12 bytes; figures and sources in datasets/hardware.toml",
    ])  # fmt: skip


def register(sub: argparse._SubParsersAction) -> None:
    hw = sub.add_parser("hardware", help="the hardware catalogue")
    hw.add_argument("--json", action="store_true")
    hw.set_defaults(run=run)


def run(a: argparse.Namespace) -> int:
    print(json.dumps(hardware_json(), indent=2) if a.json else format_hardware())
    return 0
