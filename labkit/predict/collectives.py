"""Seconds of a collective over a ring of GPUs: the one cost model every topic and the advisor use.

A collective over g GPUs runs the long-vector ring algorithm (Chan et al., "Collective
communication: theory, practice, and experience", 2007): an all-gather or a reduce-scatter of n
bytes in all is g - 1 messages of n/g; an all-reduce (reduce-scatter, then all-gather), a broadcast
(scatter, then all-gather, van de Geijn's) and a reduce (reduce-scatter, then gather) are 2 (g - 1)
messages of n/g. Each message costs latency + bytes / bandwidth (the alpha-beta model), so an
all-reduce takes 2 (g-1) alpha + 2 (g-1)/g n / B.

Two forms of B, named, because the notebooks teach the first and plans need the second:

* ``"textbook"``: B is the link's nominal per-direction bandwidth (the alpha-beta model as taught);
* ``"bus"`` (the default): B is the bus bandwidth NCCL reaches, the link's bandwidth times
  ``BUS_EFFICIENCY`` of its kind: 200/300 on NVLink (about 200 GB/s all-reduce bus bandwidth on 8
  A100-SXM4-80GB, whose per-direction NVLink is 300 GB/s: github.com/NVIDIA/nccl-tests issue 149),
  0.848 between hosts (84.8 of 100 GB/s on 3 nodes of A100 with 4 HDR InfiniBand ports each:
  nccl-tests issue 119) and on PCIe (no published figure there: the network's, an assumption).

NCCL's bus bandwidth is defined so that it compares with the link's rate whatever g is (nccl-tests,
doc/PERFORMANCE.md: busbw = algbw x 2 (g-1)/g for an all-reduce), which is what lets one efficiency
per link kind stand for every group size.

Between nodes, NCCL runs one ring channel per network port and spreads them over the node's
ports, so a group that holds k GPUs of each node moves its bytes through min(ports, k) ports at
once (:func:`node_link`): the 84.8 GB/s of nccl-tests issue 119 is 0.848 of four HDR ports'
aggregate, not of one. One GPU per node gets one port. The ring also crosses the node's NVLink,
so it never runs faster than the NVLink bus bandwidth.
"""

from __future__ import annotations

from dataclasses import replace

from labkit.errors import require_choice, require_positive
from labkit.hardware import Link

KINDS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce")
FORMS = ("bus", "textbook")
DEFAULT_FORM = "bus"
NETWORK_BUS_EFFICIENCY = 0.848
BUS_EFFICIENCY = {"nvlink": 200 / 300, "infiniband": NETWORK_BUS_EFFICIENCY, "ethernet": NETWORK_BUS_EFFICIENCY,
                  "pcie": NETWORK_BUS_EFFICIENCY}
HALF_RING = ("all_gather", "reduce_scatter")


def messages(kind: str, group: int) -> int:
    """Sequential ring messages of one collective over ``group`` GPUs (module text)."""
    require_choice("kind", kind, KINDS)
    return max(0, group - 1) * (1 if kind in HALF_RING else 2)


def bandwidth(link: Link, form: str = DEFAULT_FORM) -> float:
    """Bytes per second one ring step moves on ``link``: nominal (textbook) or NCCL's bus bandwidth (bus)."""
    require_choice("form", form, FORMS)
    return link.bandwidth * (BUS_EFFICIENCY.get(link.kind, NETWORK_BUS_EFFICIENCY) if form == "bus" else 1.0)


def seconds(kind: str, nbytes: float, group: int, link: Link, form: str = DEFAULT_FORM) -> float:
    """One collective of ``kind`` covering ``nbytes`` (the whole tensor) over ``group`` GPUs on ``link``.

    A group of one GPU, or nothing to move, costs nothing.
    """
    k = messages(kind, group)
    if k == 0 or nbytes <= 0:
        return 0.0
    return k * (link.latency_s + nbytes / group / bandwidth(link, form))


def all_reduce(nbytes: float, group: int, link: Link, form: str = DEFAULT_FORM) -> float:
    """Ring all-reduce: 2 (g-1) latencies + 2 (g-1)/g x bytes / bandwidth."""
    return seconds("all_reduce", nbytes, group, link, form)


def all_gather(nbytes: float, group: int, link: Link, form: str = DEFAULT_FORM) -> float:
    """Ring all-gather of ``nbytes`` in all (the gathered output): half an all-reduce."""
    return seconds("all_gather", nbytes, group, link, form)


def reduce_scatter(nbytes: float, group: int, link: Link, form: str = DEFAULT_FORM) -> float:
    """Ring reduce-scatter of ``nbytes`` in all (the input): half an all-reduce."""
    return seconds("reduce_scatter", nbytes, group, link, form)


def wire_bytes(kind: str, nbytes: float, group: int) -> float:
    """Bytes one GPU sends (and as many it receives) in the ring: messages x n/g."""
    return messages(kind, group) * nbytes / group if group > 0 else 0.0


def node_link(network: Link, ports: int, intra: Link | None = None) -> Link:
    """The link a ring sees between nodes when ``ports`` ports of each node carry it (module text): their
    aggregate bandwidth, capped so that its bus bandwidth is no more than ``intra``'s (the ring crosses both)."""
    require_positive("ports", ports)
    bw = ports * network.bandwidth
    if intra is not None:
        bw = min(bw, bandwidth(intra) / (bandwidth(network) / network.bandwidth))
    return replace(network, name=f"{ports} x {network.name}", bandwidth=bw)
