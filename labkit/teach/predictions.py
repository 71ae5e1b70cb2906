"""Predictions: each has a stable id, registered here per notebook, and is locked by its first reveal.

A prediction is worth making only if it is made before the answer is seen. The rules, all
read from the journal (so they survive a kernel restart):

* the committed guess is the one in force when the prediction's reveal first runs;
* a reveal run with no guess (what "Run All" does) shows no answer and records "no guess";
  the cells below it show the measurement, so a guess set afterwards is "after reveal";
* ``predict(key, PASS)`` passes explicitly: recorded as "no guess", and the reveal shows the answer;
* a guess that is not one ("25%" for a fraction) is refused and reveals nothing.

Ids read ``NN.predict.name``; the question text is what the instructor's key prints.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass

from labkit.errors import require_choice
from labkit.teach import journal


@dataclass(frozen=True)
class Prediction:
    """A registered prediction: what it asks and the kind of guess ("number", "choice" or "claims")."""

    question: str
    kind: str = "number"


def _n(q: str) -> Prediction:
    return Prediction(q, "number")


def _c(q: str) -> Prediction:
    return Prediction(q, "claims")


PREDICTIONS: dict[str, Prediction] = {
    "01.predict.largest_category": Prediction("the largest category of the tiny GPT's training-step memory",
                                              "choice"),
    "01.predict.activations_over_half": _c("where activations are more than half of the memory"),
    "01.predict.llama7b_gb": _n("GB (1e9 B) Llama-2 7B needs on one GPU (predicted)"),
    "01.predict.llama3_interruptions": _n("unexpected interruptions in Llama 3's 54 days (published)"),
    "02.predict.zero3_share": _n("share of DDP's bytes per rank kept under ZeRO-3 on 4 ranks (measured)"),
    "02.predict.zero3_traffic": _n("ZeRO-3 traffic over DDP traffic (measured)"),
    "02.predict.gpipe_peak": _n("micro-batches in flight on rank 0 under GPipe, p=4 m=8 (measured)"),
    "02.predict.one_f_one_b_peak": _n("micro-batches in flight on rank 0 under 1F1B, p=4 m=8 (measured)"),
    "02.predict.pipedream_versions": _n("weight versions PipeDream keeps at stage 0 (measured)"),
    "03.predict.act_share_tp4": _n("share of a layer's activations kept per rank at t=4 (measured)"),
    "03.predict.keeps_fewest": _c("which tensor-parallel modes keep the fewest activation bytes (measured)"),
    "04.predict.same_sequence": _c("whether iterations 2 and 3 run the same tensor sequence (measured)"),
    "04.predict.fits_and_changes": _c("whether the offloaded step fits, and whether its parameters differ "
                                      "from a run without offload (measured)"),
    "04.predict.pcie_stall": _c("whether the A100 waits for PCIe at micro-batch 1 (predicted)"),
    "04.predict.search_overhead": _n("search's median slowdown at oversubscription 1.5, in % (predicted)"),
    "04.predict.bytes_per_param": _n("bytes per parameter ZeRO-Offload moves a step (measured)"),
    "04.predict.batch_ratio": _n("FlashNeuron's batch ratio under its rule (predicted)"),
    "05.predict.zstd_ratio": _n("zstd-3's compression ratio on fp32 weights (measured)"),
    "05.predict.full_recompute_share": _n("share of a layer's activations kept under full recompute, in % "
                                          "(measured)"),
    "05.predict.mixed_bytes": _n("bytes per parameter under fp16 mixed precision (measured)"),
    "05.predict.flushed_share": _n("share of gradients flushed to zero without loss scaling, in % (measured)"),
    "05.predict.state_bytes_8bit": _n("bytes per parameter with 8-bit AdamW (measured)"),
    "05.predict.trains_as_well": _c("whether 8-bit AdamW trains as well as fp32 (measured)"),
    "05.predict.fits_xl": _c("whether GPT-2 XL fits an RTX 4090 with no recompute, and with full (predicted)"),
    "05.predict.lora_7b_gb": _n("GB (1e9 B) at the peak of a Llama-2 7B LoRA step, r = 16 on W_q and W_v, "
                                "micro-batch 1, 1,024 tokens, bf16 mixed (predicted)"),
    "05.predict.qlora_base_gb": _n("GB (1e9 B) of Llama-2 7B's frozen base in QLoRA's NF4 (predicted)"),
    "06.predict.per_day_16k": _n("failures a day on 16,384 GPUs at Llama 3's rate"),
    "06.predict.per_day_100k": _n("failures a day on 100,000 GPUs at Llama 3's rate"),
    "06.predict.bit_identical": _c("whether a resumed run is bit-identical to an uninterrupted one (measured)"),
    "06.predict.most_lost": _n("the most steps lost to a kill (measured)"),
    "06.predict.best_interval": _n("the best checkpoint interval, in minutes (simulated)"),
    "06.predict.rc_lost": _n("steps lost with redundant computation (measured)"),
    "07.predict.hbm_over_ssd": _n("HBM's price per GB over SSD's"),
    "07.predict.dram_read_fmas": _n("FMAs that cost as much energy as one DRAM read (Han et al.)"),
    "07.predict.offload_cheaper": _c("whether offload rents for less than all in HBM (predicted)"),
    "08.predict.stall_cut": _n("stall removed by the trace-aware schedule, in % (simulated)"),
    "08.predict.near_faster": _c("whether near-data processing is faster (predicted)"),
    "08.predict.adc_bits": _n("the fewest ADC bits within 0.01 of exact (simulated)"),
    "09.predict.table_claims": _c("tensor parallel below ZeRO-3, and one technique alone fits (predicted)"),
}


class _Pass:
    """The explicit "I do not guess": recorded as "no guess", after which the reveal shows the answer."""

    def __repr__(self) -> str:
        return "checks.PASS"


PASS = _Pass()
NO_GUESS = "no guess"
_REVEALS = ("reveal", "refused", "pass")


@dataclass(frozen=True)
class State:
    """Where a prediction stands in the journal: its committed guess, whether it was revealed, later guesses."""

    committed: object  # the guess in force at the first reveal, NO_GUESS, or None while not revealed
    latest: object  # the latest committed guess (None when none)
    revealed: bool
    passed: bool
    after: tuple  # guesses committed after the first reveal, in order


def state(key: str, entries: list[journal.Entry] | None = None) -> State:
    """The prediction's state from its journal entries (all of them when ``entries`` is None)."""
    mine = [e for e in (journal.of(key) if entries is None else entries) if e.key == key]
    latest, committed, revealed, passed, after = None, None, False, False, []
    for e in mine:
        if e.event == "commit":
            if revealed and e.answer != committed:
                after.append(e.answer)
            latest = e.answer
        elif e.event in _REVEALS:
            if not revealed:
                committed = NO_GUESS if e.event != "reveal" or latest is None else latest
                revealed = True
            passed = passed or e.event == "pass"
    return State(committed, latest, revealed, passed, tuple(after))


def registered(key: str) -> Prediction:
    require_choice("prediction", key, PREDICTIONS)
    return PREDICTIONS[key]


def commit(key: str, guess: object) -> journal.Entry | None:
    """Record ``guess`` as committed unless it is already the latest commitment (a re-run or a restart)."""
    st = state(key)
    value = journal.jsonable(guess)
    if value == st.latest:
        return None
    return journal.record("prediction", key, value, None, event="commit", after_reveal=st.revealed)


def predict(key: str, guess: object) -> object:
    """Commit ``guess`` to prediction ``key`` in the cell that sets it; returns the guess (None: not yet).

    ``predict(key, PASS)`` passes: recorded as "no guess", so the reveal shows the answer, also after a
    reveal that refused (the answer was hidden; the prediction is scored "no guess" either way); it prints
    what it did, so the cell that passes says so.
    """
    registered(key)
    if guess is PASS:
        st = state(key)
        if not st.passed:
            journal.record("prediction", key, NO_GUESS, False, event="pass")
        if not st.revealed:
            print(f"Passed: no guess for {key}, recorded as 'no guess'; its reveal shows the answer.")
        elif st.committed == NO_GUESS:
            print(f"Passed: {key} stays 'no guess' (its reveal already ran with none); its reveal shows the answer "
                  "now: run that cell again.")
        else:
            print(f"Not passed: {key} was revealed with your committed guess {st.committed!r}, the one scored.")
        return None
    why = malformed(PREDICTIONS[key].kind, guess)
    if why:
        print(f"Not committed: {why}.")
        return None
    if guess is not None:
        commit(key, guess)
    return guess


def malformed(kind: str, guess: object) -> str:
    """Why ``guess`` is not a guess of this kind ("" when it is one, or None)."""
    if guess is None:
        return ""
    if kind == "number":
        try:
            value = float(guess)
        except (TypeError, ValueError):
            value = math.nan
        if not math.isfinite(value):
            return f"the guess must be a number, like 0.25 or 16 (got {guess!r})"
    elif kind == "claims" and not isinstance(guess, dict):
        return f"the guess must be a dict of claim to 'yes' or 'no' (got {guess!r})"
    elif kind == "choice" and not isinstance(guess, str):
        return f"the guess must be a name, in quotes (got {guess!r})"
    return ""


SINK = "LABKIT_ANSWER_SINK"


def answer_for_key(key: str | None, truth: object) -> None:
    """When ``$LABKIT_ANSWER_SINK`` names a file (the instructor's build), append the revealed value to it.

    This is how the answer key learns what each solved notebook measured; a student's kernel
    never has the variable set, and the student's journal never holds an unrevealed answer.
    """
    target = os.environ.get(SINK)
    if key and target:
        with open(target, "a", encoding="utf-8") as f:
            f.write(json.dumps({"key": key, "answer": journal.jsonable(truth)}) + "\n")


def notebook_keys(notebook: str) -> list[str]:
    """The registered prediction ids of one notebook ("01"), in registry order."""
    return [k for k in PREDICTIONS if k.startswith(notebook + ".")]
