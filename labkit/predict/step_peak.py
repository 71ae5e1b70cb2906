"""The most one training step holds at once, predicted term by term, and the phase where it falls.

A step is held to three moments (the measured side is ``labkit.measure.peak.whole_step_peak``):

* **forward's end**, at the loss: the model states, every saved activation, and the loss's
  transients: the logits (``e*b*s*V``) and, when they are 16-bit, their fp32 upcast (``4*b*s*V``;
  transformers' ``ForCausalLMLoss`` and the tiny GPT both call ``logits.float()``), beside the fp32
  log-probabilities that ``log_softmax`` saves (already an activation);
* **backward's worst moment**: at the loss, ``nll_loss_backward`` writes the fp32 gradient of the
  log-probabilities and ``_log_softmax_backward_data`` its input's gradient, two ``4*b*s*V`` tensors
  alive beside every activation (PyTorch's ``aten/src/ATen/native/LossNLL.cpp`` and
  ``SoftMax.cpp``); then, layer by layer, gradients arrive while activations are freed: the
  moment at the last layer (the output layer's gradient, the gradient flowing back, and the
  largest layer's MLP transients: one weight gradient ``e*h*f`` and ``mlp_grads`` ``e*b*s*f`` gradients, the
  down projection's input gradient among them, its own saved input freed by then) and
  at the first layer (every layer's gradient but one layer's activations) are checked too, and, for
  transformers' Python RMSNorm, the final norm's backward (every activation but the loss's, the output
  layer's gradient and the norm's fp32 transients: ``rmsnorm_backward_transients``) and the first layer's
  (every gradient but the embedding's); and backward's end, every gradient made and, with a tied embedding,
  the output layer's and the embedding's gradients of it beside their sum (measured on whole fake steps,
  ``tests/test_fake_property.py``: one-layer models' backward phase was 7.7-8% low without them);
* **the optimizer step**: model states, every gradient, and the temporaries of the AdamW in use,
  read off ``torch/optim/adam.py``: the lab's ``MasterWeightAdamW`` first makes an fp32 copy of
  every 16-bit gradient (4 bytes per parameter); the single-tensor AdamW (``foreach=False``, the
  lab's) computes ``denom = (exp_avg_sq.sqrt() / c).add_(eps)`` per tensor, two temporaries of the
  tensor while the previous tensor's ``denom`` is still bound: ``4 * max(2 n_i + n_(i-1))`` bytes;
  the foreach AdamW's ``_foreach_sqrt`` makes one of every tensor at once (4 bytes per parameter);
  the fused AdamW none.

On CUDA every moment also holds cuBLAS's workspaces, one per (handle, stream) and the forward and
backward run on two threads with a handle each: 2 x 32 MiB on compute capability 9 and later,
2 x (8 MiB + 128 KiB) before (``aten/src/ATen/cuda/CublasHandlePool.cpp``, ``parseChosenWorkspaceSize``),
and the batch itself. The caching allocator's reserve beyond the peak is a separate margin
(``labkit.predict.allocator``: the largest share measured on the H200), not part of the peak.
Checked against the H200's measurements in ``labkit.predict.reference`` (every row within 0.1%).
Left out, stated: module buffers (a rotary table's inverse frequencies) and the allocator's
512-byte rounding, both under a kilobyte per tensor.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from labkit.errors import require_choice, require_positive
from labkit.predict.bytes_per_param import FP32, GRAD32, MASTER, MOMENTS, WEIGHT16
from labkit.predict.peak_moments import PeakTerm, mlp_backward_transients, rmsnorm_backward_transients
from labkit.shapes import ModelShape
from labkit.shapes.tensors import parameter_tensors

OPTIMIZERS = ("lab", "foreach", "fused")  # single-tensor AdamW (MasterWeightAdamW in bf16-mixed), torch's others
DEVICES = ("cpu", "cuda")
PRECISIONS = ("fp32", "bf16-mixed", "bf16-autocast")
PHASES = ("forward", "backward", "optimizer")
MIB = 2**20


def cublas_workspace_bytes(cuda_major: int) -> int:
    """One cuBLAS workspace: torch's default for the device's compute capability (CublasHandlePool.cpp)."""
    return 32 * MIB if cuda_major >= 9 else 8 * MIB + 128 * 1024


@dataclass(frozen=True)
class StepShape:
    """What the peak needs to know of a step: tensors, activations, sizes, precision, optimizer, device."""

    param_tensors: tuple[int, ...]  # element counts in the optimizer's order, tied weights once
    per_layer: float  # activation bytes one layer saves
    layers: int
    outside: float  # activation bytes saved outside the layers (the loss's fp32 log-probabilities included)
    head_outside: float  # of which the output layer and the loss keep (freed before the layers' backward)
    batch: int
    seq: int
    hidden: int
    ffn: int
    vocab: int
    precision: str = "fp32"
    optimizer: str = "lab"
    device: str = "cpu"
    cuda_major: int = 9
    batch_bytes: int = 0  # the input tensors (counted on CUDA, where the allocator holds them)
    head_params: int = 0  # parameters whose gradient the output layer makes (its weight, or the tied embedding)
    layer_params: int = 0  # parameters of one layer
    shifted_labels: bool = True  # transformers pads the labels by one to shift them (the tiny GPT does not)
    mlp_grads: int = 1  # b*s*f gradients alive at once in the MLP's backward: 2 for SwiGLU and gelu_new, else 1
    rmsnorm: bool = False  # transformers' Python RMSNorm: its final norm's backward is a moment of its own
    tied: bool = False  # the output layer shares the token embedding: two gradients of it meet at the end

    def __post_init__(self) -> None:
        require_choice("precision", self.precision, PRECISIONS)
        require_choice("optimizer", self.optimizer, OPTIMIZERS)
        require_choice("device", self.device, DEVICES)
        for name in ("layers", "batch", "seq", "hidden", "ffn", "vocab"):
            require_positive(name, getattr(self, name))

    @classmethod
    def of_model(cls, shape: ModelShape, batch: int, seq: int, per_layer: float, outside: float, head_outside: float,
                 **kw) -> StepShape:
        """A model's step from its shape and predicted activations; ``kw`` sets the other fields."""
        return cls(parameter_tensors(shape), per_layer, shape.layers, outside, head_outside, batch, seq, shape.hidden,
                   shape.ffn_size, shape.vocab, head_params=shape.vocab * shape.hidden,
                   layer_params=shape.params_per_layer,
                   **({"rmsnorm": shape.norm == "rmsnorm", "tied": bool(getattr(shape, "tied", False))} | kw))

    @property
    def params(self) -> int:
        return sum(self.param_tensors)

    @property
    def weight_bytes(self) -> int:
        """Bytes per element of the model's weights and gradients."""
        return WEIGHT16 if self.precision == "bf16-mixed" else FP32

    @property
    def act_bytes(self) -> int:
        return FP32 if self.precision == "fp32" else WEIGHT16

    @property
    def activations(self) -> float:
        return self.per_layer * self.layers + self.outside


@dataclass(frozen=True)
class StepPeak:
    """The terms alive at each phase's worst moment, and the allocator's margin beside them."""

    phases: dict[str, tuple[PeakTerm, ...]]
    reserve: PeakTerm

    def total(self, phase: str) -> float:
        return sum(t.bytes for t in self.phases[require_choice("phase", phase, PHASES)])

    @property
    def by_phase(self) -> dict[str, float]:
        return {p: self.total(p) for p in PHASES}

    @property
    def phase(self) -> str:
        """Where the peak falls: "forward", "backward" or "optimizer"."""
        by = self.by_phase
        return max(PHASES, key=by.get)

    @property
    def peak(self) -> float:
        return self.total(self.phase)

    @property
    def with_reserve(self) -> float:
        return self.peak + self.reserve.bytes


@lru_cache(maxsize=1024)
def adamw_temporaries(tensors: tuple[int, ...], optimizer: str, state_bytes: int = FP32) -> float:
    """Bytes AdamW allocates inside its step beyond states and gradients (see the module docstring)."""
    require_choice("optimizer", optimizer, OPTIMIZERS)
    if optimizer == "fused" or not tensors:
        return 0.0
    if optimizer == "foreach":
        return float(state_bytes * sum(tensors))
    prev = (0, *tensors[:-1])
    return float(state_bytes * max(2 * n + p for n, p in zip(tensors, prev, strict=True)))


def state_terms(s: StepShape) -> list[PeakTerm]:
    """What every moment of the step holds: the parameters, AdamW's states and their step counters (public: the
    recompute and chunked-loss peaks, ``recompute_peak`` and ``loss_chunks``, build their moments on it)."""
    n, w = s.params, s.weight_bytes
    out = [PeakTerm("parameters", w * n, f"{w} bytes per parameter"),
           PeakTerm("optimizer states", MOMENTS * n, "AdamW's fp32 momentum and variance")]
    if s.precision == "bf16-mixed":
        out.append(PeakTerm("master weights", MASTER * n, "MasterWeightAdamW's fp32 copies (Micikevicius et al. 2018)"))
    counters_here = s.device == "cpu" or s.optimizer == "fused"  # torch keeps non-fused step counters on the host
    out.append(PeakTerm("step counters", 4 * len(s.param_tensors) if counters_here else 0,
                        "AdamW's fp32 step per tensor, on the device only when fused (or on the CPU)"))
    if s.device == "cuda":
        out += [PeakTerm("cuBLAS workspaces", 2 * cublas_workspace_bytes(s.cuda_major),
                         "one per thread's handle (forward, autograd's backward), CublasHandlePool.cpp"),
                PeakTerm("batch", s.batch_bytes, "the input ids and labels on the device")]
    return out


def _forward(s: StepShape, states: list[PeakTerm]) -> tuple[PeakTerm, ...]:
    bsv = s.batch * s.seq * s.vocab
    out = [*states, PeakTerm("activations", s.activations, "every tensor saved for backward"),
           PeakTerm("logits", s.act_bytes * bsv, "the output layer's result, alive while the loss runs")]
    if s.act_bytes != 4:
        out.append(PeakTerm("fp32 logits", 4 * bsv, "logits.float() before log_softmax"))
    if s.shifted_labels:
        out.append(PeakTerm("padded labels", 8 * s.batch * (s.seq + 1), "int64 labels padded by one for the shift"))
    return tuple(out)


def _backward_at_loss(s: StepShape, states: list[PeakTerm]) -> tuple[PeakTerm, ...]:
    bsv = s.batch * s.seq * s.vocab
    return (*states, PeakTerm("activations", s.activations, "nothing freed yet"),
            PeakTerm("log-probabilities' gradient", 4 * bsv, "nll_loss_backward's fp32 output"),
            PeakTerm("logits' fp32 gradient", 4 * bsv, "_log_softmax_backward_data's output"))


def backward_in_layers(s: StepShape, states: list[PeakTerm], at: int) -> tuple[PeakTerm, ...]:
    """The moment layer ``at`` starts its MLP's backward: layers above it done, layers below still saved."""
    w, e, bs = s.weight_bytes, s.act_bytes, s.batch * s.seq
    below = s.per_layer * (at + 1) + s.outside - s.head_outside
    grads = w * (s.head_params + s.layer_params * (s.layers - 1 - at))
    return (*states, PeakTerm("activations", below, f"layers 0-{at} and what the embedding keeps"),
            PeakTerm("gradients", grads, "the output layer's and those of the layers done"),
            PeakTerm("flowing gradient", e * bs * s.hidden, "the gradient of the layer's output"),
            mlp_backward_transients(e * bs * s.ffn, w * s.hidden * s.ffn, s.mlp_grads - 1))


def _backward_at_final_norm(s: StepShape, states: list[PeakTerm]) -> tuple[PeakTerm, ...]:
    """The final RMSNorm's backward: every activation but the loss's, the output layer's gradient, the norm's
    fp32 transients."""
    loss = 4 * s.batch * s.seq * s.vocab + 8 * s.batch * s.seq + 4
    return (*states, PeakTerm("activations", s.activations - loss, "all but the loss's (freed at the loss)"),
            PeakTerm("gradients", s.weight_bytes * s.head_params, "the output layer's"),
            rmsnorm_backward_transients(s.batch * s.seq * s.hidden, s.act_bytes))


def _backward_at_embedding(s: StepShape, states: list[PeakTerm]) -> tuple[PeakTerm, ...]:
    """Backward's end: every gradient made, and, with a tied output layer, the embedding's own gradient and the
    output layer's, before ``AccumulateGrad`` sums them into the shared ``.grad`` (measured on fake steps)."""
    w = s.weight_bytes
    return (*states, PeakTerm("gradients", w * s.params, "every parameter's gradient"),
            PeakTerm("tied gradients", 2 * w * s.head_params if s.tied else 0,
                     "the output layer's and the embedding's gradients of the shared matrix, beside their sum"))


def _backward_at_first_norm(s: StepShape, states: list[PeakTerm]) -> tuple[PeakTerm, ...]:
    """The first layer's RMSNorm backward: every gradient but the embedding's and that norm's weight, the norm's
    saved tensors (fp32: its input, normalised copy and rstd; 16-bit: the fp32 input), the flowing gradient and
    the norm's fp32 transients (measured on fake steps)."""
    bsh, bs = s.batch * s.seq * s.hidden, s.batch * s.seq
    saved = 3 * 4 * bsh + 4 * bs if s.act_bytes == 4 else 4 * bsh
    return (*states, PeakTerm("activations", saved, "the first norm's saved tensors"),
            PeakTerm("gradients", s.weight_bytes * (s.params - s.head_params - s.hidden),
                     "all but the token embedding's and the first norm's"),
            PeakTerm("flowing gradient", s.act_bytes * bsh, "the gradient of the layer's input"),
            rmsnorm_backward_transients(bsh, s.act_bytes))


def _optimizer(s: StepShape, states: list[PeakTerm]) -> tuple[PeakTerm, ...]:
    n = s.params
    out = [*states, PeakTerm("gradients", s.weight_bytes * n, "every parameter's gradient")]
    if s.precision == "bf16-mixed" and s.optimizer == "lab":
        out.append(PeakTerm("fp32 gradient copies", GRAD32 * n, "MasterWeightAdamW.step: p.grad.float() for all"))
    out.append(PeakTerm("AdamW temporaries", adamw_temporaries(s.param_tensors, s.optimizer),
                        {"lab": "single-tensor: sqrt and division of the largest tensor, and its neighbour's denom",
                         "foreach": "_foreach_sqrt of every tensor", "fused": "none"}[s.optimizer]))
    return tuple(out)


def step_peak(s: StepShape, reserve_share: float = 0.0) -> StepPeak:
    """The whole step's peak, by phase and term; ``reserve_share`` of the peak is the allocator's margin."""
    states = state_terms(s)
    moments = [_backward_at_loss(s, states), backward_in_layers(s, states, s.layers - 1),
               backward_in_layers(s, states, 0), *([_backward_at_final_norm(s, states)] if s.rmsnorm else []),
               _backward_at_embedding(s, states), *([_backward_at_first_norm(s, states)] if s.rmsnorm else [])]
    backward = max(moments, key=lambda terms: sum(t.bytes for t in terms))
    phases = {"forward": _forward(s, states), "backward": backward, "optimizer": _optimizer(s, states)}
    peak = max(sum(t.bytes for t in terms) for terms in phases.values())
    reserve = PeakTerm("caching allocator's reserve", reserve_share * peak if s.device == "cuda" else 0.0,
                       "blocks the allocator keeps beyond the peak (CUDA); a margin, not a need")
    return StepPeak(phases, reserve)
