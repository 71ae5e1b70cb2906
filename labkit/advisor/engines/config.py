"""The engines' shared types: a config read (:class:`EngineConfig`), a plan to write (:class:`ExportPlan`), and
the checks every reader makes (``labkit.advisor.engines``)."""


from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from labkit.errors import LabkitError, require_choice
from labkit.shapes import ModelShape

ENGINES = ("torchtitan", "megatron", "deepspeed")
SUFFIXES = {".toml": "torchtitan", ".json": "deepspeed", ".sh": "megatron", ".args": "megatron", ".txt": "megatron"}
MAX_BYTES = 1 << 20  # a job config is a few kB; anything past 1 MiB is not one


@dataclass(frozen=True)
class EngineConfig:
    """What an engine's config says about a plan, in ``labkit advise``'s terms.

    ``layout`` holds the command line's layout values as text (``dp``, ``tp``, ``pp``, ``cp``, ``micro_batch``,
    ``chunks``, ``zero``, ``recompute``, ``schedule``, ``offload``, ``precision``, ``sp``, ``attention``,
    ``first_stage_layers``, ``last_stage_layers``, ``batch``, ``seq``, ``gpus``) and ``overrides``
    the profile assumptions the file sets (``assumptions.FLAGS``' names, ``on``/``off`` or a number)."""

    engine: str
    path: str
    layout: dict[str, str]
    overrides: dict[str, str] = field(default_factory=dict)
    framework: str = ""  # the profile the engine runs as, used unless --framework names one
    shape: ModelShape | None = None
    shape_fields: dict[str, object] = field(default_factory=dict)  # a partial shape from model flags (no vocab)
    read: tuple[str, ...] = ()
    ignored: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    # (layers per virtual pipeline stage, extra layers the engine counts): the interleaved schedule's model chunks
    # per GPU follow from the model's layers, (layers + extra) / (pp x per stage) (:meth:`chunks`)
    virtual_stage_layers: tuple[int, int] | None = None

    def chunks(self, layers: int, pp: int) -> int | None:
        """Model chunks per GPU of an interleaved schedule given per virtual stage, else None."""
        if self.virtual_stage_layers is None:
            return None
        per, extra = self.virtual_stage_layers
        if (layers + extra) % (pp * per):
            raise LabkitError(f"layers per virtual pipeline stage must divide the {layers + extra} layers over {pp} "
                              f"stages into whole model chunks (got {per})")
        return (layers + extra) // (pp * per)

    def summary(self) -> str:
        """The lines ``labkit advise`` prints about the file: what it read, ignored and approximated."""
        out = [f"read from {self.path} ({self.engine}): {', '.join(self.read) or 'nothing'}"]
        if self.ignored:
            out.append(f"ignored (no bearing on the plan): {', '.join(self.ignored)}")
        out += [f"note: {n}" for n in self.notes]
        return "\n".join(out)


@dataclass(frozen=True)
class ExportPlan:
    """A plan as a writer needs it: the model, the layout, the step's batch and sequence, and the profile's
    overlap assumptions (written as the engine's own overlap switches)."""

    shape: ModelShape
    layout: object  # advisor.layout.Layout
    batch: int
    seq: int
    gpus_per_node: int
    profile: object  # predict.profiles.Profile, with the user's overrides applied


def engine_of(path: str | Path, engine: str | None = None) -> str:
    """The engine a config file belongs to: ``engine`` if given, else from its suffix (``SUFFIXES``)."""
    if engine is not None:
        return require_choice("engine", engine, ENGINES)
    suffix = Path(path).suffix.lower()
    if suffix not in SUFFIXES:
        raise LabkitError(f"from must name a .toml (torchtitan), .json (DeepSpeed) or .sh/.args/.txt (Megatron-LM "
                          f"arguments) file (got {str(path)!r})")
    return SUFFIXES[suffix]


def read_text(path: str | Path) -> str:
    """A config file's text, bounded to ``MAX_BYTES``; an unreadable file names itself."""
    p = Path(path)
    try:
        size = p.stat().st_size
        if size > MAX_BYTES:
            raise LabkitError(f"from must be a config file under {MAX_BYTES:,} bytes (got {size:,} bytes in "
                              f"{str(p)!r})")
        return p.read_text(encoding="utf-8")
    except OSError as err:
        raise LabkitError(f"from file {str(p)!r} cannot be read: {err.strerror}") from None
    except UnicodeDecodeError:
        raise LabkitError(f"from file {str(p)!r} is not UTF-8 text") from None


def whole(key: str, value: object, *, low: int = 1) -> int:
    """An integer key of a config file (``low`` or more), else a LabkitError naming the key."""
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise LabkitError(f"{key} must be an integer >= {low} (got {value!r})")
    return value


def flag(value: object, key: str) -> bool:
    """A boolean key of a config file, else a LabkitError naming the key."""
    if not isinstance(value, bool):
        raise LabkitError(f"{key} must be true or false (got {value!r})")
    return value
