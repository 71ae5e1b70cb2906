"""``--finetune lora|qlora`` for ``labkit measure``, ``estimate`` and ``advise``: flags, checks and the verdict.

``measure`` runs a real LoRA/QLoRA step (``labkit.measure.finetune``); ``estimate`` judges one GPU on the
predicted whole-step peak (``labkit.predict.finetune_peak``) with the caching allocator's measured margin
(``labkit.predict.allocator``) and names the levers: gradient checkpointing and the longest sequence that
fits with it and without it; ``advise`` (``finetune_advice``) ranks the catalogue's cards for it.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import replace
from typing import Any

from labkit.cli.common import parse_int
from labkit.errors import LabkitError, require_choice
from labkit.predict.finetune import METHODS, Finetune, finetune_bytes, parse_targets
from labkit.predict.finetune_fit import fit, longest_seq
from labkit.predict.finetune_peak import FinetuneStep, finetune_peak
from labkit.shapes import ModelShape

GB, GIB = 1e9, 2**30


def add_finetune_flags(p: argparse.ArgumentParser, measuring: bool = False) -> None:
    """The fine-tuning flags; ``measuring`` leaves out ``--paged`` (the CPU's host is its device)."""
    p.add_argument("--finetune", help="lora or qlora: train low-rank adapters on a frozen (QLoRA: NF4) base")
    p.add_argument("--lora-rank", help="LoRA's rank r (default 8)")
    p.add_argument("--lora-alpha", help="LoRA's alpha (default 2 r): scales B A, changes no byte")
    p.add_argument("--lora-targets", help="comma-separated q,k,v,o,gate,up,down (GPT-2: qkv,o,up,down) or "
                   "all-linear; default q,v (GPT-2: qkv)")
    p.add_argument("--double-quant", action="store_true", help="qlora: 8-bit scales of the NF4 scales")
    p.add_argument("--gradient-checkpointing", action="store_true", help="keep each layer's input only; "
                   "recompute the layer in backward")
    if not measuring:
        p.add_argument("--paged", action="store_true", help="optimizer states on the host (paged optimizer)")


ANY = "--finetune lora or --finetune qlora"
# dest -> (flag, what it needs): each means nothing without --finetune, so given alone it is refused, not ignored
FINETUNE_ONLY = {"lora_rank": ("--lora-rank", ANY), "lora_alpha": ("--lora-alpha", ANY),
                 "lora_targets": ("--lora-targets", ANY), "double_quant": ("--double-quant", "--finetune qlora"),
                 "gradient_checkpointing": ("--gradient-checkpointing", ANY), "paged": ("--paged", ANY)}


def refuse_without_finetune(a: argparse.Namespace) -> None:
    """A fine-tuning flag given without ``--finetune`` would be silently ignored (even ``--lora-targets zz``):
    refuse it, naming the flag it needs. A subcommand without these flags passes unchecked."""
    if not hasattr(a, "finetune") or a.finetune is not None:
        return
    for dest, (flag, needs) in FINETUNE_ONLY.items():
        if getattr(a, dest, None) not in (None, False):
            raise LabkitError(f"{flag} needs {needs}: without it the flag changes nothing")


def finetune_from_args(a: argparse.Namespace, shape: ModelShape, precision: str) -> Finetune:
    """The ``Finetune`` the flags describe, checked against ``shape`` and ``precision``."""
    method = require_choice("finetune", a.finetune, METHODS)
    rank = parse_int("lora_rank", a.lora_rank if a.lora_rank is not None else "8", positive=False)
    if a.double_quant and method != "qlora":
        raise LabkitError(f"--double-quant needs --finetune qlora (got --finetune {method}): it quantizes the NF4 "
                          "base's scales, and LoRA's base is not quantized")
    alpha = None
    if a.lora_alpha is not None:
        try:
            alpha = float(a.lora_alpha)
        except ValueError:
            alpha = math.nan
        if not math.isfinite(alpha) or alpha <= 0:
            raise LabkitError(f"lora_alpha must be a positive finite number (got {a.lora_alpha!r})")
    ckpt = bool(a.gradient_checkpointing or getattr(a, "recompute", None) == "full")
    if getattr(a, "recompute", None) not in (None, "none", "full"):
        raise LabkitError(f"recompute must be none or full with --finetune (got {a.recompute!r})")
    ft = Finetune(method, rank, parse_targets(a.lora_targets, shape.gated), alpha, bool(a.double_quant),
                  bool(getattr(a, "paged", False)), ckpt)
    return ft.check(shape, precision)


def measure_finetune(a: argparse.Namespace, batch: int, seq: int, layers: int | None) -> Any:
    """``labkit measure --finetune``: one real LoRA/QLoRA step beside its prediction."""
    from labkit.measure.finetune import compare_finetune, load_spec

    if a.hf_config is None:
        raise LabkitError("finetune needs --hf-config: LoRA wraps a transformers model (GPT-2, Llama, Mistral, "
                          "Qwen2)")
    for flag, bad in (("attention", a.attention not in ("fused", "sdpa", "flash")), ("cache", a.cache),
                      ("dropout", a.dropout not in (None, "0", "0.0"))):
        if bad:
            raise LabkitError(f"{flag} must stay at sdpa attention, no cache and no dropout with --finetune "
                              "(the fine-tuning prediction assumes them)")
    precision = require_choice("precision", a.precision, ("fp32", "bf16-mixed"))
    spec = load_spec(a.hf_config, layers)
    ft = finetune_from_args(a, spec.shape, precision)
    return compare_finetune(spec, ft, batch, seq, precision, device=a.device or "cpu")


def estimate_finetune(a: argparse.Namespace, shape: ModelShape) -> dict[str, Any]:
    """``labkit estimate --finetune``: the step's categories, its peak and the verdict on ``--gpu``."""
    from labkit.hardware import load_catalogue

    if shape is None:
        raise LabkitError("finetune needs a model shape: --hf-config, --model or the shape flags (not --params)")
    if a.precision != "bf16-mixed":
        raise LabkitError(f"precision must be bf16-mixed with --finetune in estimate (got {a.precision!r})")
    for flag in ("tp", "pp"):
        if str(getattr(a, flag)) != "1":
            raise LabkitError(f"{flag} must be 1 with --finetune: one GPU holds the whole frozen base")
    ft = finetune_from_args(a, shape, "bf16-mixed")
    batch = parse_int("micro_batch", a.micro_batch)
    seq = parse_int("seq", a.seq) if a.seq is not None else shape.seq
    fb = finetune_bytes(shape, ft, seq, batch, "bf16-mixed")
    out: dict[str, Any] = {
        "model": shape.name, "params": shape.params, "finetune": {
            "method": ft.method, "rank": ft.rank, "targets": list(ft.targets), "double_quant": ft.double_quant,
            "paged": ft.paged, "gradient_checkpointing": ft.checkpointing, "adapter_params": fb.adapter_params},
        "micro_batch": batch, "seq": seq, "precision": "bf16-mixed",
        "bytes": {"frozen base": fb.frozen, "adapters": fb.adapters, "adapter gradients": fb.gradients,
                  "optimizer states": fb.optimizer, "activations": fb.activations}}
    pk = finetune_peak(FinetuneStep(shape, ft, batch, seq, "bf16-mixed", "cuda"))
    out["step_peak"] = {"bytes": pk.peak, "phase": pk.phase, "by_phase": pk.by_phase}
    if a.gpu is not None:
        device = load_catalogue().gpu(a.gpu)
        other = replace(ft, checkpointing=not ft.checkpointing)
        out |= {"gpu": device.name, "device_bytes": device.memory_bytes, "fit": fit(shape, ft, batch, seq, device),
                "levers": {"gradient_checkpointing " + ("off" if ft.checkpointing else "on"):
                           fit(shape, other, batch, seq, device)["headroom_bytes"],
                           "longest seq": longest_seq(shape, ft, batch, device),
                           "longest seq, checkpointing " + ("off" if ft.checkpointing else "on"):
                           longest_seq(shape, other, batch, device)}}
    return out


def format_finetune(out: dict[str, Any]) -> str:
    """The estimate for people, in GB (1e9 bytes) with GiB beside the verdict."""
    f = out["finetune"]
    lines = [f"{out['model']}: {out['params']:,} parameters frozen, {f['method']} rank {f['rank']} on "
             f"{','.join(f['targets'])} ({f['adapter_params']:,} trained), micro-batch {out['micro_batch']}, "
             f"seq {out['seq']}, bf16-mixed, gradient checkpointing {'on' if f['gradient_checkpointing'] else 'off'}"
             + (", double quantization" if f["double_quant"] else "") + (", paged optimizer" if f["paged"] else "")]
    lines += [f"  {k}: {v / GB:,.3f} GB" for k, v in out["bytes"].items()]
    pk = out["step_peak"]
    lines.append(f"whole-step peak (predicted, on a GPU): {pk['bytes'] / GB:,.2f} GB in the {pk['phase']} phase")
    if "gpu" in out:
        fit_, lev = out["fit"], out["levers"]
        gap = abs(fit_["headroom_bytes"])
        lines.append(f"{'fits' if fit_['fits'] else 'does not fit'} on {out['gpu']} ({fit_['usable_bytes'] / GB:,.2f} "
                     f"GB usable): {'spare' if fit_['fits'] else 'short by'} {gap / GB:,.2f} GB ({gap / GIB:,.2f} GiB)"
                     f"; the allocator's margin is {fit_['reserve_bytes'] / GB:,.2f} GB beyond the peak")
        for k, v in lev.items():
            lines.append(f"  lever: {k.replace('_', ' ')}: " + (f"{v:,} tokens" if k.startswith("longest") else
                                              f"{'spare' if v >= 0 else 'short by'} {abs(v) / GB:,.2f} GB"))
    return "\n".join(lines)
