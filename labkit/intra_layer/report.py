"""Text tables of notebook 03: tensor parallelism measured beside predicted, and which mode wins at scale.

Formatting only: the measurements come from ``megatron`` and ``multidim``, the predictions from
``labkit.predict.estimate`` (Korthikanti et al.) and ``costs`` (this lab's count of its own implementation).
"""

from __future__ import annotations

from dataclasses import dataclass

from labkit.hardware import Device, Link
from labkit.intra_layer import costs, megatron, multidim, placement
from labkit.predict.tables import text_table


def megatron_table(results: dict[str, list[megatron.RankResult]], rank: int = 0) -> str:
    """Parameter bytes, activation bytes of layer 0 and collectives per kind for one rank of each run."""
    rows = []
    for label, ranks in results.items():
        for r in megatron.compare([ranks[rank]]):
            if r.name.startswith("activation bytes, layer") and not r.name.endswith(" 0"):
                continue
            paper = "-" if r.paper is None else f"{r.paper:,.0f}"
            rows.append([label, r.name, f"{r.measured:,.0f}", f"{r.predicted:,.0f}", paper])
    return text_table(["run", f"rank {rank}", "measured", "predicted", "paper"], rows)


def worst_megatron_error(results: dict[str, list[megatron.RankResult]]) -> float:
    """Largest |measured - predicted| over every rank and row (0 when the count is exact)."""
    return max(abs(r.measured - r.predicted) for ranks in results.values() for r in megatron.compare(ranks))


def multidim_table(runs: list[list[dict]], rank: int = 0) -> str:
    """Bytes held and bytes moved per phase, one rank of each mode: measured beside ``costs``."""
    rows = []
    for ranks in runs:
        r, c = ranks[rank], multidim.predicted(ranks[rank])
        label = costs.grid(r["mode"], r["world_size"], r["depth"]).label
        moved = {ph: sum(x[2] for x in r[ph]) for ph in ("forward", "backward")}
        rows.append([label, r["weight_bytes"], c.weight_bytes, r["activation_bytes"], c.activation_bytes,
                     moved["forward"] + moved["backward"],
                     sum(x.nbytes for x in c.calls()), len(r["forward"]) + len(r["backward"])])
    return text_table(["mode (P)", "weights (B)", "predicted", "activations (B)", "predicted", "moved (B)",
                       "predicted", "calls"], rows)


def worst_multidim_error(runs: list[list[dict]]) -> int:
    return max(abs(row.measured - row.predicted) for ranks in runs for row in multidim.compare(ranks))


@dataclass(frozen=True)
class Winner:
    """One cell of :func:`winners`: the fastest mode for ``devices`` on ``link`` (the one asked for)."""

    devices: int
    link: str
    mode: str  # costs.grid(...).mode of the fastest mode ("1d", "2d", "2.5d", "3d"); "" where none runs
    label: str
    via: str  # the link the group really crosses
    spills: bool  # the group is larger than the NVLink domain, so it crosses ``via`` instead of ``link``
    comm_s: float
    compute_s: float

    @property
    def share(self) -> float:
        """Communication over compute (1.0: the GPUs wait as long as they compute)."""
        return self.comm_s / self.compute_s


def winner_cells(device_counts: list[int], links: list[Link], batch: int, hidden: int, ffn: int, gpu: Device,
                 inter: Link | None = None, efficiency: float = 0.5) -> list[Winner]:
    """The cells of :func:`winners`, as data (predicted): one per device count and link."""
    cells = []
    for p in device_counts:
        flops = 3 * 2 * 2 * batch * hidden * ffn / p  # two matrix multiplies, forward + backward (2x)
        compute = flops / (gpu.peak_flops["bf16"] * efficiency)
        for link in links:
            where = placement.place(p, link, gpu, inter or link)
            best = costs.rank_modes(p, where.used, batch, hidden, ffn)[0]
            mode = "" if best.error else best.label.split(" ")[0]
            cells.append(Winner(p, link.name, mode, best.label, where.used.name, where.spills, best.seconds, compute))
    return cells


def winners(device_counts: list[int], links: list[Link], batch: int, hidden: int, ffn: int, gpu: Device,
            inter: Link | None = None, efficiency: float = 0.5) -> str:
    """For each device count: compute time of one MLP block per device, and per link the fastest mode's
    communication time and its share of compute (predicted). Communication that exceeds compute cannot be
    hidden behind it. A group larger than ``gpu``'s NVLink domain is costed on ``inter`` (``placement``):
    the cell names the link it really crosses."""
    cells = winner_cells(device_counts, links, batch, hidden, ffn, gpu, inter, efficiency)
    rows = []
    for k, p in enumerate(device_counts):
        mine = cells[k * len(links):(k + 1) * len(links)]
        row: list[object] = [p, f"{1e3 * mine[0].compute_s:.2f} ms"]
        for c in mine:
            via = f" on {c.via}" if c.spills else ""
            row.append(f"{c.label}{via}: {1e3 * c.comm_s:.2f} ms ({100 * c.share:.0f}%)" if c.mode else "-")
        rows.append(row)
    return text_table(["devices", f"compute on {gpu.name}", *(f"comm. over {li.name} (% of compute)" for li in links)],
                      rows)


def multidim_calls(runs: list[list[dict]], rank: int = 0) -> dict[str, int]:
    """Collective calls of one rank's forward and backward, by mode label (the ``calls`` column)."""
    return {costs.grid(r["mode"], r["world_size"], r["depth"]).label: len(r["forward"]) + len(r["backward"])
            for r in (ranks[rank] for ranks in runs)}


def megatron_max_error(results: dict[str, list[megatron.RankResult]], reference: dict) -> float:
    """Largest absolute difference of any rank's logits or gradients from the single-process model."""
    worst = 0.0
    for ranks in results.values():
        for r in ranks:
            worst = max(worst, float((r.logits - reference["logits"]).abs().max()))
            worst = max(worst, *(float((r.grads[k] - g).abs().max()) for k, g in reference["grads"].items()))
    return worst


def published_table(cases: list[tuple[str, int, int]], batch: int = 64, hidden: int = 64, ffn: int = 64) -> str:
    """Memory per device relative to one device: this implementation (``costs``) beside Colossal-AI's table."""
    rows = []
    for mode, p, depth in cases:
        mine, table = costs.ratios(mode, p, batch, hidden, ffn, depth), costs.published(mode, p, depth)
        label = costs.grid(mode, p, depth).label
        rows.append([label, str(mine["parameters"]), str(table["parameters"]), str(mine["activations"]),
                     str(table["activations"])])
    return text_table(["mode", "weights (ours)", "(published)", "activations (ours)", "(published)"], rows)
