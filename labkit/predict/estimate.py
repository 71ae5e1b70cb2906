"""The analytic model: memory, FLOPs and communication of a training step.

Formulas and where they come from:

* model states: Rajbhandari et al., "ZeRO", SC 2020: (P + G + K) * Psi bytes per
  device, with optimizer states, then gradients, then parameters divided by the
  data-parallel degree Nd in stages 1, 2, 3;
* activations: Korthikanti et al., "Reducing Activation Recomputation in Large
  Transformer Models", 2022, section 4: s*b*h*(34 + 5*a*s/h) bytes per layer with
  16-bit activations and 1-byte dropout masks, with their tensor-parallel,
  sequence-parallel and recompute variants. The lab writes each term with the
  element size e and mask size m, so the same model predicts an fp32 CPU run:
  s*b*h*(16e + 2m) + a*s^2*b*(2e + m), which is 34 and 5 at e = 2, m = 1;
* FLOPs: Korthikanti et al., "Reducing Activation Recomputation in Large Transformer
  Models", 2022: 72*B*s*L*h^2*(1 + s/(6h) + V/(12*L*h)) per step without recompute
  (Narayanan et al., SC 2021, give the 96*... form, which includes full recompute),
  counted here matrix multiply by matrix multiply;
* pipeline in-flight micro-batches: Narayanan et al. 2021 (1F1B keeps at most p,
  GPipe keeps m; interleaving adds a factor 1 + (p-1)/(p*m)).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from labkit.errors import LabkitError, require_choice, require_divides, require_finite, require_positive
from labkit.predict import attention as attn
from labkit.predict import op_recompute
from labkit.predict.allocator import reserve_share
from labkit.predict.bytes_per_param import FP32, GRAD16, MASTER, MOMENTS, WEIGHT16
from labkit.predict.step_peak import StepShape, step_peak
from labkit.shapes import ModelShape


@dataclass(frozen=True)
class Precision:
    """Bytes per parameter of weights, gradients, optimizer states (K), and per activation."""

    weights: int
    grads: int
    optimizer: int
    activation: int


PRECISIONS = {  # read from labkit.predict.bytes_per_param
    "fp32": Precision(FP32, FP32, MOMENTS, FP32),  # Adam moments m, v in fp32
    "bf16-mixed": Precision(WEIGHT16, GRAD16, MASTER + MOMENTS, 2),  # + fp32 master weights: K = 12 (ZeRO, sec. 3)
    "fp16-mixed": Precision(WEIGHT16, GRAD16, MASTER + MOMENTS, 2),
}
RECOMPUTE = ("none", "selective", "full", "op")  # op: torchtitan's policy (labkit.predict.op_recompute)
ATTENTION = ("explicit", "fused")  # any spelling of ``labkit.predict.attention`` is accepted, one name kept
SCHEDULES = ("1f1b", "gpipe", "interleaved")
ZERO_STAGES = (0, 1, 2, 3)
MASK_BYTES = (1, 2, 4)


def model_state_bytes(params: int, precision: str = "bf16-mixed", zero_stage: int = 0, dp: int = 1) -> dict:
    """Per-device bytes of weights, gradients and optimizer states under ZeRO (SC 2020, Fig. 1)."""
    require_positive("params", params)
    require_positive("dp", dp)
    require_choice("precision", precision, PRECISIONS)
    require_choice("zero_stage", zero_stage, ZERO_STAGES)
    p = PRECISIONS[precision]
    return {
        "parameters": p.weights * params / (dp if zero_stage >= 3 else 1),
        "gradients": p.grads * params / (dp if zero_stage >= 2 else 1),
        "optimizer": p.optimizer * params / (dp if zero_stage >= 1 else 1),
    }


def zero_communication_elements(params: int, zero_stage: int = 0) -> int:
    """Elements each device sends per step: 2*Psi for DP and stages 1-2, 3*Psi for stage 3."""
    require_choice("zero_stage", zero_stage, ZERO_STAGES)
    return (3 if zero_stage == 3 else 2) * params


def activation_bytes_per_layer(
    shape: ModelShape, seq: int, micro_batch: int, act_bytes: int = 2, mask_bytes: int = 1,
    tp: int = 1, sp: bool = False, recompute: str = "none", attention: str = "explicit",
) -> float:
    """Bytes one layer keeps for backward (Korthikanti et al. 2022, Table 2, generalised).

    With e = 2, m = 1: none 34sbh + 5as^2b; tensor parallel sbh(10 + 24/t + 5as/(ht));
    + sequence parallel sbh(34/t + 5as/(ht)); selective drops the s^2 term; full keeps 2sbh
    (divided by t under sequence parallelism); op, torchtitan's policy, what ``op_recompute`` says it keeps.
    """
    require_choice("recompute", recompute, RECOMPUTE)
    attention = attn.attention_kind(attention)
    require_positive("tp", tp)
    s, b, h, a = seq, micro_batch, shape.hidden, shape.heads
    e, m = act_bytes, (mask_bytes if shape.dropout else 0)
    sbh = s * b * h
    if recompute == "full":
        return e * sbh / (tp if sp else 1)
    if recompute == "op":
        return op_recompute.saved_bytes_per_layer(shape, s, b, e, tp, sp, attention)
    f, kv = shape.ffn_size / h, shape.kv_hidden / h
    replicated = sbh * (4 * e + 2 * m)  # two norm inputs, QKV and MLP inputs, two masks
    split = sbh * e * (2 + 2 * kv + (4 if shape.gated else 2) * f)  # Q K V, proj input, MLP inner
    if recompute == "selective":
        core = 0.0
    elif attention == "explicit":
        core = a * s * s * b * (2 * e + m if m else e)
    else:
        core = 4.0 * a * s * b  # fused kernels keep a log-sum-exp per row, in fp32
    return (replicated / (tp if sp else 1)) + split / tp + core / tp


def activation_bytes_outside_layers(shape: ModelShape, seq: int, micro_batch: int, act_bytes: int = 2,
                                    mask_bytes: int = 1, tp: int = 1) -> float:
    """Embedding dropout mask, final norm and output-layer inputs, fp32 log-probabilities (4sbv/t)."""
    sbh = seq * micro_batch * shape.hidden
    mask = (mask_bytes if shape.dropout else 0) * sbh
    return mask + 2 * act_bytes * sbh + 4 * seq * micro_batch * shape.vocab / tp


def in_flight_microbatches(pp: int, microbatches: int, schedule: str = "1f1b", chunks: int = 1) -> float:
    """Micro-batches of a stage's activations the first pipeline rank holds at its peak.

    GPipe keeps all m (Huang et al. 2019); 1F1B at most p (Narayanan et al. 2021).
    Interleaving v model chunks per rank multiplies p by 1 + (p-1)/(p*v)
    (Korthikanti et al. 2022, section 4.2.3, where their m is the chunk count v);
    ``labkit.sim`` shows the factor holds once m >= 2p and is capped below that.
    """
    require_choice("schedule", schedule, SCHEDULES)
    require_positive("pp", pp)
    require_positive("microbatches", microbatches)
    require_positive("chunks", chunks)
    if pp == 1:
        return 1.0
    if schedule == "gpipe":
        return float(microbatches)
    held = float(min(pp, microbatches))
    return held * (1 + (pp - 1) / (pp * chunks)) if schedule == "interleaved" else held


@dataclass(frozen=True)
class TrainingSetup:
    """A model, a micro-batch and a parallel layout: everything the estimate needs.

    ``attention`` defaults to ``fused`` (FlashAttention/sdpa, ``labkit.predict.attention.DEFAULT``), as the
    command line and the advisor do; pass ``explicit`` to compare with a run that holds the s x s scores
    (the lab's tiny GPT on the CPU). Any accepted spelling (``eager``, ``sdpa``, ``flash``) is stored by its name.
    """

    shape: ModelShape
    micro_batch: int = 1
    seq: int = 0  # 0 means the model's own context length
    precision: str = "bf16-mixed"
    recompute: str = "none"
    attention: str = attn.DEFAULT
    mask_bytes: int = 1
    dp: int = 1
    tp: int = 1
    pp: int = 1
    sp: bool = False
    zero_stage: int = 0
    microbatches: int = 0  # 0 means pp (the smallest count that fills a 1F1B pipeline)
    schedule: str = "1f1b"
    chunks: int = 1  # model chunks per pipeline rank (v) for the interleaved schedule

    def __post_init__(self) -> None:
        for name in ("micro_batch", "dp", "tp", "pp", "chunks"):
            require_positive(name, getattr(self, name))
        if self.seq < 0 or isinstance(self.seq, bool) or not isinstance(self.seq, int):
            raise LabkitError(f"seq must be a positive integer or 0 for the model's own (got {self.seq!r})")
        require_choice("precision", self.precision, PRECISIONS)
        require_choice("recompute", self.recompute, RECOMPUTE)
        object.__setattr__(self, "attention", attn.attention_kind(self.attention))
        require_choice("mask_bytes", self.mask_bytes, MASK_BYTES)
        require_choice("zero_stage", self.zero_stage, ZERO_STAGES)
        require_choice("schedule", self.schedule, SCHEDULES)
        require_divides("tp", self.tp, "heads", self.shape.heads)
        require_divides("pp", self.pp, "layers", self.shape.layers)
        if self.sp and self.tp == 1:
            raise LabkitError("sp (sequence parallel) needs tp > 1 (got tp=1)")

    @property
    def seq_len(self) -> int:
        return self.seq or self.shape.seq

    @property
    def n_microbatches(self) -> int:
        return self.microbatches or self.pp


@dataclass
class MemoryEstimate:
    """Per-device bytes of one training step, and whether it fits a device."""

    params: int
    per_device_bytes: dict[str, float]
    activations_per_layer_bytes: float
    layers_per_device: int
    in_flight_microbatches: float
    gpu: str | None = None
    device_bytes: int | None = None
    fits: bool | None = None
    headroom_bytes: float | None = None  # capacity minus the whole-step peak (minus the total where none is predicted)
    setup: dict = field(default_factory=dict)
    peak_bytes: float | None = None  # the whole step's predicted peak (labkit.predict.step_peak); tp = pp = 1, no ZeRO
    peak_phase: str | None = None
    reserve_bytes: float | None = None  # the caching allocator's margin beside the peak (labkit.predict.allocator)

    @property
    def activation_share(self) -> float:
        return self.per_device_bytes["activations"] / self.per_device_bytes["total"]

    def to_json(self) -> dict:
        out = asdict(self)
        out.pop("setup")
        return out


def estimate_memory(setup: TrainingSetup, device_bytes: int | None = None, gpu: str | None = None) -> MemoryEstimate:
    """Parameters, gradients, optimizer states and activations per device, and the fit."""
    if device_bytes is not None:
        require_finite("device_bytes", device_bytes, low=1)
    shape, prec = setup.shape, PRECISIONS[setup.precision]
    psi = shape.params
    states = model_state_bytes(psi, setup.precision, setup.zero_stage, setup.dp)
    states = {k: v / (setup.tp * setup.pp) for k, v in states.items()}
    per_layer = activation_bytes_per_layer(
        shape, setup.seq_len, setup.micro_batch, prec.activation, setup.mask_bytes,
        setup.tp, setup.sp, setup.recompute, setup.attention,
    )
    layers = shape.layers // setup.pp
    held = in_flight_microbatches(setup.pp, setup.n_microbatches, setup.schedule, setup.chunks)
    outside = activation_bytes_outside_layers(shape, setup.seq_len, setup.micro_batch, prec.activation,
                                              setup.mask_bytes, setup.tp)
    acts = per_layer * layers * held + (outside if setup.pp == 1 else 0.0)
    per_device = {**states, "activations": acts}
    per_device["total"] = sum(per_device.values())
    est = MemoryEstimate(psi, per_device, per_layer, layers, held, setup=asdict(setup))
    if setup.tp * setup.pp == 1 and not setup.zero_stage:
        peak = step_peak(step_shape(setup, per_layer, outside), reserve_share())
        est.peak_bytes, est.peak_phase, est.reserve_bytes = peak.peak, peak.phase, peak.reserve.bytes
    if device_bytes is not None:
        est.gpu, est.device_bytes = gpu, device_bytes
        est.headroom_bytes = device_bytes - (per_device["total"] if est.peak_bytes is None else est.peak_bytes)
        est.fits = est.headroom_bytes >= 0
    return est


def step_shape(setup: TrainingSetup, per_layer: float, outside: float, device: str = "cuda") -> StepShape:
    """One device's step of ``setup`` (tp = pp = 1, no ZeRO) with Korthikanti et al.'s activations, the lab's
    AdamW, and the output layer's input and fp32 log-probabilities freed at the loss (``labkit.predict.step_peak``)."""
    s, b, sh = setup.seq_len, setup.micro_batch, setup.shape
    head = 2 * PRECISIONS[setup.precision].activation * s * b * sh.hidden + FP32 * s * b * sh.vocab
    return StepShape.of_model(sh, b, s, per_layer, outside, head, device=device, batch_bytes=16 * b * s,
                              precision="fp32" if setup.precision == "fp32" else "bf16-mixed",
                              mlp_grads=2 if sh.gated else 1)


def forward_flops(shape: ModelShape, seq: int, micro_batch: int) -> float:
    """Matrix-multiply FLOPs of one forward pass: 2 per multiply-add (Narayanan et al. 2021)."""
    s, b, h, f, kv = seq, micro_batch, shape.hidden, shape.ffn_size, shape.kv_hidden
    per_layer = 2 * s * b * (h * (h + 2 * kv) + h * h + (3 if shape.gated else 2) * h * f) + 4 * b * s * s * h
    return shape.layers * per_layer + 2 * s * b * h * shape.vocab


def training_flops(shape: ModelShape, seq: int, micro_batch: int, recompute: str = "none") -> float:
    """Forward + backward (2x forward) + what recompute repeats: Korthikanti's 72BsLh^2(1 + s/6h + V/12Lh) at none.

    "selective" counts Korthikanti et al.'s re-run of the attention core's forward, Q K^T and the
    product with V, 4bs^2h a layer; torch's non-reentrant checkpoint with early stop repeats only
    Q K^T, half of it (``labkit.reduction.tradeoffs.selective_extra_flops``). "full": every layer's forward.
    "op": torchtitan's op-level policy, every second matmul of each layer (``op_recompute``).
    """
    require_choice("recompute", recompute, RECOMPUTE)
    fwd = forward_flops(shape, seq, micro_batch)
    layers_fwd = fwd - 2 * seq * micro_batch * shape.hidden * shape.vocab
    extra = {"none": 0.0, "selective": shape.layers * 4 * micro_batch * seq * seq * shape.hidden,
             "full": layers_fwd, "op": shape.layers * op_recompute.extra_flops_per_layer(shape, seq, micro_batch)
             }[recompute]
    return 3 * fwd + extra
