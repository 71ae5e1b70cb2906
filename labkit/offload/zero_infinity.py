"""ZeRO-Infinity: model states on NVMe as real files, streamed layer by layer with prefetch.

Rajbhandari et al., "ZeRO-Infinity: Breaking the GPU Memory Wall for Extreme Scale Deep
Learning", SC 2021. Model states (16-bit parameters, fp32 master weights, Adam's moments)
live on NVMe; each layer's 16-bit parameters are fetched just before the layer runs and
dropped after it, the next layer's read overlapping this layer's compute; the optimizer
step reads and writes one layer's states at a time. Activations are checkpointed at layer
boundaries (as in the paper) and the layer is recomputed in backward, with its dropout
randomness replayed, so the result equals the in-memory run bit for bit. A group's updated
states are written back on a background thread while the next group computes (a read of a
file still being written waits for it); each step ends with every write done and counted.

Parameter groups: each transformer block is one group, streamed; the embeddings and the
final norm (``outer``, the tied ``wte`` is used at both ends of the model) are fetched once
per step and kept until its end. Files per group: ``p16`` (bf16), ``master``, ``exp_avg``,
``exp_avg_sq`` (fp32), each a flat concatenation of the group's tensors.

Bytes per step, exactly (Psi parameters, Psi_b of them in blocks)::

    read  = 2 Psi (forward) + 2 Psi_b (backward re-fetch) + 12 Psi (optimizer states)
    write = 12 Psi (optimizer states) + 2 Psi (updated 16-bit parameters)

On disk: 14 bytes/param. The paper's 20 bytes/param also counts 16-bit gradients (2) and
fp32 gradients (4); here those live in memory for one group at a time (a group's step runs
as soon as its backward is done), so they never reach the disk. Both accountings, term by
term, are ``labkit.predict.offload_model.ZERO_INFINITY`` (the paper) and ``ZERO_INFINITY_LAB`` (this
run); :func:`io_bytes_per_step` is the latter's NVMe traffic.
"""

from __future__ import annotations

import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

from labkit.errors import LabkitError, require_positive
from labkit.measure.record import Record
from labkit.offload.disk.bandwidth import DiskBandwidth, measure_disk
from labkit.offload.disk.store import DiskStore
from labkit.predict.offload_model import ZERO_INFINITY, ZERO_INFINITY_LAB
from labkit.rig.model import count_parameters
from labkit.rig.step import optimizer_step
from labkit.rig.train import TrainConfig, Trainer

STATE_KINDS = ("master", "exp_avg", "exp_avg_sq")
# 2 + 2 (16-bit p, g) + 4 + 4 + 4 + 4 (fp32 p, m, v, g), Rajbhandari et al. 2021, section 3
PAPER_BYTES_PER_PARAM = int(ZERO_INFINITY.nvme_bytes_per_param)


def io_bytes_per_step(params: int, block_params: int) -> dict[str, int]:
    """Exact bytes this implementation reads and writes per step (``offload_model.ZERO_INFINITY_LAB``)."""
    require_positive("params", params)
    if not 0 <= block_params <= params:
        raise LabkitError(f"block_params must be between 0 and params={params} (got {block_params!r})")
    f = block_params / params
    return {"read": round(ZERO_INFINITY_LAB.nvme_read_bytes_per_param(f) * params),
            "write": round(ZERO_INFINITY_LAB.nvme_write_bytes_per_param(f) * params)}


class _Group:
    """One streamed unit: its parameters, flat sizes, and the Adam step count."""

    def __init__(self, name: str, params: list[nn.Parameter]) -> None:
        self.name = name
        self.params = params
        self.shapes = [p.shape for p in params]
        self.sizes = [p.numel() for p in params]
        self.numel = sum(self.sizes)
        self.step = 0

    def views(self, flat: torch.Tensor) -> list[torch.Tensor]:
        return [t.view(s) for t, s in zip(flat.split(self.sizes), self.shapes, strict=True)]


class ZeroInfinityTrainer:
    """A bf16 TinyGPT whose model states live in a :class:`DiskStore` between uses."""

    def __init__(self, cfg: TrainConfig, store: DiskStore) -> None:
        if cfg.precision != "bf16-mixed":
            raise LabkitError(f"precision must be bf16-mixed for ZeRO-Infinity (got {cfg.precision!r})")
        self.cfg, self.store = cfg, store
        base = Trainer(cfg)  # same seed, init and batches as the in-memory run
        self.model, self.data = base.model, base.data
        m = self.model
        self.blocks = [_Group(f"block{i}", list(b.parameters())) for i, b in enumerate(m.h)]
        seen = {id(p) for g in self.blocks for p in g.params}
        self.outer = _Group("outer", [p for p in m.parameters() if id(p) not in seen])
        self.params = count_parameters(m)
        self.block_params = sum(g.numel for g in self.blocks)
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="labkit-prefetch")
        self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="labkit-writeback")
        self._pending: dict[str, Future] = {}
        for g in [self.outer, *self.blocks]:
            flat16 = torch.cat([p.detach().reshape(-1) for p in g.params])
            store.write(f"{g.name}.p16", flat16)
            store.write(f"{g.name}.master", flat16.float())
            zeros = torch.zeros(g.numel)
            store.write(f"{g.name}.exp_avg", zeros)
            store.write(f"{g.name}.exp_avg_sq", zeros)
            self._release(g)

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
        self._writer.shutdown(wait=True, cancel_futures=True)
        self._pending.clear()

    # ---- background write-back: a group's states go to disk while the next group computes ----
    def _write_back(self, name: str, tensor: torch.Tensor) -> None:
        self._pending[name] = self._writer.submit(self.store.write, name, tensor)

    def _read(self, name: str) -> torch.Tensor:
        """Read ``name`` on the prefetch thread, after any write of it still in flight."""
        pending = self._pending.get(name)
        if pending is not None:
            pending.result()
        return self.store.read(name)

    def flush(self) -> None:
        """Wait for every write in flight; the first failure (e.g. disk full) is raised here."""
        pending, self._pending = list(self._pending.values()), {}
        for f in pending:
            f.exception()
        for f in pending:
            f.result()

    # ---- moving a group's parameters in and out of the "device" ----
    def _prefetch(self, g: _Group) -> Future:
        return self._pool.submit(self._read, f"{g.name}.p16")

    @staticmethod
    def _install(g: _Group, fut: Future) -> None:
        for p, v in zip(g.params, g.views(fut.result()), strict=True):
            p.data = v

    @staticmethod
    def _release(g: _Group) -> None:
        for p in g.params:
            p.data = torch.empty(0, dtype=p.dtype)
            p.grad = None

    @torch.no_grad()
    def _optimizer_step(self, g: _Group, states: list[Future]) -> None:
        """AdamW on the group's fp32 states, read from disk and written back (per-tensor math)."""
        master, exp_avg, exp_avg_sq = (f.result() for f in states)
        mv, av, sv = g.views(master), g.views(exp_avg), g.views(exp_avg_sq)
        opt = torch.optim.AdamW(mv, lr=self.cfg.lr, weight_decay=0.0, foreach=False)
        for p, m, a, s in zip(g.params, mv, av, sv, strict=True):
            m.grad = None if p.grad is None else p.grad.float()
            opt.state[m] = {"step": torch.tensor(float(g.step)), "exp_avg": a, "exp_avg_sq": s}
        optimizer_step(opt, zero_grad=False)
        g.step += 1
        for kind, flat in zip(STATE_KINDS, (master, exp_avg, exp_avg_sq), strict=True):
            self._write_back(f"{g.name}.{kind}", flat)
        self._write_back(f"{g.name}.p16", master.to(torch.bfloat16))

    def _read_states(self, g: _Group) -> list[Future]:
        return [self._pool.submit(self._read, f"{g.name}.{k}") for k in STATE_KINDS]

    def step(self, i: int) -> float:
        """One training step on batch ``i``, streaming every layer from disk and back."""
        m, blocks = self.model, self.blocks
        m.train()
        idx, y = self.data(i)
        pos = torch.arange(idx.size(1))
        rng_start = torch.get_rng_state()
        self._install(self.outer, self._prefetch(self.outer))
        nxt = self._prefetch(blocks[0])
        with torch.no_grad():
            x = m.drop(m.wte(idx) + m.wpe(pos))
        ckpts, rngs = [x], []
        for k, g in enumerate(blocks):
            self._install(g, nxt)
            nxt = self._prefetch(blocks[k + 1] if k + 1 < len(blocks) else blocks[-1])
            rngs.append(torch.get_rng_state())
            with torch.no_grad():
                x = m.h[k](x)
            ckpts.append(x)
            self._release(g)
        x_last = x.detach().requires_grad_(True)
        logits = m.lm_head(m.ln_f(x_last))
        loss = F.cross_entropy(logits.float().view(-1, logits.size(-1)), y.view(-1))
        loss.backward()
        rng_end = torch.get_rng_state()
        grad = x_last.grad
        for k in reversed(range(len(blocks))):
            g = blocks[k]
            self._install(g, nxt)
            states = self._read_states(g)
            if k > 0:
                nxt = self._prefetch(blocks[k - 1])
            torch.set_rng_state(rngs[k])
            xin = ckpts[k].detach().requires_grad_(True)
            m.h[k](xin).backward(grad)
            grad = xin.grad
            self._optimizer_step(g, states)
            self._release(g)
        torch.set_rng_state(rng_start)
        x0 = m.drop(m.wte(idx) + m.wpe(pos))
        x0.backward(grad)
        self._optimizer_step(self.outer, self._read_states(self.outer))
        self._release(self.outer)
        torch.set_rng_state(rng_end)
        self.flush()  # every byte of this step is on disk (and counted) when it returns
        return loss.item()


@dataclass(frozen=True)
class ZeroInfinityRun:
    """Measured bytes and bandwidth of a streamed run, beside the raw disk of the same run."""

    params: int
    block_params: int
    losses: list[float]
    bytes_read: list[int]  # per step
    bytes_written: list[int]
    predicted: dict[str, int]
    raw: DiskBandwidth | None
    achieved_read_bps: float
    achieved_write_bps: float
    method: str
    seconds: float
    final_params: list[torch.Tensor] = field(repr=False)
    padded_read_bytes: int = 0  # bytes moved to and from the device during the steps (O_DIRECT pads to 4 KiB)
    padded_written_bytes: int = 0
    io_busy_seconds: float = 0.0  # wall-clock time with any read or write in flight

    @property
    def records(self) -> tuple[Record, Record]:
        """The last step's bytes read and written beside ``io_bytes_per_step`` (``offload_model.ZERO_INFINITY_LAB``)."""
        source = "io_bytes_per_step: offload_model.ZERO_INFINITY_LAB (Rajbhandari et al. 2021)"
        return (Record("bytes read per step", self.bytes_read[-1], self.predicted["read"], "bytes", source),
                Record("bytes written per step", self.bytes_written[-1], self.predicted["write"], "bytes", source))

    @property
    def combined_ratio(self) -> float | None:
        """Seconds the raw disk would need for the steps' reads and writes, over the seconds the disk was busy.

        The per-direction ratios undercount when reads and writes overlap (each then shares the
        disk with the other); this one charges every busy second once.
        """
        if not self.raw or not self.io_busy_seconds:
            return None
        at_raw = self.padded_read_bytes / self.raw.read_bps + self.padded_written_bytes / self.raw.write_bps
        return at_raw / self.io_busy_seconds

    @property
    def read_ratio(self) -> float | None:
        return self.achieved_read_bps / self.raw.read_bps if self.raw else None

    @property
    def write_ratio(self) -> float | None:
        return self.achieved_write_bps / self.raw.write_bps if self.raw else None


def run_zero_infinity(cfg: TrainConfig, steps: int, root: str | Path | None = None, quota_bytes: int | None = None,
                      measure_raw_bytes: int | None = 64 * 2**20, direct: bool | None = None) -> ZeroInfinityRun:
    """Train ``steps`` steps with states on disk under ``root``; the raw disk is measured first.

    Nothing is left under ``root`` afterwards, also when a step fails (the store is a context
    manager and the prefetch thread is shut down in ``finally``).
    """
    require_positive("steps", steps)
    raw = measure_disk(root, measure_raw_bytes, block=min(8 * 2**20, measure_raw_bytes)) if measure_raw_bytes else None
    with DiskStore(root, quota_bytes=quota_bytes, direct=direct) as store:
        trainer = ZeroInfinityTrainer(cfg, store)
        try:
            c = store.counters
            t_read, t_write, p_read, p_write = c.read_seconds, c.write_seconds, c.padded_read, c.padded_written
            t_busy = c.busy_seconds
            losses, reads, writes = [], [], []
            t0 = time.perf_counter()
            for i in range(steps):
                r0, w0 = c.bytes_read, c.bytes_written
                losses.append(trainer.step(i))
                reads.append(c.bytes_read - r0)
                writes.append(c.bytes_written - w0)
            seconds = time.perf_counter() - t0
            rd = (c.padded_read - p_read) / max(c.read_seconds - t_read, 1e-12)
            wr = (c.padded_written - p_write) / max(c.write_seconds - t_write, 1e-12)
            moved = (c.padded_read - p_read, c.padded_written - p_write, c.busy_seconds - t_busy)
            for g in [trainer.outer, *trainer.blocks]:
                trainer._install(g, trainer._prefetch(g))
            ordered = [p.detach().clone() for p in trainer.model.parameters()]
        finally:
            trainer.close()
        return ZeroInfinityRun(trainer.params, trainer.block_params, losses, reads, writes,
                               io_bytes_per_step(trainer.params, trainer.block_params), raw, rd, wr,
                               store.method, seconds, ordered, *moved)
