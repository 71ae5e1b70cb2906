"""Damage a checkpoint on purpose and show that it is caught and the previous one is used.

Four faults a storage system really produces: a flipped byte (silent data corruption),
a truncated file (a write cut short, a full disk), a missing shard file (a lost object, a
half-copied directory), and a checkpoint of a different model (a wrong path or config).
Each case writes two good checkpoints, damages the newer one, and asks
:func:`labkit.resilience.scan.latest_valid` which one to use.
"""

from __future__ import annotations

import shutil
import textwrap
from dataclasses import dataclass, replace
from pathlib import Path

from labkit.errors import require_choice
from labkit.resilience.checkpoint import save_checkpoint
from labkit.resilience.scan import latest_valid
from labkit.rig.train import TrainConfig, Trainer

CORRUPTIONS = ("flipped byte", "truncation", "missing shard", "wrong model shape")


@dataclass(frozen=True)
class CorruptionCase:
    """What was damaged, whether it was detected, the message, and which step was used instead."""

    kind: str
    damaged_step: int
    detected: bool
    reason: str
    used_step: int | None

    def reason_lines(self, width: int = 100, items: int = 2) -> list[str]:
        """The reason wrapped at whole words: its first ``items`` findings (``;``-separated) and how many more."""
        parts = self.reason.split("; ")
        shown = "; ".join(parts[:items]) + (f"; and {len(parts) - items} more" if len(parts) > items else "")
        return textwrap.wrap(shown, width)


def _data_file(path: Path) -> Path:
    return sorted(path.glob("*.distcp"))[0]


def damage(path: str | Path, kind: str) -> None:
    """Apply one of :data:`CORRUPTIONS` (except the wrong shape) to the checkpoint at ``path``."""
    require_choice("kind", kind, CORRUPTIONS[:3])
    f = _data_file(Path(path))
    if kind == "flipped byte":
        data = bytearray(f.read_bytes())
        data[len(data) // 2] ^= 0x01
        f.write_bytes(bytes(data))
    elif kind == "truncation":
        with open(f, "r+b") as fh:
            fh.truncate(f.stat().st_size // 2)
    else:
        f.unlink()


def corruption_report(root: str | Path, cfg: TrainConfig, every: int = 2) -> tuple[CorruptionCase, ...]:
    """Each kind of damage on the newer of two checkpoints; ``latest_valid`` should fall back to the older."""
    root = Path(root)
    cases = []
    for kind in CORRUPTIONS:
        d = root / kind.replace(" ", "_")
        shutil.rmtree(d, ignore_errors=True)
        trainer = Trainer(cfg)
        trainer.run(every)
        save_checkpoint(trainer, d)
        trainer.run(every)
        if kind == "wrong model shape":  # the newer checkpoint comes from a wider model
            other = Trainer(replace(cfg, model=replace(cfg.model, d_model=2 * cfg.model.d_model)))
            other.run(trainer.steps_done)
            save_checkpoint(other, d)
        else:
            damage(save_checkpoint(trainer, d).path, kind)
        newer = trainer.steps_done
        scan = latest_valid(d, trainer)
        reasons = [r.reason for r in scan.rejected if r.name.endswith(f"{newer:08d}")]
        cases.append(CorruptionCase(kind, newer, bool(reasons), reasons[0] if reasons else "", scan.step))
    return tuple(cases)
