"""One error type for bad input, so the API, the CLI and the widgets can all show it.

Every check names the field and what is allowed: a learner who types ``--zero 4``
should read ``zero_stage must be one of 0, 1, 2, 3 (got 4)``, not a traceback.
"""

from __future__ import annotations

import math
import os
import tomllib
from collections.abc import Iterable
from pathlib import Path
from typing import Any


class LabkitError(ValueError):
    """Bad input to labkit: the message names the field and the allowed values."""


def require_choice(field: str, value: Any, allowed: Iterable[Any]) -> Any:
    """Return ``value`` if it is one of ``allowed``, else raise naming the field."""
    options = list(allowed)
    if value not in options:
        shown = ", ".join(str(o) for o in options)
        raise LabkitError(f"{field} must be one of {shown} (got {value!r})")
    return value


def require_positive(field: str, value: Any, *, integer: bool = True) -> Any:
    """Return ``value`` if it is a positive number (an int when ``integer``)."""
    kind = "integer" if integer else "number"
    ok_type = isinstance(value, int) if integer else isinstance(value, (int, float))
    if isinstance(value, bool) or not ok_type or not value > 0:
        raise LabkitError(f"{field} must be a positive {kind} (got {value!r})")
    return value


# The lab's stated limits: sizes far above anything built (sources beside each), so a typo such as
# 1e12 is refused at once, in one line, instead of hanging a search or printing 0.00 GB per GPU.
LIMITS: dict[str, int] = {
    "gpus": 1 << 21,  # 2,097,152 devices: ~10x the largest announced cluster (xAI Colossus, 200k GPUs, 2025)
    "layers": 1 << 12,  # 4,096 layers: GPT-3 has 96, Llama 3.1 405B 126
    "hidden": 1 << 18,  # 262,144: GPT-3's width is 12,288, PaLM's 18,432
    "heads": 1 << 14,  # 16,384 attention heads: GPT-3 has 96
    "ffn": 1 << 20,  # 1,048,576: PaLM's feed-forward is 73,728 wide
    "vocab": 1 << 23,  # 8,388,608 tokens: Gemma's vocabulary is 256,000
    "seq": 1 << 24,  # 16,777,216 tokens: ~1.6x Gemini 1.5's 10M-token context
    "batch": 1 << 26,  # 67,108,864 sequences: GPT-3 trained with 1,600 (3.2M tokens) per step
}
LIMIT_OF = {"tp": "gpus", "pp": "gpus", "dp": "gpus", "ep": "gpus", "cp": "gpus", "chunks": "layers",
            "kv_heads": "heads", "micro_batch": "batch", "global_batch": "batch", "microbatches": "batch",
            "gpus_per_node": "gpus",
            "gpus-per-node": "gpus", "nodes": "gpus", "network_ports": "gpus",
            # transformers' config.json names (labkit.shapes.hf_config)
            "n_embd": "hidden", "hidden_size": "hidden", "n_layer": "layers", "num_hidden_layers": "layers",
            "n_head": "heads", "num_attention_heads": "heads", "num_key_value_heads": "heads", "vocab_size": "vocab",
            "n_inner": "ffn", "intermediate_size": "ffn", "n_positions": "seq", "max_position_embeddings": "seq"}


def require_limit(field: str, value: Any) -> Any:
    """Return ``value`` if it is within the stated limit for ``field`` (see :data:`LIMITS`); other fields pass."""
    kind = field if field in LIMITS else LIMIT_OF.get(field)
    if kind is not None and isinstance(value, (int, float)) and not value <= LIMITS[kind]:
        shown = f"{value:,}" if isinstance(value, int) else f"{value:g}"
        raise LabkitError(f"{field} must be at most {LIMITS[kind]:,} (the lab's limit for {kind}; got {shown})")
    return value


def require_finite(field: str, value: Any, *, low: float | None = None, high: float | None = None) -> float:
    """Return ``value`` as a float if it is a finite real number (within ``[low, high]`` when given)."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if ok and (low is None or value >= low) and (high is None or value <= high):
        return float(value)
    span = f" in [{low:g}, {high:g}]" if low is not None and high is not None else (
        f" >= {low:g}" if low is not None else (f" <= {high:g}" if high is not None else ""))  # fmt: skip
    raise LabkitError(f"{field} must be a finite number{span} (got {value!r})")


# One measured step may do at most this many FLOPs: on a laptop's CPU (tens of GFLOP/s) that is minutes,
# the most a cell or a command should block; on a GPU it is a fraction of a second (an H200 does ~8e14/s).
STEP_FLOPS_LIMIT = {"cpu": 1e13, "cuda": 1e17}


def available_memory_bytes(device: str = "cpu") -> int | None:
    """Bytes this machine could give a new allocation now (Linux MemAvailable, free pages elsewhere, CUDA's free)."""
    if device == "cuda":
        import torch

        return int(torch.cuda.mem_get_info()[0])
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def require_runnable(peak_bytes: float, step_flops: float, device: str = "cpu", *, field: str = "batch and seq",
                     what: str = "peak", fix: str = "lower --batch or --seq") -> None:
    """Refuse, before anything is allocated, a measured step whose predicted peak exceeds the free memory or
    whose FLOPs exceed :data:`STEP_FLOPS_LIMIT` (a run that would take hours, or die in the allocator)."""
    free = available_memory_bytes(device)
    if free is not None and peak_bytes > free:
        raise LabkitError(f"{field} must fit free memory: the predicted {what} is {peak_bytes / 1e9:.2f} GB, "
                          f"{free / 1e9:.2f} GB is free on this {device} ({fix})")
    limit = STEP_FLOPS_LIMIT.get(device, STEP_FLOPS_LIMIT["cpu"])
    if step_flops > limit:
        raise LabkitError(f"batch and seq must keep one step under {limit:.0e} FLOPs on the {device} "
                          f"(got {step_flops:.1e}: hours of compute; lower --batch or --seq)")


def divisors(n: int) -> list[int]:
    """Every divisor of ``n``, ascending, in O(sqrt n) steps (a trillion takes a million, not a trillion)."""
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return small + [n // d for d in reversed(small) if d * d != n]


def require_divides(field: str, value: int, other_field: str, other: int) -> None:
    """Raise unless ``value`` divides ``other`` (e.g. tp must divide heads)."""
    if other % value != 0:
        shown = ", ".join(str(d) for d in divisors(other))
        raise LabkitError(
            f"{field} must divide {other_field}={other}: allowed {shown} (got {value})"
        )


def read_toml(path: Path, what: str) -> dict[str, Any]:
    """A data file of ``datasets/`` parsed; an unreadable or malformed file names itself and ``what`` it is."""
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as err:
        raise LabkitError(f"{what} {str(path)!r} cannot be read: {err.strerror}") from None
    except tomllib.TOMLDecodeError as err:
        raise LabkitError(f"{what} {str(path)!r} is not valid TOML: {err}") from None
