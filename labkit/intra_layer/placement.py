"""Which wire a tensor-parallel group really uses: NVLink inside one domain, the inter-node link beyond it.

An NVLink (NVSwitch) domain joins a fixed number of GPUs: 8 in a DGX A100 or DGX H100 server
(``Device.nvlink_domain_gpus``, from the datasheets in ``datasets/hardware.toml``). A group of more
GPUs spans servers, and the GPUs of different servers talk over InfiniBand (one HDR port per A100 in a
DGX A100). The ring algorithm of ``costs`` moves its messages around the ring in lock step, so every
step waits for the slowest hop: once a group leaves its domain, each message goes at the inter-node
link's speed. That is the model here: a group of ``world_size`` GPUs on an NVLink ``link`` uses it
only while ``world_size <= domain``; beyond, the whole group is costed on ``inter``. Hierarchical
collectives (NCCL's tree, or an intra-node reduce before the inter-node ring) can do better than this
flat ring; this lab does not model them.

Narayanan et al., "Efficient Large-Scale Language Model Training on GPU Clusters Using Megatron-LM",
SC 2021, section 3.2, Takeaway #1, draws the same line: tensor parallelism up to the number of GPUs in
a server, pipeline parallelism across servers.
"""

from __future__ import annotations

from dataclasses import dataclass

from labkit.errors import require_positive
from labkit.hardware import Device, Link


@dataclass(frozen=True)
class Placement:
    """A group of ``world_size`` GPUs: the link it was asked for, the link it crosses, and why."""

    world_size: int
    asked: Link
    used: Link
    domain: int

    @property
    def spills(self) -> bool:
        """True when the group is larger than the NVLink domain and crosses ``used`` (the inter-node link)."""
        return self.used is not self.asked

    @property
    def label(self) -> str:
        if not self.spills:
            return self.used.name
        return f"{self.used.name} (>{self.domain} GPUs)"


def place(world_size: int, link: Link, gpu: Device, inter: Link) -> Placement:
    """The link a ``world_size``-GPU group on ``link`` crosses: ``link`` itself unless it is NVLink and the
    group outgrows ``gpu``'s NVLink domain; then ``inter``. PCIe and InfiniBand are taken as asked."""
    require_positive("world_size", world_size)
    domain = gpu.nvlink_domain_gpus
    if link.kind == "nvlink" and world_size > domain:
        return Placement(world_size, link, inter, domain)
    return Placement(world_size, link, link, domain)
