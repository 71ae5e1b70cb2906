"""The whole model's real step, measured under fake tensors beside ``labkit estimate``'s model, category by category.

``measure_full`` builds the full-size model of a config (``labkit.measure.fake_build``: no weight allocated),
trains one warm-up step so AdamW's states exist, and counts one step with the lab's counters
(``labkit.measure.fake_step.record_step``): parameters, gradients, optimizer states, the tensors autograd
saves, layer by layer, and the whole-step peak by phase. Every kernel runs its real shape logic (torch's
meta functions), so the bytes are a CPU step's bytes; the tests check that fake and real tensors count the
same on small models (``tests/test_fake_equivalence.py``). Each figure sits beside the prediction:
ZeRO's model states (Rajbhandari et al., SC 2020), ``labkit.predict.activation_options`` for the
activations and ``labkit.predict.step_peak`` (``finetune_peak`` for LoRA/QLoRA) for the peak.

A CPU-only torch has no fake CUDA device, so the terms only a GPU has are added analytically and listed
as such (``cuda``): cuBLAS's two workspaces and the batch on the device (``step_peak``), what CUDA's sdpa
kernels save instead of the CPU's (their seed and offset; with attention dropout the CPU falls back to the
math kernel, CUDA does not: ``activation_options``), and the caching allocator's 512-byte rounding, which is counted
exactly from the step's own storages. The allocator's reserve beyond the peak is a margin, not a need,
and is left to ``labkit.predict.allocator``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

from labkit.errors import LabkitError, require_choice, require_positive
from labkit.measure.fake_build import check_limits, finetune_trainer, full_trainer, load
from labkit.measure.fake_report import FullReport, _report
from labkit.measure.fake_step import RecordedStep, fake_keys, fake_mode, record_step

PRECISIONS = ("fp32", "bf16-autocast", "bf16-mixed")
RECOMPUTE = ("none", "full")  # labkit.predict.recompute_peak says why not selective
STAGES = ("building the model under fake tensors", "warm-up step (creates the optimizer states)",
          "measuring one step")


def _full_predictions(spec, batch: int, seq: int, precision: str, attention: str, cache: bool, dropout,
                      recompute: str = "none", loss_chunks: int | None = None):
    from labkit.predict.activation_options import ActivationOptions
    from labkit.predict.estimate import model_state_bytes
    from labkit.predict.recompute_peak import hf_recompute_peak

    states = model_state_bytes(spec.shape.params, "bf16-mixed" if precision == "bf16-mixed" else "fp32")
    if precision == "bf16-autocast":  # as in labkit.measure.own_model: autocast's copies are not modelled
        return states, None, None, None, None, "no activation prediction in bf16-autocast"
    e = 4 if precision == "fp32" else 2
    opt = ActivationOptions.for_model(spec, attention, cache=cache, act_bytes=e, dropout=dropout, seq=seq)
    if loss_chunks is None:
        cpu, per_layer, outside = hf_recompute_peak(spec, batch, seq, precision, attention, cache, dropout, "cpu",
                                                    recompute=recompute)
        on_cuda, cuda_layer, cuda_outside = hf_recompute_peak(spec, batch, seq, precision, attention, cache, dropout,
                                                              "cuda", 9, recompute)
    else:
        from labkit.predict.loss_chunks import hf_chunked_peak

        cpu, per_layer, outside = hf_chunked_peak(spec, batch, seq, precision, loss_chunks, attention, cache, dropout)
        on_cuda, cuda_layer, cuda_outside = hf_chunked_peak(spec, batch, seq, precision, loss_chunks, attention,
                                                            cache, dropout, "cuda", 9)
    assumes = (f"{opt.attention} attention, {opt.activation}, {opt.norm}, cache {'on' if opt.cache else 'off'}, "
               + (f"{opt.mask_bytes}-byte dropout masks" if opt.mask_bytes else "no dropout")
               + (", full recompute: each layer's input (labkit.predict.recompute_peak)" if recompute == "full"
                  else "") + (f", loss over {loss_chunks} chunks (labkit.predict.loss_chunks)" if loss_chunks else ""))
    cuda_acts = cuda_layer * spec.shape.layers + cuda_outside
    return states, (per_layer, outside), cpu, (cuda_acts, on_cuda), opt, assumes


def warm_up(trainer) -> None:
    """What the warm-up step leaves behind, without its forward and backward: AdamW's states, made by one
    optimizer step on zero gradients (under fake tensors the values mean nothing, the states' storages are
    what the measured step starts with). Halves a full-size fake run; the equivalence tests run it too."""
    import torch

    from labkit.rig.step import optimizer_step

    with torch.no_grad():
        for p in trainer.model.parameters():
            if p.requires_grad:
                p.grad = torch.zeros_like(p)
    optimizer_step(trainer.optimizer)
    trainer.steps_done = 1


def _steps(trainer, say: Callable[[str], None]) -> RecordedStep:
    say(STAGES[1])
    warm_up(trainer)
    say(STAGES[2])
    return record_step(trainer)


def _bar(progress):
    if progress is not None:
        return progress, lambda: None
    from tqdm.auto import tqdm

    bar = tqdm(total=len(STAGES), desc="labkit measure --full", file=sys.stderr, leave=False)

    def say(what: str) -> None:
        bar.update(0 if what == STAGES[0] else 1)
        bar.set_postfix_str(what)

    return say, bar.close


def measure_full(config, batch: int = 1, seq: int = 2048, precision: str = "bf16-mixed", attention: str = "sdpa",
                 cache: bool = False, dropout: float | None = None, layers: int | None = None,
                 finetune=None, progress: Callable[[str], None] | None = None, recompute: str = "none",
                 loss_chunks: int | None = None) -> FullReport:
    """The full-size model's step under fake tensors beside its prediction (``finetune``: a ``Finetune``;
    ``recompute``: none or full, transformers' gradient checkpointing of every layer, for full training;
    ``loss_chunks``: the loss over that many sequence chunks, ``labkit.measure.chunked_loss``)."""
    require_positive("batch", batch)
    require_positive("seq", seq)
    require_choice("precision", precision, PRECISIONS)
    require_choice("attention", attention, ("eager", "sdpa"))
    require_choice("recompute", recompute, RECOMPUTE)
    if finetune is not None and recompute != "none":
        raise LabkitError("recompute applies to full training; with finetune, use Finetune(checkpointing=True)")
    if loss_chunks is not None:
        if not 1 <= loss_chunks <= seq:
            raise LabkitError(f"loss_chunks must be between 1 and seq ({seq}) (got {loss_chunks})")
        if recompute != "none" or precision == "bf16-autocast" or cache:
            raise LabkitError("loss_chunks takes recompute none, cache off and precision fp32 or bf16-mixed (the "
                              "chunked loss's prediction assumes them)")
    spec = load(config, layers)
    check_limits(spec, batch, seq)
    say, close = _bar(progress)
    try:
        say(STAGES[0])
        mode = fake_mode()
        with fake_keys():
            if finetune is not None:
                if precision not in ("fp32", "bf16-mixed") or attention != "sdpa" or cache or dropout:
                    raise LabkitError("finetune takes precision fp32 or bf16-mixed, sdpa attention, no cache and no "
                                      "dropout (the fine-tuning prediction assumes them)")
                trainer = finetune_trainer(spec, finetune, batch, seq, precision, mode, loss_chunks)
            else:
                with mode:
                    trainer = full_trainer(spec, batch, seq, precision, attention, cache, dropout,
                                           checkpointing=recompute == "full", loss_chunks=loss_chunks)
            with mode:
                rec = _steps(trainer, say)
            if finetune is not None:
                from labkit.measure.fake_full_ft import finetune_report

                return finetune_report(spec, finetune, batch, seq, precision, trainer, rec, loss_chunks)
            return _full_report(spec, batch, seq, precision, attention, cache, dropout, trainer, rec, recompute,
                                loss_chunks)
    finally:
        close()


def _full_report(spec, batch, seq, precision, attention, cache, dropout, trainer, rec: RecordedStep,
                 recompute: str = "none", loss_chunks: int | None = None) -> FullReport:
    states, acts, cpu, cuda, _opt, assumes = _full_predictions(spec, batch, seq, precision, attention, cache, dropout,
                                                               recompute, loss_chunks)
    m = rec.memory
    per_layer, outside = acts if acts else (None, None)
    total = None if acts is None else per_layer * spec.shape.layers + outside
    categories = {"parameters": (m.parameters, states["parameters"]), "gradients": (m.gradients, states["gradients"]),
                  "optimizer states": (m.optimizer, states["optimizer"]), "activations": (m.activations, total)}
    on_cuda = None if cuda is None else (cuda[0], total, cuda[1].peak)
    return _report(spec.shape.name, spec.shape.params, batch, seq, precision, attention, cache, trainer, rec,
                   categories, per_layer, outside, cpu, on_cuda, assumes,
                   {"recompute": recompute, "loss_chunks": loss_chunks})
