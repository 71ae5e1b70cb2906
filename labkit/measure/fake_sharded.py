"""One GPU's bytes in an FSDP2 or a tensor-parallel layout, at full width, measured beside ``labkit advise``.

``measure_sharded`` builds a transformers model of a config under fake tensors (no weight allocated), shards it
over a fake world of N ranks in this one process (``fake_sharded_step``: torch's ``"fake"`` backend and
``FakeStore``, the approach of torchtitan's memory estimator and ``FSDPMemTracker``), trains one warm-up step so
AdamW's states exist and counts one step of rank 0 with torch's trackers. A fake group computes no data and
every rank of a symmetric layout holds the same shard sizes, so rank 0 stands for every rank.

Layouts:

* ``fsdp``: FSDP2 ``fully_shard`` on every decoder layer and the root, over a data-parallel world of N: the
  layout ``labkit advise`` prices as dp = N with ZeRO-3 (Rajbhandari et al., SC 2020: parameters, gradients and
  optimizer states all divided by N). bf16-mixed is FSDP2's ``MixedPrecisionPolicy``, which keeps fp32 sharded
  parameters and reduces gradients in fp32: the same 16 bytes a parameter as ZeRO's 2 + 2 + 12, split 4 + 4 + 8.
* ``tp``: Megatron's 1-D tensor parallelism (Shoeybi et al. 2019) with DTensor over tp = N, without sequence
  parallelism: q, k, v, gate, up by columns, o, down by rows, the embedding by its hidden columns (torch 2.13's
  DTensor gives a vocabulary-split embedding a full-size gradient: ``fake_sharded_step.shard_tp``) and the
  output layer by columns with a vocab-parallel loss. The norms stay replicated, which the prediction
  (everything / tp) omits.
  fp32 only: the lab's bf16-mixed keeps fp32 master weights in its own optimizer, not wired to DTensor here.

The prediction is ``labkit advise``'s for the same layout (``labkit.advisor.footprint.memory``, rebuilt here from
``labkit.predict.estimate`` and ``labkit.predict.sharded_peak`` because measure sits below advisor; the tests
check the two agree): model states per GPU, Korthikanti et al.'s activations (fused attention), the whole-step
peak. What it does not model is printed as measured and unpredicted: FSDP2's gathered working set (the unsharded
parameters of the layer being computed, the root's, which FSDP2 does not reshard after forward, the all-gather
and reduce-scatter buffers, the unsharded gradients), and cuBLAS's workspaces, which a CPU run cannot hold.

What torch 2.13's fake group cannot trace on the CPU is refused in one line (``UNTRACED``):

* ``pp``: ``torch.distributed.pipelining`` learns its backward shapes from the next stage
  (``PipelineStage._backward_metadata_inference`` -> ``_recv_meta``, stage.py lines 2037 and 1723:
  ``dist.recv_object_list``). A fake group receives no object: on real tensors the size it reads is garbage
  (it asked to allocate 139,927,568,194,912 bytes here, or failed to unpickle), under fake tensors reading it is
  data-dependent (``aten._local_scalar_dense``: ``DataDependentOutputException``). Static shapes do not avoid it:
  with ``input_args`` and ``output_args`` given, whether the pipeline runs static is itself a vote the stages
  pass along the group (``_warmup_forward_vote``, ``_warmup_backward_result``), and a fake group does not carry
  it back. Tried with ``Schedule1F1B`` on 4 fake ranks, real and fake tensors.
* ``cp``: torch's context parallelism swaps the SDPA ops for ring attention through a table
  (``tensor/experimental/_context_parallel/_attention.py`` lines 918-945) that names only the flash, efficient
  and cuDNN kernels, all CUDA's; the CPU's ``aten._scaled_dot_product_flash_attention_for_cpu`` is not in it.
  Read from the source, not run.
"""

from __future__ import annotations

import math
import sys
import warnings
from dataclasses import asdict, dataclass

from labkit.errors import LabkitError, require_choice, require_positive
from labkit.shapes.hf_config import HFModel

LAYOUTS = ("fsdp", "tp")
PRECISIONS = {"fsdp": ("fp32", "bf16-mixed"), "tp": ("fp32",)}
MAX_WORLD = 1024
UNTRACED = {
    "pp": "torch.distributed.pipelining receives its backward shapes from the next stage (recv_object_list), "
          "which a fake group never sends (a data-dependent read under fake tensors)",
    "cp": "torch's context parallelism replaces only CUDA's flash, efficient and cuDNN attention kernels with "
          "ring attention, not the CPU's",
}
CUBLAS = "cuBLAS workspaces (CUDA only, in the prediction)"
HF_ACTS = "activations, transformers' count (measure --full's)"
GATHERED = ("Unsharded Param", "All Gather", "Reduce Scatter", "Unsharded Grad")


def check_layout(spec: HFModel, layout: str, world: int) -> None:
    """One line for a layout the fake step cannot stand one rank for (uneven shards) or does not measure."""
    if layout in UNTRACED:
        raise LabkitError(f"layout {layout!r} cannot be traced on one fake rank: {UNTRACED[layout]}")
    require_choice("layout", layout, LAYOUTS)
    require_positive("world", world)
    if not 2 <= world <= MAX_WORLD:
        raise LabkitError(f"world must be between 2 and {MAX_WORLD} ranks (got {world})")
    sh = spec.shape
    if spec.family == "gpt2":
        raise LabkitError("hf_config must be a Llama, Mistral or Qwen2 config for a sharded step (got gpt2: its "
                          "fused c_attn and Conv1D weights have no column/row plan here)")
    if layout == "tp":
        for name, n in (("heads", sh.heads), ("kv heads", sh.kv_heads), ("ffn", sh.ffn_size), ("vocab", sh.vocab)):
            if n % world:
                raise LabkitError(f"world must divide the model's {name} ({n}) for tp (got {world})")
    else:
        g = math.gcd(sh.hidden, sh.kv_hidden, sh.ffn_size, sh.vocab)
        if g % world:
            raise LabkitError(f"world must divide every parameter's first dimension for fsdp (their gcd is {g}; got "
                              f"{world}): FSDP2 pads uneven shards and one rank would not stand for all")


def predict_layout(spec: HFModel, layout: str, world: int, batch: int, seq: int, precision: str) -> dict[str, float]:
    """``labkit advise``'s bytes per GPU for the layout (``advisor.footprint.memory`` with dp or tp = world)."""
    from labkit.predict.estimate import TrainingSetup, estimate_memory
    from labkit.predict.sharded_peak import ShardedStep, sharded_peak
    from labkit.predict.step_peak import cublas_workspace_bytes

    dp, tp = (world, 1) if layout == "fsdp" else (1, world)
    setup = TrainingSetup(spec.shape, micro_batch=batch, seq=seq, precision=precision, dp=dp, tp=tp,
                          zero_stage=3 if layout == "fsdp" else 0, attention="fused")
    mem = dict(estimate_memory(setup).per_device_bytes)
    step = ShardedStep(spec.shape, batch, seq, mem["parameters"], mem["gradients"], mem["optimizer"],
                       mem["activations"], tp, 1, 1, False, precision)
    mem["total"] = sharded_peak(step).peak
    mem["cublas"] = 2 * cublas_workspace_bytes(9)
    return mem


def _hf_activations(spec: HFModel, batch: int, seq: int, precision: str) -> float:
    """What ``labkit measure --full`` predicts transformers' layers keep (``activation_options``), unsharded."""
    from labkit.predict.activation_options import ActivationOptions, activation_bytes_hf

    e = 4 if precision == "fp32" else 2
    opt = ActivationOptions.for_model(spec, "sdpa", cache=False, act_bytes=e, dropout=0.0, seq=seq)
    per_layer, outside = activation_bytes_hf(spec.shape, seq, batch, opt, e)
    return per_layer * spec.shape.layers + outside


@dataclass
class ShardedReport:
    """One rank's bytes by category, measured beside ``labkit advise``'s (None: not in the prediction)."""

    model: str
    layout: str
    world: int
    setup: dict
    categories: dict[str, tuple[int, float | None]]
    peak: dict
    tracker_at_peak: dict[str, int]
    notes: list[str]

    def to_json(self) -> dict:
        return asdict(self)

    def __str__(self) -> str:
        s = self.setup
        lines = [f"{self.model}: rank 0 of {self.world} ({self.layout}), batch {s['batch']}, seq {s['seq']}, "
                 f"{s['precision']}, fake process group and fake tensors ({s['seconds']:.1f} s)",
                 f"{'per rank':<52}{'measured B':>18}{'predicted B':>18}"]
        for name, (m, p) in [*self.categories.items(), ("peak", (self.peak["measured"], self.peak["predicted"]))]:
            lines.append(f"{name:<52}{m:>18,}{'-' if p is None else f'{p:,.0f}':>18}")
        lines.append(f"peak phase: {self.peak['phase']}; tracker's categories at the peak: "
                     + ", ".join(f"{k} {v:,}" for k, v in self.tracker_at_peak.items()))
        return "\n".join(lines + [f"note: {n}" for n in self.notes])


def _progress(say):
    if say is not None:
        return say
    return lambda what: print(f"labkit measure --full ({what})", file=sys.stderr)


def measure_sharded(config, layout: str = "fsdp", world: int = 8, batch: int = 1, seq: int = 2048,
                    precision: str = "fp32", layers: int | None = None, progress=None) -> ShardedReport:
    """Rank 0's step of ``layout`` over a fake world of ``world`` ranks beside ``labkit advise``'s bytes."""
    import torch

    from labkit.measure.fake_build import check_limits, load
    from labkit.measure.fake_sharded_step import fake_world, shard_fsdp, shard_tp, tracked_step
    from labkit.measure.fake_step import fake_keys, fake_mode
    from labkit.shapes.hf_models import build_model

    require_positive("batch", batch)
    require_positive("seq", seq)
    if layout in LAYOUTS:
        require_choice("precision", precision, PRECISIONS[layout])
    spec = load(config, layers)
    check_layout(spec, layout, world)
    check_limits(spec, batch, seq)
    say = _progress(progress)
    say(f"building and sharding over {world} fake ranks")
    ids = torch.randint(0, spec.shape.vocab, (batch, seq), generator=torch.Generator().manual_seed(0))
    with fake_world(world) as mesh, fake_keys(), fake_mode():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = build_model(spec, "sdpa", device="cpu", dropout=0.0, use_cache=False)
        (shard_fsdp(model, mesh, precision) if layout == "fsdp" else shard_tp(model, mesh))
        say("warm-up step, then the measured step")
        rec = tracked_step(model, ids, layout)
        norms = sum(p.numel() for n, p in model.named_parameters() if "norm" in n) * 4
    return _report(spec, layout, world, batch, seq, precision, rec, norms)


def _report(spec, layout, world, batch, seq, precision, rec, norm_bytes) -> ShardedReport:
    pred = predict_layout(spec, layout, world, batch, seq, precision)
    states = rec.parameters + rec.gradients + rec.optimizer
    cats: dict[str, tuple[int, float | None]] = {
        "parameters": (rec.parameters, pred["parameters"]), "gradients": (rec.gradients, pred["gradients"]),
        "optimizer states": (rec.optimizer, pred["optimizer"]),
        "model states": (states, pred["parameters"] + pred["gradients"] + pred["optimizer"]),
        "activations (alive after forward)": (rec.after_forward.get("Activation", 0), pred["activations"])}
    notes = [f"one rank stands for all {world}: a fake group computes no data and every rank's shards are the same "
             "size", f"AdamW's step counters ({rec.bookkeeping:,} B) are bookkeeping, left out of optimizer states",
             "activations: what forward left alive (torch's tracker) beside Korthikanti et al.'s fused-attention "
             "count, which leaves out what transformers' RMSNorm keeps beside its input (its normalized hidden and "
             "fp32 rsqrt, 2 x (e*s*b*h + 4*s*b) a layer, on every rank under tp) and the fp32 copies outside"]
    if layout == "fsdp":
        cats[HF_ACTS] = (cats["activations (alive after forward)"][0], _hf_activations(spec, batch, seq, precision))
        notes.append(f"{HF_ACTS}: FSDP keeps every activation of the unsharded step; the tracker counts the batch's "
                     "ids as inputs, not activations, and the loss is computed after the root's forward")
        cats["FSDP2 gathered working set at the peak"] = (sum(rec.at_peak.get(k, 0) for k in GATHERED), None)
        notes.append("the gathered working set (unsharded parameters and gradients, all-gather and reduce-scatter "
                     "buffers) is not in labkit advise's ZeRO-3 prediction")
        if precision == "bf16-mixed":
            notes.append("FSDP2's MixedPrecisionPolicy keeps fp32 sharded parameters and gradients (4 + 4 + 8 bytes a "
                         "parameter over N) where ZeRO's bf16-mixed counts 2 + 2 + 12: the model states agree")
    else:
        notes.append(f"the norms ({norm_bytes:,} B) stay replicated on every rank; the prediction divides them by "
                     f"tp, so parameters and gradients are {norm_bytes - norm_bytes // world:,} B above it and "
                     "optimizer states twice that")
    phase = next(ph for ph, b in rec.running_peak.items() if b == rec.peak)
    peak = {"measured": rec.peak, "phase": phase, "running_peak": rec.running_peak,
            "predicted": pred["total"], "cuda_only": {CUBLAS: pred["cublas"]},
            "measured_plus_cuda_only": rec.peak + pred["cublas"]}
    setup = {"batch": batch, "seq": seq, "precision": precision, "layers": spec.shape.layers,
             "params": spec.shape.params, "device": "cpu (fake tensors, fake process group)",
             "seconds": round(rec.seconds, 3)}
    return ShardedReport(spec.shape.name, layout, world, setup, cats, peak, rec.at_peak, notes)
