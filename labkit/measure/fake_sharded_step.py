"""One rank's step of an FSDP2 or tensor-parallel layout, on a fake process group under fake tensors, tracked.

A fake process group (torch's ``"fake"`` backend with ``FakeStore``, ``torch.testing._internal.distributed.fake_pg``)
runs one rank of a world of N in this process: every collective returns at once with tensors of the right shape
and no data, and ``FakeTensorMode`` gives every tensor a shape and no storage. So rank 0 of a fake world of 8
shards, gathers and reduces exactly as it would on 8 GPUs, and holds the bytes it would hold, while the
host holds almost nothing. In a symmetric layout (every rank holds the same shard sizes: the model's
dimensions divide by N, which ``fake_sharded.check_layout`` requires) one rank stands for all.

The memory is counted by torch's own trackers: ``FSDPMemTracker`` (``torch.distributed._tools.fsdp2_mem_tracker``:
sharded and unsharded parameters, sharded and unsharded gradients, all-gather and reduce-scatter buffers,
activations, temporaries, optimizer states) for FSDP2 and ``MemTracker`` for DTensor tensor parallelism (it lets
DTensor desugar into local ops before counting them). The model states are also counted directly, from each
parameter's local shard, its gradient and its optimizer state, which is what the prediction's categories are.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
import torch.nn.functional as F

from labkit.errors import LabkitError

LAYER_PLAN = {"self_attn.q_proj": "colwise", "self_attn.k_proj": "colwise", "self_attn.v_proj": "colwise",
              "self_attn.o_proj": "rowwise", "mlp.gate_proj": "colwise", "mlp.up_proj": "colwise",
              "mlp.down_proj": "rowwise"}


@contextmanager
def fake_world(world: int) -> Iterator[object]:
    """Rank 0 of a fake process group of ``world`` ranks and its 1-D CPU device mesh, torn down on exit."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if dist.is_initialized():
        raise LabkitError("a process group is already initialized in this process: the sharded fake step makes its "
                          "own fake group (run it in a fresh process)")
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=world)
    try:
        yield init_device_mesh("cpu", (world,))
    finally:
        dist.destroy_process_group()


def _local(t: torch.Tensor) -> torch.Tensor:
    from torch.distributed.tensor import DTensor

    return t._local_tensor if isinstance(t, DTensor) else t


def local_bytes(tensors) -> int:
    """Bytes of the distinct storages behind the local shards of ``tensors`` (tied weights once)."""
    seen: dict[int, int] = {}
    for t in tensors:
        if t is not None:
            st = _local(t).untyped_storage()
            seen[st._cdata] = st.nbytes()
    return sum(seen.values())


def shard_fsdp(model: torch.nn.Module, mesh, precision: str) -> None:
    """FSDP2 as torchtitan applies it: ``fully_shard`` on every decoder layer, then on the root (embedding, final
    norm, output layer). bf16-mixed is FSDP2's ``MixedPrecisionPolicy`` (bf16 compute, fp32 sharded parameters
    and gradient reduction)."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) \
        if precision == "bf16-mixed" else MixedPrecisionPolicy()
    for layer in model.model.layers:
        fully_shard(layer, mesh=mesh, mp_policy=mp)
    fully_shard(model, mesh=mesh, mp_policy=mp)


def shard_tp(model: torch.nn.Module, mesh) -> None:
    """Megatron's 1-D tensor parallelism with DTensor (Shoeybi et al. 2019): q, k, v, gate and up split by
    columns, o and down by rows; the embedding split over the vocabulary and the output layer by columns with
    its logits left sharded for a vocab-parallel loss (``loss_parallel``). The norms stay replicated (Megatron's
    too). The embedding is split by columns (its hidden dimension), not by vocabulary as torchtitan's plan does:
    torch 2.13's DTensor rule for ``aten.embedding_dense_backward`` (``torch/distributed/tensor/_ops/
    _embedding_ops.py``, ``embedding_dense_backward_strategy``) offers a dim-1, a batch and a Partial strategy but
    none sharded on dim 0, so a vocabulary-split embedding gets a full V x h Replicate gradient on every rank
    (measured here: 1,048,576,000 B on Llama-2-70B's widths where its shard is 131,072,000). Each rank holds V*h/tp
    parameters either way."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    styles = {"colwise": ColwiseParallel, "rowwise": RowwiseParallel}
    for layer in model.model.layers:
        parallelize_module(layer, mesh, {name: styles[s]() for name, s in LAYER_PLAN.items()})
    parallelize_module(model, mesh, {"model.embed_tokens": ColwiseParallel(output_layouts=Replicate()),
                                     "lm_head": ColwiseParallel(output_layouts=Shard(-1), use_local_output=False)})


def _vocab_parallel(layout: str):
    from contextlib import nullcontext

    from torch.distributed.tensor.parallel import loss_parallel

    return loss_parallel() if layout == "tp" else nullcontext()


def _loss(logits: torch.Tensor, ids: torch.Tensor, layout: str) -> torch.Tensor:
    """Next-token cross-entropy over fp32 logits (transformers' ``ForCausalLMLoss``), vocab-parallel under tp."""
    with _vocab_parallel(layout):
        return F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), ids[:, 1:].flatten())


@dataclass
class TrackedStep:
    """What one rank held: its model states (local shards), the tracker's categories at its moments, the peak."""

    parameters: int
    gradients: int
    optimizer: int  # AdamW's moments (tensors with a dimension)
    bookkeeping: int  # AdamW's step counters
    after_forward: dict[str, int]  # the tracker's categories after the root module's forward
    at_peak: dict[str, int]  # the tracker's categories at the step's peak
    peak: int
    running_peak: dict[str, int]  # the step's peak so far, read after forward (with the loss), backward, optimizer
    seconds: float
    extra: dict = field(default_factory=dict)


def _snap(snapshot: dict) -> dict[str, int]:
    (dev_snap,) = snapshot.values()
    return {str(getattr(k, "value", k)): int(v) for k, v in dev_snap.items() if v}


def tracked_step(model: torch.nn.Module, ids: torch.Tensor, layout: str) -> TrackedStep:
    """A warm-up step (AdamW's states come to exist), then one step counted by torch's tracker for ``layout``."""
    from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker, _FSDPModState
    from torch.distributed._tools.mem_tracker import MemTracker, _ModState

    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=False)

    peaks: dict[str, int] = {}

    def step(tracker=None) -> None:
        """The step in its three phases, reading the tracker's running peak after each."""
        loss = _loss(model(input_ids=ids, use_cache=False).logits, ids, layout)
        for phase, run in (("forward", lambda: None), ("backward", loss.backward), ("optimizer", opt.step)):
            with _vocab_parallel(layout):
                run()
            if tracker is not None:
                (snap,) = tracker.get_tracker_snapshot("peak").values()
                peaks[phase] = int(snap["Total"])

    step()
    opt.zero_grad(set_to_none=True)
    t0 = time.perf_counter()
    if layout == "fsdp":
        tracker, state = FSDPMemTracker(model, opt), _FSDPModState.AFT_POST_FW
        tracker.track_inputs((ids,))
    else:
        tracker, state = MemTracker(), _ModState.POST_FW
        tracker.track_external(model, opt)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # ModTracker's "module hierarchy ... messed up" on the loss outside modules
        with tracker:
            step(tracker)
    seconds = time.perf_counter() - t0
    after = _snap(tracker.memory_tracking[model].snapshots[state][-1])
    at_peak = _snap(tracker.get_tracker_snapshot("peak"))
    peak = at_peak.pop("Total")
    params = list(model.parameters())
    moments = [t for s in opt.state.values() for t in s.values() if torch.is_tensor(t)]
    return TrackedStep(local_bytes(params), local_bytes(p.grad for p in params),
                       local_bytes(t for t in moments if t.dim()), local_bytes(t for t in moments if not t.dim()),
                       after, at_peak, peak, peaks, seconds)
