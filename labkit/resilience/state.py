"""Everything a Trainer needs to continue bit-identically, as one flat dict of named tensors.

A resumed run repeats the uninterrupted one bit for bit only if *all* of its state comes
back: the model's weights, the optimizer's moments and step counts (and fp32 master weights
under ``bf16-mixed``), the random generator that draws the dropout masks, and the data
position. The data position is just the step: ``labkit.rig.data`` makes batch ``i`` a pure
function of ``i``. Python's ``random`` is not used by the training loop, so it is not kept.

Keys (all values are tensors, so a checkpoint holds no pickled objects):

* ``model/<name>``: the model's ``state_dict`` (parameters and buffers);
* ``master/<name>``: fp32 master weights (``bf16-mixed`` only);
* ``optim/<name>/<key>``: AdamW's ``step``, ``exp_avg``, ``exp_avg_sq`` per parameter;
* ``rng/torch/rank<r>``: ``torch.get_rng_state()`` of this rank;
* ``progress/steps_done``: the step to train next.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict

import torch
import torch.nn as nn

from labkit.errors import LabkitError
from labkit.rig.data import Batches
from labkit.rig.train import MasterWeightAdamW, Trainer

STEPS_KEY = "progress/steps_done"
DTYPES = {str(d).removeprefix("torch."): d for d in (torch.float32, torch.float64, torch.bfloat16, torch.float16,
                                                    torch.int64, torch.int32, torch.uint8, torch.bool)}  # fmt: skip


_DIGESTS: dict[tuple[int, int, str], str] = {}


def _tokens_digest(tokens: torch.Tensor, batching: str) -> str:
    """The token stream's digest, hashed once per tensor (the corpus is ~1M tokens: ~20 ms a hash), not per save."""
    key = (tokens.data_ptr(), tokens.numel(), batching)
    if key not in _DIGESTS:
        h = hashlib.sha256(tokens.numpy().tobytes())
        h.update(batching.encode())
        _DIGESTS[key] = h.hexdigest()[:16]
    return _DIGESTS[key]


def run_identity(trainer: Trainer) -> dict[str, object]:
    """What makes two runs the same run: seed, data (a digest of the token stream) and configuration (a digest).

    Recorded in every checkpoint's manifest and compared on resume, so a checkpoint of another
    run with the same shapes (another seed, corpus or learning rate) is refused, not continued.
    """
    cfg, data = getattr(trainer, "cfg", None), trainer.data
    if isinstance(data, Batches):
        data_id = _tokens_digest(data.tokens, f"{data.batch_size}:{data.seq_len}:{data.seed}")
    else:
        data_id = f"user data ({type(data).__name__})"
    shown = asdict(cfg) if cfg is not None else {"model": type(trainer.model).__name__}
    shown["precision"] = trainer.precision
    config = hashlib.sha256(json.dumps(shown, sort_keys=True, default=str).encode()).hexdigest()[:16]
    return {"seed": cfg.seed if cfg is not None else None, "data": data_id, "config": config}


def rng_key(rank: int = 0) -> str:
    return f"rng/torch/rank{rank}"


def _named_params(model: nn.Module) -> list[tuple[str, nn.Parameter]]:
    return list(model.named_parameters())  # tied weights appear once, under their first name


def _optim_slots(trainer: Trainer) -> list[tuple[str, torch.Tensor]]:
    """(parameter name, the tensor the optimizer keys its state by), in parameter order."""
    named = _named_params(trainer.model)
    if isinstance(trainer.optimizer, MasterWeightAdamW):
        return [(n, m) for (n, _), m in zip(named, trainer.optimizer.master, strict=True)]
    return named


def _inner(trainer: Trainer) -> torch.optim.Optimizer:
    opt = trainer.optimizer
    return opt.inner if isinstance(opt, MasterWeightAdamW) else opt


def flat_state(trainer: Trainer, rank: int = 0) -> dict[str, torch.Tensor]:
    """The trainer's full state; model and optimizer entries alias the live tensors (no copy)."""
    state: dict[str, torch.Tensor] = {f"model/{k}": v for k, v in trainer.model.state_dict().items()}
    inner = _inner(trainer)
    for name, slot in _optim_slots(trainer):
        if isinstance(trainer.optimizer, MasterWeightAdamW):
            state[f"master/{name}"] = slot.detach()
        for key, value in inner.state.get(slot, {}).items():
            state[f"optim/{name}/{key}"] = value
    state[rng_key(rank)] = torch.get_rng_state()
    state[STEPS_KEY] = torch.tensor(trainer.steps_done, dtype=torch.int64)
    return state


def expected_entries(trainer: Trainer) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
    """Shape and dtype every ``model/`` and ``master/`` entry must have for this trainer's model."""
    out = {f"model/{k}": (tuple(v.shape), v.dtype) for k, v in trainer.model.state_dict().items()}
    if isinstance(trainer.optimizer, MasterWeightAdamW):
        out |= {f"master/{n}": (tuple(p.shape), torch.float32) for n, p in _named_params(trainer.model)}
    return out


def check_compatible(trainer: Trainer, saved: dict[str, tuple[tuple[int, ...], torch.dtype]],
                     rank: int = 0) -> list[str]:
    """Reasons the saved entries (key -> (shape, dtype)) cannot be loaded into ``trainer``; empty if they can."""
    want = expected_entries(trainer)
    params = {n: tuple(p.shape) for n, p in _named_params(trainer.model)}
    problems = [f"missing entry {k}" for k in want if k not in saved]
    for key, (shape, dtype) in saved.items():
        if key in want and want[key][0] != shape:
            problems.append(f"parameter {key.split('/', 1)[1]}: checkpoint shape {shape}, model shape {want[key][0]}")
        elif key in want and want[key][1] != dtype:
            problems.append(f"parameter {key.split('/', 1)[1]}: checkpoint dtype {dtype}, model dtype {want[key][1]}")
        elif key.startswith("optim/"):
            name, slot = key[len("optim/"):].rsplit("/", 1)
            if name not in params:
                problems.append(f"optimizer state {key} for a parameter the model does not have")
            elif slot != "step" and shape != params[name]:
                problems.append(f"optimizer state {key}: checkpoint shape {shape}, model shape {params[name]}")
        elif key not in want and not key.startswith(("rng/", "optim/")) and key != STEPS_KEY:
            problems.append(f"unexpected entry {key}")
    for key in (rng_key(rank), STEPS_KEY):
        if key not in saved:
            problems.append(f"missing entry {key}")
    return problems


def template(trainer: Trainer, saved: dict[str, tuple[tuple[int, ...], torch.dtype]],
             rank: int = 0) -> dict[str, torch.Tensor]:
    """Fresh tensors to load a checkpoint into, so a load that fails halfway leaves ``trainer`` untouched.

    ``saved`` maps key -> (shape, dtype) as read from the checkpoint's index; the
    optimizer may not have stepped yet, so its state tensors are allocated from it.
    """
    state: dict[str, torch.Tensor] = {f"model/{k}": torch.empty_like(v) for k, v in trainer.model.state_dict().items()}
    for key, (shape, dtype) in saved.items():
        if key.startswith(("optim/", "master/")) or key in (rng_key(rank), STEPS_KEY):
            state[key] = torch.empty(shape, dtype=dtype)
    return state


@torch.no_grad()
def restore(trainer: Trainer, state: dict[str, torch.Tensor], rank: int = 0) -> None:
    """Put a loaded flat state into ``trainer`` (model tensors were loaded in place or are copied)."""
    live = trainer.model.state_dict()
    for key, value in live.items():
        if state[f"model/{key}"].data_ptr() != value.data_ptr():
            value.copy_(state[f"model/{key}"])
    inner = _inner(trainer)
    for name, slot in _optim_slots(trainer):
        if isinstance(trainer.optimizer, MasterWeightAdamW):
            slot.copy_(state[f"master/{name}"])
        prefix = f"optim/{name}/"
        found = {k[len(prefix):]: v.clone() for k, v in state.items() if k.startswith(prefix)}
        if found:
            inner.state[slot] = found
        else:
            inner.state.pop(slot, None)
    torch.set_rng_state(state[rng_key(rank)].clone())
    trainer.steps_done = int(state[STEPS_KEY])


def to_bytes(state: dict[str, torch.Tensor]) -> tuple[str, torch.Tensor]:
    """A flat state as (JSON layout, one uint8 buffer): what goes over the wire to a peer."""
    layout, parts = [], []
    for key, t in state.items():
        t = t.detach().contiguous()
        layout.append([key, str(t.dtype).removeprefix("torch."), list(t.shape)])
        parts.append(t.reshape(-1).view(torch.uint8))
    return json.dumps(layout), torch.cat(parts) if parts else torch.empty(0, dtype=torch.uint8)


def from_bytes(layout: str, buf: torch.Tensor) -> dict[str, torch.Tensor]:
    """Inverse of :func:`to_bytes`; a layout is data (JSON), never code."""
    state, offset = {}, 0
    for key, dtype_name, shape in json.loads(layout):
        if dtype_name not in DTYPES:
            raise LabkitError(f"dtype must be one of {', '.join(DTYPES)} (got {dtype_name!r} for {key})")
        dtype = DTYPES[dtype_name]
        numel = 1
        for s in shape:
            numel *= s
        n = numel * dtype.itemsize
        state[key] = buf[offset:offset + n].clone().view(dtype).reshape(shape)
        offset += n
    if offset != buf.numel():
        raise LabkitError(f"peer buffer holds {buf.numel()} bytes, its layout describes {offset}")
    return state


def digest(state: dict[str, torch.Tensor], prefix: str = "") -> str:
    """sha256 of the bytes of every entry whose key starts with ``prefix``: equal digests, equal bits."""
    h = hashlib.sha256()
    for key in sorted(k for k in state if k.startswith(prefix)):
        t = state[key].detach().contiguous()
        h.update(f"{key}:{t.dtype}:{tuple(t.shape)};".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()
