"""Your own model, measured beside its prediction: one real step of a config file's model (or the tiny GPT).

``compare_model`` builds the model (random weights, nothing downloaded), trains one warm-up step
so the optimizer states exist, measures one step (bytes by category and by layer, ``labkit.measure``)
and its whole-step peak (``labkit.measure.peak``; on CUDA with the caching allocator's reserve), and puts
each number beside what labkit predicts: ZeRO's model states and, for the activations, Korthikanti
et al.'s terms for the tiny GPT or ``labkit.predict.activation_options`` for a transformers model. The
predicted peak and its phase come from ``labkit.predict.step_peak``: forward's end, backward's worst
moment and the optimizer step, temporaries included, term by term.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import torch

from labkit.errors import LabkitError, require_choice, require_positive, require_runnable
from labkit.predict.estimate import model_state_bytes

PRECISIONS = ("fp32", "bf16-autocast", "bf16-mixed")
ATTENTION = ("eager", "sdpa")


@dataclass
class OwnModelReport:
    """Measured beside predicted for one step of one model (bytes); ``None`` where nothing is predicted."""

    model: str
    params: int
    setup: dict
    categories: dict[str, tuple[int, float | None]]  # name -> (measured, predicted)
    layers: list[tuple[int, float | None]]
    outside: tuple[int, float | None]
    peak: dict = field(default_factory=dict)  # measured, phase, predicted, reserved (CUDA), device
    timing: dict = field(default_factory=dict)  # step seconds: measured, datasheet and calibrated predictions

    def rows(self) -> list[tuple[str, int, float | None]]:
        out = [(k, m, p) for k, (m, p) in self.categories.items()]
        out += [(f"activations, layer {i}", m, p) for i, (m, p) in enumerate(self.layers)]
        out += [("activations, outside layers", *self.outside)]
        return out

    def to_json(self) -> dict:
        return asdict(self)

    def __str__(self) -> str:
        return format_report(self)

    def _repr_pretty_(self, p, cycle) -> None:
        p.text(str(self))


def _ratio(m: float, p: float | None) -> str:
    return "-" if p in (None, 0) or not m else f"{m / p:.3f}"


def format_report(r: OwnModelReport) -> str:
    """The report for people: bytes, and measured/predicted."""
    from labkit.predict.tables import text_table

    s = r.setup
    lines = [f"{r.model}: {r.params:,} parameters, {s['precision']}, batch {s['batch']}, seq {s['seq']}, "
             f"{s['device']}, layers in {s['blocks']}", f"activations predicted for: {s['activations assume']}"]
    rows = [[name, f"{m:,}", "-" if p is None else f"{p:,.0f}", _ratio(m, p)] for name, m, p in r.rows()]
    pk = r.peak
    rows.append(["whole-step peak", f"{pk['measured']:,}", "-" if pk["predicted"] is None else
                 f"{pk['predicted']:,.0f}", _ratio(pk["measured"], pk["predicted"])])
    lines += ["", text_table(["bytes", "measured", "predicted", "measured/predicted"], rows)]
    lines.append(f"peak in the {pk['phase']} phase" + ("" if pk["predicted"] is None else
                 f"; predicted in the {pk['predicted_phase']} phase (labkit.predict.step_peak, temporaries included)"))
    t = r.timing
    if t:
        pred = "; ".join(f"{k} {v * 1e3:,.2f} ms (measured/predicted {t['measured'] / v:.2f})" if v else
                         f"{k}: none" + (" (a CPU has no catalogue entry)" if k == "datasheet" else " (--calibration)")
                         for k, v in t["predicted"].items())
        lines.append(f"step time: measured {t['measured'] * 1e3:,.2f} ms (median of 3); predicted: {pred}"
                     + (f"; calibration of {t['calibration']}" if t.get("calibration") else ""))
    if pk["reserved"] is not None:
        lines.append(f"caching allocator reserved {pk['reserved']:,} B at most: {pk['allocator_reserve']:,} B "
                     "beyond the allocated peak")
    return "\n".join(lines)


class _OnDevice:
    """The tiny GPT's batches moved to a device (``tokens`` kept: the corpus a peak leaves out)."""

    def __init__(self, batches, device: str) -> None:
        self.batches, self.device, self.tokens = batches, device, batches.tokens

    def __call__(self, step: int):
        return tuple(t.to(self.device) for t in self.batches(step))


def _tiny(batch: int, seq: int, precision: str, attention: str, device: str):
    from labkit.measure.compare import setup_for
    from labkit.predict.estimate import estimate_memory, step_shape
    from labkit.rig.data import vocab_size
    from labkit.rig.model import GPTConfig
    from labkit.rig.train import TrainConfig, Trainer
    from labkit.shapes import ModelShape

    if precision == "bf16-autocast":
        raise LabkitError("precision must be fp32 or bf16-mixed for the tiny GPT (got 'bf16-autocast'); "
                          "a --hf-config model takes all three")
    cfg = GPTConfig(vocab_size=vocab_size(), seq_len=seq, attention="explicit" if attention == "eager" else "fused")
    if device == "cpu":
        trainer = Trainer(TrainConfig(model=cfg, batch_size=batch, precision=precision))
    else:  # the same seeded model and batches, moved to the device before the optimizer is built
        fp32 = Trainer(TrainConfig(model=cfg, batch_size=batch))
        trainer = Trainer(model=fp32.model.to(device), data=_OnDevice(fp32.data, device), precision=precision,
                          lr=fp32.cfg.lr)
    setup = setup_for(ModelShape.from_config(cfg), batch, precision, cfg.attention)
    est = estimate_memory(setup)
    outside = est.per_device_bytes["activations"] - est.activations_per_layer_bytes * cfg.n_layer
    assumes = f"Korthikanti et al.'s terms, {cfg.attention} attention, 1-byte dropout masks"
    step = replace(step_shape(setup, est.activations_per_layer_bytes, outside, torch.device(device).type),
                   cuda_major=_cuda_major(device), shifted_labels=False)
    return "tiny-gpt", trainer, est.params, est.activations_per_layer_bytes, outside, assumes, step, setup.shape


def _hf(config: str | Path, batch: int, seq: int, precision: str, attention: str, cache: bool,
        dropout: float | None, device: str, layers: int | None = None):
    from labkit.predict.activation_options import ActivationOptions, activation_bytes_hf
    from labkit.predict.step_inputs import hf_step_shape
    from labkit.rig.train import Trainer
    from labkit.shapes.hf_config import HFModel, from_config, resolve
    from labkit.shapes.hf_models import build_model

    spec = config if isinstance(config, HFModel) else from_config(resolve(config))
    if layers is not None:  # the same widths, fewer layers: a big model's layer on a small machine
        key = "n_layer" if spec.family == "gpt2" else "num_hidden_layers"
        spec = from_config(spec.config | {key: require_positive("layers", layers), "_source": spec.source},
                           name=f"{spec.shape.name} ({layers} layers)")
    if seq > spec.shape.seq:
        raise LabkitError(f"seq must be at most the model's {spec.shape.seq} positions (got {seq})")
    require_runnable(16 * spec.shape.params, 0, device, field="hf_config", what="model states (16 B a parameter)",
                     fix="a smaller model, or --layers N")  # weights, gradients, AdamW's moments, before allocating
    model = build_model(spec, attention, device=device, dropout=dropout, use_cache=cache)
    ids = torch.randint(0, spec.shape.vocab, (batch, seq), generator=torch.Generator().manual_seed(0)).to(device)
    trainer = Trainer(model=model, data={"input_ids": ids, "labels": ids}, precision=precision)
    if precision == "bf16-autocast":  # not claimed: autocast keeps fp32 and bf16 copies the options do not name
        return (spec.shape.name, trainer, spec.shape.params, None, None, "no activation prediction in bf16-autocast",
                None, spec.shape)
    e = 4 if precision == "fp32" else 2
    mask = 1 if torch.device(device).type == "cuda" else None
    opt = ActivationOptions.for_model(spec, attention, cache=cache, act_bytes=e, mask_bytes=mask, dropout=dropout,
                                      seq=seq, cuda=mask == 1)
    per_layer, outside = activation_bytes_hf(spec.shape, seq, batch, opt, e)
    assumes = (f"{opt.attention} attention, {opt.activation}, {opt.norm}, cache {'on' if opt.cache else 'off'}, "
               + (f"{opt.mask_bytes}-byte dropout masks" if opt.mask_bytes else "no dropout"))
    step = hf_step_shape(spec, batch, seq, precision, attention, cache, dropout, torch.device(device).type, "lab",
                         _cuda_major(device))
    return spec.shape.name, trainer, spec.shape.params, per_layer, outside, assumes, step, spec.shape


def _cuda_major(device: str) -> int:
    """The compute capability's major version of a CUDA device (sets cuBLAS's workspace), 0 on the CPU."""
    dev = torch.device(device)
    return torch.cuda.get_device_capability(dev)[0] if dev.type == "cuda" else 0


def build_trainer(config: str | Path | None, batch: int, seq: int, precision: str, attention: str, cache: bool,
                  dropout: float | None, device: str, layers: int | None = None):
    """(name, trainer, parameters, predicted bytes per layer and outside the layers, what the prediction assumes,
    the ``StepShape`` the peak is predicted from or None, the ``ModelShape``)."""
    if config is None:
        if layers is not None:
            raise LabkitError("layers applies to a --hf-config model, not to the tiny GPT")
        return _tiny(batch, seq, precision, attention, device)
    return _hf(config, batch, seq, precision, attention, cache, dropout, device, layers)


def compare_model(config=None, batch: int = 2, seq: int = 32, precision: str = "fp32",
                  attention: str = "sdpa", cache: bool = False, dropout: float | None = None,
                  device: str | None = None, progress: Callable[[str], None] | None = None,
                  layers: int | None = None, calibration=None, timed: bool = True) -> OwnModelReport:
    """One measured step of ``config`` beside labkit's prediction: a config.json path, a shipped name, an
    ``HFModel`` (``labkit.shapes.hf_models.small_spec``), or None for the tiny GPT. ``timed``: also time three
    steps beside the kernel model's time on the datasheet's device and on ``calibration`` (a
    ``labkit.hardware.calibration.Calibration``) when given."""
    from labkit.measure import measure_step, whole_step_peak
    from labkit.predict.step_peak import step_peak

    require_positive("batch", batch)
    require_positive("seq", seq)
    require_choice("precision", precision, PRECISIONS)
    require_choice("attention", attention, ATTENTION)
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    require_choice("device", device, ["cpu", "cuda"] if torch.cuda.is_available() else ["cpu"])
    say = progress or (lambda _: None)
    say("building the model")
    name, trainer, params, per_layer, outside, assumes, step_shape, shape = build_trainer(
        config, batch, seq, precision, attention, cache, dropout, device, layers)
    if step_shape is not None:  # refuse what would not fit or would run for hours, before the first step
        sh, tokens = step_shape, step_shape.batch * step_shape.seq  # 3x forward FLOPs (Narayanan et al., SC 2021)
        flops = 3 * (2 * sum(sh.param_tensors) * tokens + 4 * tokens * sh.seq * sh.hidden * sh.layers)
        require_runnable(step_peak(sh).peak, flops, device)
    say("warm-up step (creates the optimizer states)")
    trainer.step()
    say("measuring one step")
    step = measure_step(trainer)
    say("whole-step peak")
    peak = whole_step_peak(trainer)
    states = model_state_bytes(params, "bf16-mixed" if precision == "bf16-mixed" else "fp32")
    layers = step.activations_per_layer()
    acts = None if per_layer is None else per_layer * len(layers) + outside
    categories = {"parameters": (step.parameters, states["parameters"]),
                  "gradients": (step.gradients, states["gradients"]),
                  "optimizer states": (step.optimizer, states["optimizer"]),
                  "activations": (step.activations, acts)}
    predicted = None if step_shape is None else step_peak(step_shape)
    peak_info = {"measured": peak.peak, "phase": peak.phase, "predicted": predicted and predicted.peak,
                 "predicted_phase": predicted and predicted.phase, "device": peak.device,
                 "reserved": peak.reserved, "allocator_reserve": peak.allocator_reserve,
                 "by_phase": {"measured": dict(peak.by_phase), "predicted": predicted and predicted.by_phase}}
    setup = {"batch": batch, "seq": seq, "precision": precision, "attention": attention, "cache": cache,
             "device": device, "blocks": trainer.blocks, "activations assume": assumes}
    timing = {}
    if timed:
        from labkit.measure.step_time import measured_step_seconds, predicted_step_times

        say("timing three steps")
        timing = {"measured": measured_step_seconds(trainer), "predicted": predicted_step_times(
            shape, seq, batch, precision, attention, device, calibration),
            "calibration": None if calibration is None else f"{calibration.machine}, {calibration.date}"}
    return OwnModelReport(name, params, setup, categories, [(m, per_layer) for m in layers],
                          (sum(step.outside_layers().values()), outside), peak_info, timing)
