"""A real LoRA or QLoRA step of a config file's model, measured by category beside ``labkit.predict.finetune``.

The model is built from its config (random weights, nothing downloaded), wrapped by ``peft``'s LoRA
(Hu et al. 2022: the base frozen, A and B trained on the target matrices; LoRA dropout 0), and for
QLoRA its layers' frozen matrices are replaced by the lab's NF4 storage (``labkit.measure.nf4``;
Dettmers et al. 2023). One warm-up step creates the optimizer states, then one step is measured with
the lab's counters: distinct storages for the frozen base, the adapters, their gradients and AdamW
states, the tensors autograd saves (``labkit.measure.saved``) and the whole-step peak
(``labkit.measure.peak``). The report is ``labkit.measure.own_model``'s, so ``--json`` reads the same.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import torch

from labkit.errors import LabkitError, require_choice, require_positive
from labkit.measure.own_model import OwnModelReport
from labkit.predict.finetune import MODULE_NAMES, Finetune, finetune_bytes
from labkit.predict.finetune_peak import FinetuneStep, finetune_peak

PRECISIONS = ("fp32", "bf16-mixed")
STORAGE = {"lora": "16-bit base (fp32 in fp32 runs)",
           "qlora": "labkit's own NF4 (labkit.measure.nf4, blocks of 64, {scales}); bitsandbytes not used: its "
                    "CPU 4-bit layers fetch kernels from the Hub at run time"}


class FinetuneReport(OwnModelReport):
    """``OwnModelReport`` whose text names the fine-tuning peak model."""

    def __str__(self) -> str:
        from labkit.measure.own_model import format_report

        return format_report(self).replace("labkit.predict.step_peak", "labkit.predict.finetune_peak")


def _peft():
    try:
        import peft
    except ImportError:
        raise LabkitError("finetune needs peft: pip install -e '.[hf]'") from None
    return peft


def _spec(config, layers: int | None):
    from labkit.shapes.hf_config import HFModel, from_config, resolve

    spec = config if isinstance(config, HFModel) else from_config(resolve(config))
    if layers is not None:
        key = "n_layer" if spec.family == "gpt2" else "num_hidden_layers"
        spec = from_config(spec.config | {key: require_positive("layers", layers), "_source": spec.source},
                           name=f"{spec.shape.name} ({layers} layers)")
    return spec


def finetune_trainer(spec, ft: Finetune, batch: int, seq: int, precision: str, device: str = "cpu"):
    """A ``Trainer`` of ``spec`` with LoRA adapters (and an NF4 base under QLoRA), ready to step."""
    from labkit.predict.activation_options import _window
    from labkit.rig.train import Trainer
    from labkit.shapes.hf_models import build_model

    ft.check(spec.shape, precision)
    if seq > spec.shape.seq:
        raise LabkitError(f"seq must be at most the model's {spec.shape.seq} positions (got {seq})")
    if _window(spec, seq):
        raise LabkitError(f"seq must stay below the sliding window ({spec.config.get('sliding_window')}) with "
                          "finetune: the window's mask is not in the fine-tuning prediction")
    peft = _peft()
    from transformers.initialization import no_init_weights

    with no_init_weights():  # transformers' initialisation runs twice over every matrix: seconds on a 7B slice
        model = build_model(spec, "sdpa", device=device, dropout=0.0, use_cache=False)
    model.tie_weights()  # skipped with the initialisation: the output layer shares the embedding where tied
    _fill(model)
    if ft.checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    names = [MODULE_NAMES[spec.shape.gated][t] for t in ft.targets]
    cfg = peft.LoraConfig(r=ft.rank, lora_alpha=ft.alpha or 2 * ft.rank, target_modules=names, lora_dropout=0.0,
                          fan_in_fan_out=spec.family == "gpt2")
    model = peft.get_peft_model(model, cfg)
    ids = torch.randint(0, spec.shape.vocab, (batch, seq), generator=torch.Generator().manual_seed(0)).to(device)
    trainer = Trainer(model=model, data={"input_ids": ids, "labels": ids}, precision=precision)
    if ft.method == "qlora":  # after the cast to bf16: the scales stay fp32
        from labkit.measure.nf4 import quantize_base

        quantize_base(model.get_submodule(trainer.blocks), ft.double_quant)
    return trainer


@torch.no_grad()
def _fill(model: torch.nn.Module, seed: int = 0, tile: int = 2**20) -> None:
    """Random weights, fast: every matrix tiled from one seeded block of ``tile`` values uniform in +-0.02;
    biases 0, norms as built (ones). No byte depends on the values: they only have to be finite and seeded
    (a 7B model's two-layer slice fills in a fraction of a second instead of transformers' seconds)."""
    block = torch.empty(tile).uniform_(-0.02, 0.02, generator=torch.Generator().manual_seed(seed))
    for name, p in model.named_parameters():
        if p.dim() >= 2:
            flat = p.view(-1)
            for i in range(0, flat.numel(), tile):
                part = flat[i:i + tile]
                part.copy_(block[:part.numel()])
        elif name.endswith("bias"):
            p.zero_()


def _frozen_bytes(model: torch.nn.Module) -> int:
    from labkit.measure.nf4 import NF4Linear
    from labkit.measure.saved import unique_bytes

    nf4 = [t for m in model.modules() if isinstance(m, NF4Linear) for t in m.buffers()]
    return unique_bytes([*(p for p in model.parameters() if not p.requires_grad), *nf4])


def compare_finetune(config, ft: Finetune, batch: int = 2, seq: int = 32, precision: str = "bf16-mixed",
                     layers: int | None = None, device: str = "cpu") -> OwnModelReport:
    """One measured LoRA/QLoRA step of ``config`` (a path, a shipped name or an ``HFModel``) beside its prediction."""
    from labkit.measure import measure_step, whole_step_peak
    from labkit.measure.saved import unique_bytes

    require_positive("batch", batch)
    require_positive("seq", seq)
    require_choice("precision", precision, PRECISIONS)
    require_choice("device", device, ["cpu"])
    if ft.paged:
        raise LabkitError("paged applies to a GPU estimate (labkit estimate --paged): on the CPU the host is the "
                          "device, so there is nothing to page out")
    spec = _spec(config, layers)
    with warnings.catch_warnings():  # transformers 5 renames gradient checkpointing: a FutureWarning per call
        warnings.simplefilter("ignore", FutureWarning)
        trainer = finetune_trainer(spec, ft, batch, seq, precision, device)
        trainer.step()
        step = measure_step(trainer)
        peak = whole_step_peak(trainer)
    pred = finetune_bytes(spec.shape, ft, seq, batch, precision)
    pk = finetune_peak(FinetuneStep(spec.shape, ft, batch, seq, precision, device))
    model = trainer.model
    categories = {
        "frozen base weights": (_frozen_bytes(model), pred.frozen),
        "adapter parameters": (unique_bytes(p for p in model.parameters() if p.requires_grad), pred.adapters),
        "adapter gradients": (step.gradients, pred.gradients),
        "adapter optimizer states": (step.optimizer, pred.optimizer),
        "activations": (step.activations, pred.activations),
    }
    measured_layers = step.activations_per_layer()
    storage = STORAGE[ft.method].format(scales="int8 scales of scales (double quantization)" if ft.double_quant
                                        else "fp32 scales")
    setup = {"batch": batch, "seq": seq, "precision": precision, "attention": "sdpa", "cache": False,
             "device": device, "blocks": trainer.blocks, "finetune": ft.method, "lora_rank": ft.rank,
             "lora_alpha": ft.alpha or 2 * ft.rank, "lora_targets": list(ft.targets),
             "gradient_checkpointing": ft.checkpointing, "base storage": storage,
             "activations assume": "frozen base (labkit.predict.finetune): sdpa, no dropout, cache off"}
    peak_info = {"measured": peak.peak, "phase": peak.phase, "predicted": pk.peak, "predicted_phase": pk.phase,
                 "device": peak.device, "reserved": peak.reserved, "allocator_reserve": peak.allocator_reserve,
                 "by_phase": {"measured": dict(peak.by_phase), "predicted": pk.by_phase}}
    return FinetuneReport(f"{spec.shape.name} + {ft.method} r={ft.rank}", spec.shape.params, setup, categories,
                          list(zip(measured_layers, pred.per_layer, strict=False)),
                          (sum(step.outside_layers().values()), pred.outside), peak_info)


def load_spec(config: str | Path, layers: int | None = None):
    """The ``HFModel`` of a config path or shipped name, cut to ``layers`` layers."""
    return _spec(config, layers)
