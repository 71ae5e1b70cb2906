"""A full-size model's trainer built from its config under fake tensors: full training, LoRA and QLoRA.

Full training builds the transformers model inside ``FakeTensorMode`` (no weight is allocated), as
``labkit.measure.own_model`` builds it for real. A LoRA model cannot be made that way: peft swaps
weights with ``torch.utils.swap_tensors``, which a fake tensor refuses ("Couldn't swap Linear.weight").
So it is built on ``meta``, wrapped by peft there, then given fake storage with ``to_empty`` inside the
mode (the route torchtitan takes for meta-initialised models); QLoRA then replaces the frozen matrices by
the lab's NF4 storage (``labkit.measure.nf4``), whose quantization runs on fake tensors too.

The fake path's own limits are time and the host's memory per tensor, not bytes: ``check_limits``
refuses a model whose step would hold more than ``MAX_TENSORS`` parameter tensors or ``MAX_LAYERS``
layers (each costs Python objects, hooks and fake-kernel calls; 175B's 96 layers take about a minute).
"""

from __future__ import annotations

import warnings

import torch

from labkit.errors import LabkitError, require_positive
from labkit.shapes.hf_config import HFModel, from_config, resolve

MAX_LAYERS = 160
MAX_TENSORS = 4096
MAX_ELEMENTS = 2**62  # torch's element counts are int64; attention scores at long sequences reach them


def load(config, layers: int | None = None) -> HFModel:
    """The ``HFModel`` of a path, a shipped name or an ``HFModel``, cut to ``layers`` layers when given."""
    spec = config if isinstance(config, HFModel) else from_config(resolve(config))
    if layers is not None:
        key = "n_layer" if spec.family == "gpt2" else "num_hidden_layers"
        spec = from_config(spec.config | {key: require_positive("layers", layers), "_source": spec.source},
                           name=f"{spec.shape.name} ({layers} layers)")
    return spec


def check_limits(spec: HFModel, batch: int, seq: int) -> None:
    """One line for a step the fake path would take too long over, or whose sizes overflow int64."""
    from labkit.shapes.tensors import parameter_tensors

    sh = spec.shape
    if sh.layers > MAX_LAYERS:
        raise LabkitError(f"hf_config must have at most {MAX_LAYERS} layers for --full (got {sh.layers}): each "
                          "layer costs the fake path about a second; use --layers N")
    if len(parameter_tensors(sh)) > MAX_TENSORS:
        raise LabkitError(f"hf_config must have at most {MAX_TENSORS} parameter tensors for --full "
                          f"(got {len(parameter_tensors(sh))}); use --layers N")
    if seq > sh.seq:
        raise LabkitError(f"seq must be at most the model's {sh.seq} positions (got {seq})")
    if batch * sh.heads * seq * seq > MAX_ELEMENTS or batch * seq * sh.vocab > MAX_ELEMENTS:
        raise LabkitError("batch and seq must keep every tensor under 2^62 elements for --full")


def _ids(spec: HFModel, batch: int, seq: int) -> torch.Tensor:
    return torch.randint(0, spec.shape.vocab, (batch, seq), generator=torch.Generator().manual_seed(0))


@torch.no_grad()
def _cast(model: torch.nn.Module, dtype: torch.dtype) -> None:
    """``model.to(dtype)`` for fake tensors: every floating parameter (tied ones once) and buffer cast in place of
    the module's own ``_apply``, which swaps tensors and fails on fake ones ("Couldn't swap")."""
    new: dict[int, torch.nn.Parameter] = {}
    for m in model.modules():
        for name, p in list(m._parameters.items()):
            if p is not None and p.is_floating_point():
                if id(p) not in new:
                    new[id(p)] = torch.nn.Parameter(p.detach().to(dtype), requires_grad=p.requires_grad)
                m._parameters[name] = new[id(p)]
        for name, b in list(m._buffers.items()):
            if b is not None and b.is_floating_point():
                m._buffers[name] = b.to(dtype)


def _trainer(model: torch.nn.Module, ids: torch.Tensor, precision: str, loss_chunks: int | None = None):
    """``Trainer(model=..., precision=...)`` on fake tensors: the bf16-mixed cast done by ``_cast`` first;
    ``loss_chunks``: the loss over that many sequence chunks (``labkit.measure.chunked_loss``), else the model's."""
    from labkit.measure.chunked_loss import chunked_loss
    from labkit.rig.train import Trainer

    loss = None if loss_chunks is None else chunked_loss(loss_chunks)
    if precision != "bf16-mixed":
        return Trainer(model=model, data={"input_ids": ids, "labels": ids}, precision=precision, loss=loss)
    _cast(model, torch.bfloat16)
    model.to = lambda *a, **k: model  # already cast: the Trainer's own cast would try to swap
    try:
        return Trainer(model=model, data={"input_ids": ids, "labels": ids}, precision=precision, loss=loss)
    finally:
        del model.to


def full_trainer(spec: HFModel, batch: int, seq: int, precision: str, attention: str = "sdpa",
                 cache: bool = False, dropout: float | None = None, checkpointing: bool = False,
                 loss_chunks: int | None = None):
    """A ``Trainer`` of ``spec`` whose every tensor is fake; call it inside ``fake_mode()`` and ``fake_keys()``."""
    from labkit.shapes.hf_models import build_model

    model = build_model(spec, attention, device="cpu", dropout=dropout, use_cache=cache)
    if checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    return _trainer(model, _ids(spec, batch, seq), precision, loss_chunks)


def finetune_trainer(spec: HFModel, ft, batch: int, seq: int, precision: str, mode, loss_chunks: int | None = None):
    """``labkit.measure.finetune.finetune_trainer``'s model, built on meta, wrapped, then made fake in ``mode``
    (a ``fake_mode()`` not yet entered: peft must wrap the meta model outside it)."""
    from labkit.measure.finetune import _peft
    from labkit.predict.activation_options import _window
    from labkit.predict.finetune import MODULE_NAMES
    from labkit.shapes.hf_models import build_model

    ft.check(spec.shape, precision)
    if _window(spec, seq):
        raise LabkitError(f"seq must stay below the sliding window ({spec.config.get('sliding_window')}) with "
                          "finetune: the window's mask is not in the fine-tuning prediction")
    peft = _peft()
    model = build_model(spec, "sdpa", device="meta", dropout=0.0, use_cache=False)
    names = [MODULE_NAMES[spec.shape.gated][t] for t in ft.targets]
    cfg = peft.LoraConfig(r=ft.rank, lora_alpha=ft.alpha or 2 * ft.rank, target_modules=names, lora_dropout=0.0,
                          fan_in_fan_out=spec.family == "gpt2")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = peft.get_peft_model(model, cfg)
    with mode:
        model = model.to_empty(device="cpu")
        model.tie_weights() if hasattr(model, "tie_weights") else None
        if ft.checkpointing:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", FutureWarning)
                model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        trainer = _trainer(model, _ids(spec, batch, seq), precision, loss_chunks)
        if ft.method == "qlora":
            from labkit.measure.nf4 import quantize_base

            quantize_base(model.get_submodule(trainer.blocks), ft.double_quant)
    return trainer
