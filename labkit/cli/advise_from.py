"""``labkit advise --from FILE`` and ``--export ENGINE FILE``: an engine's config in, the chosen plan out.

The file's values (``labkit.advisor.engines``) fill the command line's layout flags; a flag given on both sides
with two values is refused, naming the field. The profile is the engine's unless ``--framework`` names one.
"""

from __future__ import annotations

import argparse

from labkit.advisor import engines
from labkit.cli.common import parse_int
from labkit.errors import LabkitError
from labkit.shapes import ModelShape

SHAPE_FLAGS = ("model", "hf_config", "params", "layers", "hidden", "heads", "ffn")


def add_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--from", dest="from_file", help="an engine's config to price as it stands: a torchtitan job "
                   ".toml, a DeepSpeed ds_config .json, or Megatron-LM arguments (.sh, .args, .txt)")
    p.add_argument("--export", nargs=2, metavar=("ENGINE", "FILE"), help="write the chosen plan (the layout given, "
                   "else the best) as ENGINE's config: torchtitan, megatron, deepspeed")


def _same(a: str, b: str) -> bool:
    try:
        return float(a) == float(b)
    except ValueError:
        return a.strip().lower() == b.strip().lower()


def _set(a: argparse.Namespace, attr: str, value: str, path: str) -> None:
    given = getattr(a, attr, None)
    if given is None:
        setattr(a, attr, value)
    elif not _same(str(given), value):
        raise LabkitError(f"{attr} must be given once: {path} says {value}, the command line {given}")


def apply(a: argparse.Namespace) -> engines.EngineConfig | None:
    """Fill ``a`` from ``--from FILE``; the config read (None without ``--from``)."""
    if getattr(a, "from_file", None) is None:
        return None
    gpus = parse_int("gpus", a.gpus) if a.gpus is not None else None
    cfg = engines.read(a.from_file, gpus)
    lay = dict(cfg.layout)
    if "batch_per_dp" in lay:  # a ds_config without train_batch_size: dp is the GPUs over tp x pp x cp
        model = 1
        for name in ("tp", "pp", "cp"):
            model *= parse_int(name, getattr(a, name)) if getattr(a, name) is not None else 1
        g = int(lay["gpus"])
        if g % model:
            raise LabkitError(f"gpus must be a multiple of tp x pp x cp = {model} (got {g})")
        lay["dp"], lay["batch"] = str(g // model), str(int(lay.pop("batch_per_dp")) * (g // model))
    if cfg.engine == "deepspeed":  # a ds_config alone is data parallelism; --tp/--pp come from the model code
        lay |= {n: "1" for n in ("tp", "pp") if getattr(a, n) is None}
    for key, value in lay.items():
        _set(a, key, value, cfg.path)
    for field, value in cfg.overrides.items():
        _set(a, field, value, cfg.path)
    if a.framework is None and cfg.framework:
        a.framework = cfg.framework
    return cfg


def shape(a: argparse.Namespace, cfg: engines.EngineConfig) -> ModelShape | None:
    """The model the config gives (its preset, or its model flags completed by ``--vocab``/``--seq``), else None
    (the command line's shape flags give it)."""
    given = [f"--{f.replace('_', '-')}" for f in SHAPE_FLAGS if getattr(a, f, None)]
    if cfg.shape is None and not cfg.shape_fields:
        return None
    if given:
        raise LabkitError(f"model must be given once: {cfg.path} gives it, and so does {', '.join(given)}")
    if cfg.shape is not None:
        return cfg.shape
    fields = dict(cfg.shape_fields)
    for name in ("vocab", "seq"):
        if getattr(a, name, None) is not None and name not in fields:
            fields[name] = parse_int(name, getattr(a, name))
    missing = [n for n in ("vocab", "seq") if n not in fields]
    if missing:
        raise LabkitError(f"{' and '.join(missing)} must be given: {cfg.path} has the model's flags but not "
                          f"{', '.join('--' + {'vocab': 'vocab-size', 'seq': 'seq-length'}[n] for n in missing)}; "
                          f"add them there or pass {' '.join('--' + n for n in missing)}")
    return ModelShape(f"{cfg.engine}-model", **fields, source=f"model flags of {cfg.path}")


def chunks(a: argparse.Namespace, cfg: engines.EngineConfig | None, layers: int) -> None:
    """Set ``--chunks`` from the config's layers per virtual pipeline stage, once the model's layers are known."""
    if cfg is None or a.pp is None:
        return
    v = cfg.chunks(layers, parse_int("pp", a.pp))
    if v is not None:
        _set(a, "chunks", str(v), cfg.path)


def export(a: argparse.Namespace, adv: object, shape: ModelShape, batch: int, seq: int, profile: object) -> str:
    """Write the chosen plan (``--export ENGINE FILE``); the line saying what was written."""
    from labkit.hardware import host

    engine, path = a.export
    engine = engines.engine_of(path, engine)
    plan = adv.exact if adv.exact is not None else adv.best
    if plan is None:
        raise LabkitError("export needs a plan: no plan fits, and no whole layout was given (--dp --tp --pp)")
    per_node = parse_int("gpus_per_node", a.gpus_per_node) if a.gpus_per_node else host(adv.host).gpu_slots
    engines.write(engine, engines.ExportPlan(shape, plan.layout, batch, seq, per_node, profile), path)
    verdict = "fits" if plan.feasible else "does NOT fit"
    return f"wrote {plan.layout.label} ({verdict}) to {path} as a {engine} config"
