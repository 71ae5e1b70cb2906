"""The LoRA/QLoRA half of ``labkit.measure.fake_full``: a full-size fine-tuning step beside its prediction.

The categories are ``labkit.measure.finetune``'s (frozen base, adapters, their gradients and AdamW states,
activations) and the peak is ``labkit.predict.finetune_peak``'s, on the CPU and, with the CUDA-only terms,
on a GPU (``labkit.measure.fake_full`` says which terms those are).
"""

from __future__ import annotations

from labkit.measure.fake_report import FullReport, _report
from labkit.measure.fake_step import RecordedStep


def finetune_report(spec, ft, batch: int, seq: int, precision: str, trainer, rec: RecordedStep,
                    loss_chunks: int | None = None) -> FullReport:
    """The report of a recorded fine-tuning step (``rec``) of ``trainer``, beside ``finetune_bytes`` and its peak
    (with ``loss_chunks``: the activations beside ``labkit.predict.loss_chunks``'s, the peak not predicted)."""
    from labkit.measure.finetune import STORAGE, _frozen_bytes
    from labkit.measure.saved import unique_bytes
    from labkit.predict.finetune import finetune_bytes
    from labkit.predict.finetune_peak import FinetuneStep, finetune_peak

    pred = finetune_bytes(spec.shape, ft, seq, batch, precision)
    cpu = finetune_peak(FinetuneStep(spec.shape, ft, batch, seq, precision, "cpu"))
    on_cuda = finetune_peak(FinetuneStep(spec.shape, ft, batch, seq, precision, "cuda", 9))
    m, model = rec.memory, trainer.model
    acts, outside = pred.activations, pred.outside
    if loss_chunks is not None:
        from labkit.predict.finetune import outside_terms
        from labkit.predict.loss_chunks import chunked_outside

        e = 4 if precision == "fp32" else 2
        loss = sum(t.bytes for t in outside_terms(spec.shape, ft, seq, batch, e) if t.role == "loss")
        # the checkpoints save the final norm's output too, which a frozen output layer alone would not keep
        outside = chunked_outside(pred.outside, loss, batch, seq) + e * batch * seq * spec.shape.hidden
        acts, cpu, on_cuda = pred.activations - pred.outside + outside, None, None
    categories = {
        "frozen base weights": (_frozen_bytes(model), pred.frozen),
        "adapter parameters": (unique_bytes(p for p in model.parameters() if p.requires_grad), pred.adapters),
        "adapter gradients": (m.gradients, pred.gradients),
        "adapter optimizer states": (m.optimizer, pred.optimizer),
        "activations": (m.activations, acts),
    }
    storage = STORAGE[ft.method].format(scales="int8 scales of scales (double quantization)" if ft.double_quant
                                        else "fp32 scales")
    extra = {"finetune": ft.method, "lora_rank": ft.rank, "lora_alpha": ft.alpha or 2 * ft.rank,
             "lora_targets": list(ft.targets), "gradient_checkpointing": ft.checkpointing, "base storage": storage,
             "loss_chunks": loss_chunks}
    report = _report(f"{spec.shape.name} + {ft.method} r={ft.rank}", spec.shape.params, batch, seq, precision,
                     "sdpa", False, trainer, rec, categories, list(pred.per_layer), outside, cpu,
                     (acts, acts, None if on_cuda is None else on_cuda.peak),
                     "frozen base (labkit.predict.finetune): sdpa, no dropout, cache off", extra)
    return report

