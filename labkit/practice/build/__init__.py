"""Build it yourself: graduate exercises in which the learner writes a whole component in a module file.

One per systems notebook: ZeRO stages 1 and 2 and a 1F1B executor (02), Megatron's tensor-parallel layers (03),
activation offload (04/05), a sharded atomic checkpoint (06). Each check is split by trust
(:mod:`labkit.practice.build.harness`): parameters drawn per run, the learner's module run only inside ranks that
bring back plain records (:mod:`labkit.practice.build.records`), and a judge that computes its own reference, names
the bug the evidence shows and steps its hints up one per failed try (:mod:`labkit.practice.build.feedback`).
Reference solutions and hidden runs live in ``instructor/build/``, outside the package and the student release.
"""

from __future__ import annotations

import importlib
from pathlib import Path

from labkit.practice.build.feedback import check_build  # noqa: F401 - draw, collect, judge, feedback, journal
from labkit.practice.build.harness import (  # noqa: F401 - the package's API, as notebooks call it
    BUILDS,
    BuildExercise,
    collect_record,
    draw_params,
    hidden_params,
    judge_record,
    load_module,
    open_stub,
    register_build,
)

EXERCISES = ("zero1", "zero2", "onef1b", "tp_layers", "sp_block", "act_offload", "selective_recompute",
             "sharded_ckpt")  # importing each registers it
for _name in EXERCISES:
    if (Path(__file__).parent / f"{_name}.py").is_file():  # one not yet written is skipped
        importlib.import_module(f"labkit.practice.build.{_name}")
