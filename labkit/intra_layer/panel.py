"""The design panel of notebook 03: which tensor-parallel mode, for a device count, a layer size and a link.

Mode (1d, 2d, 2.5d with its depth, 3d), device count, hidden size, batch (tokens of a micro-batch) and
link; it shows one MLP block's bytes per device and communication time for the chosen mode (predicted by
``costs``, the count this lab checked against its own runs) and draws every mode that can run beside it.
An NVLink group larger than its domain (8 GPUs for the catalogue's NVLink GPUs) is costed on the
link between servers (``placement``), and the panel says so.
"""

from __future__ import annotations

import ipywidgets as w
from matplotlib.figure import Figure

from labkit import hardware
from labkit.intra_layer import costs, placement
from labkit.teach import plots
from labkit.teach.widgets import Panel, fit_html


class TensorParallelPanel(Panel):
    """Find the mode with the least communication that still fits your memory."""

    def __init__(self, mode: str = "2d", devices: int = 16, hidden: int = 12288, batch: int = 2048,
                 link: str = "nvlink3", depth: int = 2, inter: str = "ib-hdr") -> None:
        st, cat = self.STYLE, hardware.load_catalogue()
        self.mode = w.Dropdown(options=list(costs.MODES), value=mode, description="mode", style=st)
        self.devices = w.IntText(value=devices, description="devices P", style=st)
        self.depth = w.IntText(value=depth, description="depth d (2.5d)", style=st)
        self.hidden = w.IntText(value=hidden, description="hidden h", style=st)
        self.batch = w.IntText(value=batch, description="tokens b*s", style=st)
        self.link = w.Dropdown(options=cat.link_names(), value=cat.link(link).name, description="link", style=st)
        between = [n for n in cat.link_names() if cat.link(n).kind in ("infiniband", "ethernet")]
        self.inter = w.Dropdown(options=between, value=cat.link(inter).name, description="between servers",
                                style=st)
        self.cost: costs.Cost | None = None
        self._wire([self.mode, self.devices, self.depth, self.hidden, self.batch, self.link, self.inter], columns=2)

    def compute(self) -> tuple[str, list[Figure]]:
        self.cost = None
        cat = hardware.load_catalogue()
        asked, p, h, b = cat.link(self.link.value), self.devices.value, self.hidden.value, self.batch.value
        on_it = [cat.gpu(n) for n in cat.gpu_names() if cat.gpu(n).nvlink == asked.name]
        domain = max(on_it, key=lambda gpu: gpu.nvlink_domain_gpus) if on_it else cat.gpu("A100-80GB")
        where = placement.place(p, asked, domain, cat.link(self.inter.value))
        link = where.used
        depth = self.depth.value if self.mode.value == "2.5d" else 1
        g = costs.check(self.mode.value, p, b, h, 4 * h, depth)
        c = costs.mlp(g, b, h, 4 * h, e=2)
        self.cost = c
        held = c.weight_bytes + c.bias_bytes + c.activation_bytes
        one = costs.single_device("mlp", b, h, 4 * h, e=2)
        one_held = one.weight_bytes + one.bias_bytes + one.activation_bytes
        text = (f"{fit_html(True, g.label)}: {held / 1e6:,.1f} MB per device for one MLP block "
                f"({one_held / held:.1f}x less than one device), communication {1e3 * c.seconds(link):.2f} ms "
                f"over {link.name}: {len(c.calls())} collective calls, {c.messages()} sequential ring messages "
                f"(predicted, 16-bit)")
        if where.spills:
            text += (f"<br>{p} GPUs do not fit one {asked.name} domain of {where.domain}: the group's traffic "
                     f"crosses {link.name}, the link between servers")
        options = [r for r in costs.rank_modes(p, link, b, h, 4 * h) if not r.error]
        bars = plots.mode_bars({r.label: (r.seconds, r.held_bytes) for r in options}, highlight=g.label,
                               title=f"{p} devices over {link.name} (predicted)")
        return text, [bars]
