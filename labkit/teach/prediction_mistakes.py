"""How each numeric prediction is judged: its tolerance, its unit's slips, and the mistakes a teacher expects.

A reveal that says only "too low by 88%" teaches nothing; one that says "16-bit weights only:
forgot the gradients and Adam's states" names the idea the learner missed. Every numeric
prediction registered in :mod:`labkit.teach.predictions` has an entry here, so the notebooks
pass only the key and one test can list them all (issue 20, "Feedback that names the mistake").

Each :class:`Mistake` is a rule: the wrong answer it produces, computed from the right answer
(in the unit shown) and from constants the question states (4 ranks, p = 4, a checkpoint every
2 steps, Young's C and M), never typed in as the answer's value. A mistake matches a guess within
the question's tolerance, or, for mistakes that are a range of guesses ("several-fold, as on
text"), within a factor ``spread`` of its value. The tolerances follow the issue: counts exactly,
measurements with a unit (16 B/param) relatively, published or empirical figures by a stated band.
Constants cite their notebook; figures from papers are read from ``datasets/references.toml``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass

from labkit import hardware
from labkit.predict.estimate import model_state_bytes
from labkit.references import failure_traces, headline, section
from labkit.shapes import model_shape
from labkit.teach.finetune_mistakes import FINETUNE  # 05 section 7b, kept apart for the 300-line cap


@dataclass(frozen=True)
class Mistake:
    """A likely wrong answer: the diagnosis in words and the value it gives, from the right answer."""

    name: str
    value: Callable[[float], float]
    spread: float | None = None  # matched within [v / spread, v * spread]; None: within the question's tolerance

    def matches(self, guess: float, right: float, rel_tol: float) -> bool:
        """Whether ``guess`` is this mistake's answer (never when the mistake's value is the right one)."""
        wrong = self.value(right)
        if wrong == right:
            return False
        if self.spread is not None and wrong > 0:
            return wrong / self.spread <= guess <= wrong * self.spread
        return abs(guess - wrong) <= max(rel_tol, 1e-3) * abs(wrong) + 1e-12


@dataclass(frozen=True)
class Judging:
    """How one numeric prediction is judged: the unit shown, tolerance, slips family, mistakes."""

    unit: str  # the unit the reveal shows (as the notebook passes it)
    rel_tol: float  # 0 with exact
    mistakes: tuple[Mistake, ...]
    exact: bool = False  # a count: judged exactly
    slips: str = ""  # the unit family whose slips to name ("fraction", "%", "min", "/day", "B"; "" generic)


def _k(value: float) -> Callable[[float], float]:
    """A mistake whose value the question fixes (p = 4, 4 ranks), whatever the answer."""
    return lambda _right: value


def _m(name: str, value: Callable[[float], float], spread: float | None = None) -> Mistake:
    return Mistake(name, value, spread)


def _count(unit: str, *mistakes: Mistake, slips: str = "") -> Judging:
    return Judging(unit, 0.0, mistakes, exact=True, slips=slips)


def _within(unit: str, rel_tol: float, *mistakes: Mistake, slips: str = "") -> Judging:
    return Judging(unit, rel_tol, mistakes, slips=slips)


def _han(name: str) -> float:
    """One 45 nm energy of Han et al. (NeurIPS 2015, Figure 1), pJ, from the references file."""
    return float(section("energy_pj")[name])


def _claimed_range(system: str) -> tuple[float, float]:
    """The "A-Bx" range a system's published headline claims (FlashNeuron: its larger-batch factors)."""
    low, high = re.search(r"([0-9.]+)-([0-9.]+)x", headline(system)["claim"]).groups()
    return float(low), float(high)


def _llama7b_gb(bytes_per_param: float) -> Callable[[float], float]:
    """Llama-2 7B's parameters (labkit's shape) at ``bytes_per_param``, in GB (notebook 01, section 5)."""
    return lambda _right: bytes_per_param * model_shape("llama2-7b").params / 1e9


COUNT = "count"  # a count or a ratio of like quantities: no unit to slip on (only the sign)

# Constants the questions state, by notebook.
ZERO_RANKS = 4  # 02 section 1: 4 ranks, fp32 AdamW
PIPE_P, PIPE_M = 4, 8  # 02 section 4
_LLAMA3 = next(t for t in failure_traces() if t.name == "Llama 3")  # 01 section 7, 06 section 1 (references.toml)
LLAMA3_GPUS, LLAMA3_DAYS = _LLAMA3.gpus, _LLAMA3.days


def _zero_share(stage: int) -> float:
    """fp32 AdamW's bytes per rank kept under ZeRO ``stage`` over ``ZERO_RANKS``, as a share of DDP's (SC 2020)."""
    kept = sum(model_state_bytes(1, "fp32", stage, ZERO_RANKS).values())
    return kept / sum(model_state_bytes(1, "fp32").values())


def _price_ratio(top: str, bottom: str) -> float:
    """USD per GB of the catalogue's first ``top`` tier over its first ``bottom`` tier (notebook 07's prices)."""
    cat = hardware.load_catalogue()
    price = {k: cat.tier(cat.tier_names(k)[0]).price_usd_per_gb for k in (top, bottom)}
    return price[top] / price[bottom]
TP, SEQ, HIDDEN, HEADS = 4, 64, 32, 4  # 03 section 1: t, s, h, a of the tiny GPT (dropout 0)
# Korthikanti et al.'s per-layer count without dropout, in sbh: 8 replicated (LayerNorm and column-parallel inputs),
# 24 split, plus the attention scores, 2as/h, split over the heads.
_KEPT, _SPLIT, _SCORES = 8, 24, 2 * HEADS * SEQ / HIDDEN
SEARCH_R = 1.5  # 04 section 5: oversubscription
CKPT_EVERY, KILL_STEPS = 2, 8  # 06 section 2: a checkpoint every 2 steps of an 8-step run
YOUNG_C, YOUNG_M = 36.0, 3600.0  # 06 section 6: checkpoint cost and mean time between failures, seconds
RC_KILL_STEP = 3  # 06 section 8: rank 1 killed in step 3
FLASHNEURON_CLAIM = _claimed_range("FlashNeuron")  # its paper's larger-batch factors (references.toml)

NUMERIC: dict[str, Judging] = {
    "01.predict.llama7b_gb": _within(
        "GB", 0.10,
        _m("2 bytes per parameter: the 16-bit weights only, without gradients and Adam's states", _llama7b_gb(2)),
        _m("4 bytes per parameter: fp32 weights alone, or 16-bit weights and gradients without Adam's "
           "12 bytes of fp32 master weights and moments", _llama7b_gb(4)),
        _m("8 bytes per parameter: weights and gradients in fp32, Adam's states forgotten", _llama7b_gb(8)),
        _m("20 bytes per parameter: fp32 gradients counted too (mixed precision keeps 16-bit ones: 2 + 2 + 12)",
           _llama7b_gb(20)), slips="GB"),
    "01.predict.llama3_interruptions": _within(
        "", 0.5,  # a published count nothing lets you derive: right within a band of a half
        _m(f"a day's count: the {LLAMA3_DAYS:.0f} days' total was asked", lambda n: n / LLAMA3_DAYS),
        _m(f"one per GPU: a GPU fails far less often than once in {LLAMA3_DAYS:.0f} days; it is {LLAMA3_GPUS:,} of "
           "them together that stop the job every few hours", _k(LLAMA3_GPUS)), slips=COUNT),
    "02.predict.zero3_share": _within(
        "", 0.10,
        _m("stage 1's share: only Adam's moments split over the ranks", _k(_zero_share(1))),
        _m("stage 2's share: gradients and moments split, the full weights kept", _k(_zero_share(2))),
        _m("the share given away (1 - 1/N), not the share kept", _k(1 - 1 / ZERO_RANKS)), slips="fraction"),
    "02.predict.zero3_traffic": _within(
        "x", 0.10,
        _m("the same bytes as DDP: besides reduce-scattering the gradients, stage 3 all-gathers every weight "
           "twice (forward and backward), where DDP's all-reduce is one reduce-scatter plus one all-gather", _k(1.0)),
        _m("an all-reduce of the gradients on top of the two all-gathers: stage 3 reduce-scatters them, "
           "each rank keeping only its shard", _k(2.0)),
        _m("three collectives against one all-reduce: an all-reduce moves twice the bytes of an all-gather",
           _k(3.0))),
    "02.predict.gpipe_peak": _count(
        "micro-batches",
        _m("1F1B's bound, p: GPipe runs every forward before any backward", _k(PIPE_P)),
        _m("one at a time: GPipe keeps each forward's activations until its backward", _k(1)),
        _m("m - 1: rank 0 still holds the last micro-batch's activations when the backwards begin: all m",
           _k(PIPE_M - 1)),
        _m("m times p: every stage's micro-batches; rank 0 holds only its own stage's", _k(PIPE_M * PIPE_P))),
    "02.predict.one_f_one_b_peak": _count(
        "micro-batches",
        _m("GPipe's m: 1F1B starts a backward once p - rank forwards are in flight", _k(PIPE_M)),
        _m("one: rank 0's first backward comes back only after p forwards", _k(1)),
        _m("p - 1: rank r holds p - r micro-batches in flight, so rank 0 holds p", _k(PIPE_P - 1))),
    "02.predict.pipedream_versions": _count(
        "",
        _m("one, as with a flush (PipeDream-Flush): without it every mini-batch in flight needs its own", _k(1)),
        _m("two, PipeDream-2BW's double buffer", _k(2)),
        _m("p - 1: stage 0 has p mini-batches in flight, its own among them", _k(PIPE_P - 1)), slips=COUNT),
    "03.predict.act_share_tp4": _within(
        "", 0.10,
        _m("1/t: everything split, as with sequence parallelism; without it the LayerNorm inputs and the "
           "column-parallel linears' inputs stay whole on every rank", _k(1 / TP)),
        _m("the attention scores left out: they split over the heads too, and at this s and h they are not "
           "small", _k((_KEPT + _SPLIT / TP) / (_KEPT + _SPLIT))),
        _m("1 - 1/t: the share given away, not the share kept", _k(1 - 1 / TP)),
        _m("nothing split: tensor parallelism splits the attention heads and the MLP's width, and with them "
           "most activations", _k(1.0)), slips="fraction"),
    "04.predict.search_overhead": _within(
        "%", 0.25,  # a genetic search's median over seeds, simulated: nothing to derive it from, so a band
        _m("none: the copies hide behind compute; at this oversubscription the link, not compute, sets the time",
           _k(0.0)),
        _m("the oversubscription read as the slowdown (r - 1): the time is what the swapped bytes take over "
           "the link", _k(100 * (SEARCH_R - 1))),
        _m("the time over compute alone, not how much slower than it", lambda pct: pct + 100), slips="%"),
    "04.predict.bytes_per_param": _within(
        "", 0.10,
        _m("one direction only: the updated weights come back up too", _k(2)),
        _m("fp32 both ways: the gradients go down and the weights come up in 16 bits", _k(8)),
        _m("the optimizer states (12 B) crossing: they stay on the CPU, where Adam runs", _k(12)),
        _m("all 16 bytes of model states crossing", _k(16)), slips="B"),
    "04.predict.batch_ratio": _within(
        "x", 0.10,
        _m("about twice: offloading frees the activations' room, but the rule sends only what hides behind "
           "compute", _k(2.0), spread=1.25),
        _m("the paper's headline batch gain: a V100 computes GPT-2 medium's layers far faster than one SSD "
           "takes their activations", _k(sum(FLASHNEURON_CLAIM) / 2), spread=1.5)),
    "05.predict.zstd_ratio": _within(
        "", 0.10,
        _m("about 2x, as if zstd could drop the noisy low half of each mantissa: that is quantization (lossy); "
           "zstd is lossless and fp32 mantissas look random", _k(2.0), spread=1.25),
        _m("several-fold, as on text: text repeats, trained fp32 weights barely do", _k(4.0), spread=1.6),
        slips=COUNT),
    "05.predict.full_recompute_share": _within(
        "%", 0.10,
        _m("none: full recompute keeps each block's input, to run the block again in backward", _k(0.0)),
        _m("the share dropped, not the share kept", lambda pct: 100 - pct), slips="%"),
    "05.predict.mixed_bytes": _within(
        "", 0.05,  # a measurement in B/param, not a count: 15.9 is right
        _m("16-bit weights and gradients only: forgot the fp32 master weights and Adam's two moments", _k(4)),
        _m("fp32's 16 halved: only the weights and gradients are 16-bit; master weights and moments stay "
           "fp32", _k(8)),
        _m("the fp32 master weights forgotten: 2 + 2 + 8", _k(12)),
        _m("fp32 gradients counted beside the 16-bit ones: 2 + 2 + 4 + 12", _k(20)), slips="B"),
    "05.predict.flushed_share": _within(
        "%", 0.5,  # a measured share no formula gives: "some, not most" within a half
        _m("none: fp16's subnormals reach far below its normal range, but gradients scaled this small fall "
           "below even them", _k(0.0)),
        _m("most of them: below fp16's normal range is not zero; subnormals keep many", _k(75.0), spread=1.5),
        slips="%"),
    "05.predict.state_bytes_8bit": _within(
        "", 0.05,
        _m("one Adam moment: Adam keeps two, each at one byte", _k(1)),
        _m("16-bit states: 8 bits are one byte per moment", _k(4)),
        _m("fp32 Adam's 8 bytes: the moments are what is quantized", _k(8)), slips="B"),
    "06.predict.per_day_16k": _within(
        "", 0.5,  # an empirical rate: judged within a band
        _m("the whole run's count, not a day's", lambda rate: rate * LLAMA3_DAYS),
        _m("the hours between failures, not failures a day", lambda rate: 24 / rate), slips="/day"),
    "06.predict.per_day_100k": _within(
        "", 0.5,
        _m(f"the {LLAMA3_GPUS:,}-GPU rate, not scaled to 100,000 GPUs", lambda rate: rate * LLAMA3_GPUS / 100_000),
        _m("scaled the wrong way: more GPUs fail more often",
           lambda rate: (rate * LLAMA3_GPUS / 100_000) ** 2 / rate), slips="/day"),
    "06.predict.most_lost": _count(
        "",
        _m("none: the steps since the last checkpoint are run again", _k(0)),
        _m("the average, not the most: a kill just before the next checkpoint loses a whole interval", _k(1)),
        _m("two intervals: a kill mid-write leaves the previous checkpoint whole (written aside, then renamed)",
           _k(2 * CKPT_EVERY)),
        _m("the whole run: a restart resumes from the last complete checkpoint, not from step 0", _k(KILL_STEPS)),
        slips=COUNT),
    "06.predict.best_interval": _within(
        "min", 0.20,  # the optimum is flat, but not so flat that forgetting the 2 passes
        _m("forgot the 2 in sqrt(2CM)", _k(math.sqrt(YOUNG_C * YOUNG_M) / 60)),
        _m("the 2 outside the root: 2 sqrt(CM), not sqrt(2CM)", _k(2 * math.sqrt(YOUNG_C * YOUNG_M) / 60)),
        _m("once per mean time between failures: each failure then loses half an interval of work on average",
           _k(YOUNG_M / 60)),
        _m("Young's interval in seconds, where minutes were asked", _k(math.sqrt(2 * YOUNG_C * YOUNG_M))),
        slips="min"),
    "06.predict.rc_lost": _count(
        "",
        _m("the step the kill interrupted: the survivor holds a live copy of the lost stage and finishes it",
           _k(1)),
        _m("a checkpoint interval: redundant computation keeps a live copy, so no checkpoint is read",
           _k(CKPT_EVERY)),
        _m("every step before the kill, as a restart from scratch", _k(RC_KILL_STEP)), slips=COUNT),
    "07.predict.hbm_over_ssd": _within(
        "x", 0.5,  # prices vary by source and date: right within a half
        _m("HBM priced like ordinary DRAM: no one sells HBM alone, a GB of it comes with a GPU",
           lambda _ratio: _price_ratio("dram", "ssd"), spread=3.0),
        _m("the ratio upside down: SSD's price over HBM's", lambda ratio: 1 / ratio)),
    "07.predict.dram_read_fmas": _within(
        "", 0.15,  # a ratio of two published energies
        _m("the multiply alone: a multiply-add also pays for the add",
           _k(_han("dram_read_32bit") / _han("fp32_multiply"))),
        _m("the add alone: a multiply-add also pays for the multiply, the dearer half",
           _k(_han("dram_read_32bit") / _han("fp32_add"))),
        _m("an 8 KB SRAM read, not a DRAM read: going off-chip is what costs",
           _k(_han("sram_read_32bit_8kb") / (_han("fp32_add") + _han("fp32_multiply")))), slips=COUNT),
    "08.predict.stall_cut": _within(
        "%", 0.15,  # a simulated share
        _m("all of it: prefetch cannot hide fetches that the link is too slow to finish in time", _k(100.0)),
        _m("half, as HBM holds half the working set: the share removed depends on reuse, not capacity", _k(50.0)),
        _m("the share of the stall left, not the share removed", lambda pct: 100 - pct), slips="%"),
    "08.predict.adc_bits": _count(
        "",
        _m("4 bits, as 4-bit weights sufficed in notebook 05: an ADC reads a column's sum of 128 products, "
           "which spans more levels than one weight", _k(4)),
        _m("8 bits, as digital int8 inference: the analog noise already blurs the lowest bits, so fewer do",
           _k(8)),
        _m("all the sweep offers: extra ADC bits below the noise buy nothing", _k(10)), slips=COUNT),
}

def judging(key: str | None) -> Judging | None:
    """The registered judging of numeric prediction ``key``, or None (no key, or not a numeric prediction)."""
    return NUMERIC.get(key) if key else None


def named(key: str | None, guess: float, right: float, rel_tol: float) -> str:
    """The diagnosis of the first registered mistake of ``key`` that ``guess`` matches, or ""."""
    rules = judging(key)
    if rules is None:
        return ""
    return next((m.name for m in rules.mistakes if m.matches(guess, right, rel_tol)), "")


def mistake_values(key: str, right: float) -> dict[str, float]:
    """Each registered mistake of ``key`` and its value for the right answer ``right`` (for the instructor's key)."""
    rules = judging(key)
    return {} if rules is None else {m.name: m.value(right) for m in rules.mistakes}

NUMERIC |= {k: _within(u, t, *(_m(n, _k(v)) for n, v in ms), slips=s) for k, (u, t, ms, s) in FINETUNE.items()}
