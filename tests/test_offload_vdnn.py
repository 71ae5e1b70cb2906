"""vDNN offload to DRAM and disk: bit-identical gradients, exact bytes, clear errors, no files left."""

import errno
import os
import threading
import time

import pytest
import torch

from labkit.errors import LabkitError
from labkit.offload.trace import trace_step
from labkit.offload.vdnn import (
    OffloadDiskFull,
    Offloader,
    OffloadError,
    OffloadPolicy,
    offloaded_forward_backward,
    offloaded_step,
    predict_vdnn,
    stall_seconds,
    timed,
)
from labkit.rig.model import GPTConfig
from labkit.rig.train import TrainConfig, Trainer


def _cfg(precision="fp32"):
    model = GPTConfig(vocab_size=35, seq_len=32, n_layer=2, n_head=4, d_model=32)
    return TrainConfig(model=model, batch_size=4, precision=precision)


def _plain(cfg, steps):
    t = Trainer(cfg)
    losses = []
    for i in range(steps):
        torch.manual_seed(100 + i)
        loss = t.forward_backward(i)
        losses.append(loss.detach())
        grads = [p.grad.clone() for p in t.model.parameters()]
        t.optimizer.step()
        t.optimizer.zero_grad(set_to_none=True)
    return losses, grads


def _offloaded(cfg, steps, store, policy=None, tmp=None):
    trace = trace_step(Trainer(cfg))
    t = Trainer(cfg)
    losses = []
    with Offloader(t.model, store, policy=policy, trace=trace, root=tmp) as off:
        for i in range(steps):
            torch.manual_seed(100 + i)
            losses.append(offloaded_forward_backward(t, off, i))
            grads = [p.grad.clone() for p in t.model.parameters()]
            t.optimizer.step()
            t.optimizer.zero_grad(set_to_none=True)
        folder = off.dir
    return losses, grads, off, trace, folder


@pytest.mark.parametrize("precision", ["fp32", "bf16-mixed"])
@pytest.mark.parametrize("store", ["dram", "disk"])
def test_gradients_and_losses_are_bit_identical(precision, store, tmp_path):
    cfg = _cfg(precision)
    ref_losses, ref_grads = _plain(cfg, 2)
    (losses, grads, off, trace, folder), seconds = timed(_offloaded, cfg, 2, store, None, tmp_path)
    print(f"{precision} {store}: {seconds:.3f} s, stalls {off.stats.stalls}, peak {off.peak:,} B")
    assert all(torch.equal(a, b) for a, b in zip(ref_losses, losses, strict=True))
    assert all(torch.equal(a, b) for a, b in zip(ref_grads, grads, strict=True))
    assert off.stats.bytes_offloaded == 2 * trace.total_bytes  # policy "all", two steps
    assert off.stats.bytes_written == off.stats.bytes_read == off.stats.bytes_offloaded
    assert off.stats.stalls + off.stats.in_time == off.stats.tensors_offloaded
    assert folder is None if store == "dram" else not folder.exists()
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("policy", [
    OffloadPolicy("largest-k", k=3),
    OffloadPolicy("modules", modules=("*.attn.core.softmax",)),
    OffloadPolicy("conv-like"),
    OffloadPolicy("all", min_bytes=10_000),
], ids=lambda p: p.kind)
def test_policy_offloads_exactly_its_bytes(policy):
    cfg = _cfg()
    _, ref_grads = _plain(cfg, 1)
    _, grads, off, trace, _ = _offloaded(cfg, 1, "dram", policy)
    chosen = policy.select(trace)
    assert chosen and len(chosen) < len(trace.entries)
    assert sorted(off.stats.offloaded_indices) == sorted(chosen)
    assert off.stats.bytes_offloaded == sum(trace.entries[i].nbytes for i in chosen)
    assert all(torch.equal(a, b) for a, b in zip(ref_grads, grads, strict=True))
    if policy.kind == "modules":
        assert {trace.entries[i].module for i in chosen} == {"h.0.attn.core.softmax", "h.1.attn.core.softmax"}


def test_offload_lowers_the_peak():
    cfg = _cfg()
    trace = trace_step(Trainer(cfg))
    t = Trainer(cfg)
    with Offloader(t.model, "dram", trace=trace) as off:
        offloaded_step(t, off)
    plain = off.states + trace.total_bytes
    print(f"peak {plain:,} B plain, {off.peak:,} B offloaded")
    assert off.peak < plain


@pytest.mark.parametrize("damage", ["missing", "truncated"])
def test_damaged_file_raises_naming_file_and_tensor(damage, tmp_path):
    cfg = _cfg()
    t = Trainer(cfg)
    x, y = t.data(0)
    with pytest.raises(OffloadError) as info, Offloader(t.model, "disk", root=tmp_path) as off:
        off.begin_step(x, y)
        _, loss = t.model(x, y)
        slot = next(s for s in off.slots.values() if s.module == "h.1.mlp.act")
        path = str(slot.path)
        if damage == "missing":
            os.remove(path)
        else:
            with open(path, "r+b") as f:
                f.truncate(slot.nbytes // 2)
        off.begin_backward()
        try:
            loss.backward()
        finally:
            off.end_step()
    msg = str(info.value)
    assert path in msg and "h.1.mlp.act" in msg and damage in msg
    assert list(tmp_path.iterdir()) == []


def test_full_disk_is_a_clear_error_and_leaves_nothing(tmp_path):
    t = Trainer(_cfg())
    with pytest.raises(OffloadDiskFull, match="quota of 50,000 bytes") as info:
        with Offloader(t.model, "disk", root=tmp_path, quota_bytes=50_000) as off:
            offloaded_step(t, off)
    assert "saved tensor #" in str(info.value)
    assert list(tmp_path.iterdir()) == []


def test_bad_policies_are_refused():
    with pytest.raises(LabkitError, match="policy must be one of"):
        OffloadPolicy("some")
    with pytest.raises(LabkitError, match="needs the trace"):
        Offloader(Trainer(_cfg()).model, policy=OffloadPolicy("largest-k", k=2))
    with pytest.raises(LabkitError, match="store must be one of"):
        Offloader(Trainer(_cfg()).model, store="tape")


def test_prediction_on_a100_over_pcie4():
    fast = predict_vdnn(1e6, 1e12, n_layers=4, gpu="A100-80GB", efficiency=0.5)
    assert fast.streams == ["compute", "d2h", "h2d"]
    assert stall_seconds(fast) == pytest.approx(0.0, abs=1e-12)
    slow = predict_vdnn(1e10, 1e12, n_layers=4, gpu="A100-80GB", efficiency=0.5)
    assert stall_seconds(slow) > 0.1
    assert slow.busy("compute") == pytest.approx(fast.busy("compute"))


def _prefetch_threads():
    return [t for t in threading.enumerate() if t.name == "labkit-vdnn-prefetch"]


@pytest.mark.parametrize("where", ["prefetch-thread", "third-read", "prefetch-thread-bug"])
def test_read_error_in_backward_is_clear_stops_the_prefetcher_and_leaves_nothing(where, tmp_path, monkeypatch):
    cfg = _cfg()
    trace = trace_step(Trainer(cfg))
    t = Trainer(cfg)
    real, calls, uncaught = os.preadv, [], []

    def failing_disk(*args):  # EIO, as a disk that fails a read does
        calls.append(threading.current_thread().name)
        on_prefetcher = calls[-1] == "labkit-vdnn-prefetch" and calls.count("labkit-vdnn-prefetch") == 1
        if where == "prefetch-thread-bug" and on_prefetcher:
            raise RuntimeError("not an OSError")  # must neither hang backward nor escape as a thread's traceback
        if (where == "prefetch-thread" and on_prefetcher) or (where == "third-read" and len(calls) == 3):
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        return real(*args)

    monkeypatch.setattr(threading, "excepthook", uncaught.append)
    with Offloader(t.model, "disk", trace=trace, root=tmp_path) as off:
        start = off.begin_backward

        def begin_backward():  # the prefetcher claims its first tensors before backward starts
            start()
            deadline = time.monotonic() + 10
            while all(s.state == "pending" for s in off.slots.values()) and time.monotonic() < deadline:
                time.sleep(0.001)

        monkeypatch.setattr(off, "begin_backward", begin_backward)
        monkeypatch.setattr(os, "preadv", failing_disk)
        with pytest.raises(OffloadError) as info:
            offloaded_step(t, off)
        monkeypatch.setattr(os, "preadv", real)
        assert off._thread is None and _prefetch_threads() == []
        assert off.dir is not None and list(off.dir.iterdir()) == []  # no offload file outlives the failed step
        t.optimizer.zero_grad(set_to_none=True)
        assert offloaded_step(t, off) > 0  # the offloader recovers for the next step
    msg = str(info.value)
    print(msg)
    reason = "RuntimeError: not an OSError" if where.endswith("bug") else "[Errno 5] Input/output error"
    assert reason in msg and "saved tensor #" in msg and str(tmp_path) in msg
    if where.startswith("prefetch-thread"):
        assert "labkit-vdnn-prefetch" in calls
    assert uncaught == []  # reported by the step, not as a traceback from a thread
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("when", ["before-its-read", "during-its-read"])
def test_file_truncated_while_backward_runs(when, tmp_path, monkeypatch):
    t = Trainer(_cfg())
    real, calls = os.preadv, []
    with pytest.raises(OffloadError) as info, Offloader(t.model, "disk", root=tmp_path, lookahead=1) as off:

        def truncating_disk(fd, buffers, offset):  # cuts the last tensor backward needs, once backward reads
            calls.append(os.readlink(f"/proc/self/fd/{fd}"))
            victim = off.slots[off.by_index[min(off.by_index)]]
            if (when == "before-its-read" and len(calls) == 2) or (when == "during-its-read"
                                                                   and calls[-1] == str(victim.path)):
                os.truncate(victim.path, victim.nbytes // 2)
                monkeypatch.setitem(info_box, "victim", victim)
            return real(fd, buffers, offset)

        info_box: dict = {}
        monkeypatch.setattr(os, "preadv", truncating_disk)
        offloaded_step(t, off)
    victim = info_box["victim"]
    msg = str(info.value)
    assert str(victim.path) in msg and victim.module in msg and "truncated" in msg
    assert _prefetch_threads() == []
    assert list(tmp_path.iterdir()) == []
