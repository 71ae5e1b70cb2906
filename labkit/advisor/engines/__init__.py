"""Plans read from and written to the configs of the engines practitioners run.

``labkit advise --from FILE`` reads a torchtitan job TOML (``.toml``), a Megatron-LM argument list (``.sh``,
``.args``, ``.txt``: the arguments of ``pretrain_gpt.py``, optionally behind a ``torchrun`` launcher) or a DeepSpeed
``ds_config.json`` (``.json``) into the layout fields ``labkit advise`` prices (:class:`EngineConfig`), and
``--export ENGINE FILE`` writes a plan back in that engine's form (:func:`write`). A file from elsewhere is data:
TOML is parsed with ``tomllib``, JSON with ``json``, an argument list with ``shlex`` (no shell, nothing run), and
every file is bounded to ``MAX_BYTES``. Each reader lists the keys it read, the keys it ignored (profiling,
metrics, checkpoints, data: nothing a plan depends on) and the approximations it made, and refuses a value it
cannot price or a file that contradicts itself, naming the key and the allowed values.

The key and flag names are those of the engines' own sources (each reader's docstring names the file and
commit; ``tests/test_engines_*.py`` check every written name against them). Written by hand: the engines do not
install beside the lab's pinned torch, and their config classes import the whole engine.
"""

from __future__ import annotations

from pathlib import Path

from labkit.advisor.engines import deepspeed, megatron, torchtitan
from labkit.advisor.engines.config import ENGINES, MAX_BYTES, SUFFIXES, EngineConfig, ExportPlan, engine_of, read_text
from labkit.errors import LabkitError, require_choice

__all__ = ["ENGINES", "MAX_BYTES", "SUFFIXES", "EngineConfig", "ExportPlan", "engine_of", "read", "read_text",
           "render", "write"]


def read(path: str | Path, gpus: int | None = None, engine: str | None = None) -> EngineConfig:
    """Read the config at ``path`` (module text); ``gpus`` is the launcher's world size where the file does not
    say it (torchtitan's ``data_parallel_shard_degree = -1``, a Megatron list without ``torchrun``)."""
    name = engine_of(path, engine)
    reader = {"torchtitan": torchtitan.parse, "megatron": megatron.parse, "deepspeed": deepspeed.parse}[name]
    return reader(read_text(path), str(path), gpus)


def render(engine: str, plan: ExportPlan) -> str:
    """The text of ``plan`` in ``engine``'s form (one of ``ENGINES``)."""
    writer = {"torchtitan": torchtitan.render, "megatron": megatron.render, "deepspeed": deepspeed.render}
    return writer[require_choice("export", engine, ENGINES)](plan)


def write(engine: str, plan: ExportPlan, path: str | Path) -> str:
    """Write ``plan`` to ``path`` in ``engine``'s form; returns the text written."""
    text = render(engine, plan)
    try:
        Path(path).write_text(text, encoding="utf-8")
    except OSError as err:
        raise LabkitError(f"export file {str(path)!r} cannot be written: {err.strerror}") from None
    return text


