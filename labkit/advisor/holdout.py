"""Held-out validation: each reference set judged by profiles that were not fitted on it (leave one set out).

A profile constant fitted on a reference set (``FITTED``: the constant, the value the module states before
fitting, the sets it was fitted on and the grid it was chosen from) says nothing about how the model does on
that set. The rule every constant is fitted by (:func:`refit`): a profile's constants chosen together, the point
of their grids' product with the smallest worst-case |log(predicted/published)| over the sets (a joint grid
search; a tie goes to the first point in grid order); refitting each profile on its declared sets reproduces
every stored constant (tested). For every set S, :func:`leave_one_out` refits each constant fitted on S by that
rule on the other sets priced under the same profile, or, where no other set uses that profile, puts back the
value before fitting; then S is priced again.
A constant fitted on two sets (``deepspeed-2021``'s, on Table 2's 175B and 530B rows) is, for each of them,
refitted on the other alone. ``labkit bench`` prints both ratios per set with their spread (:func:`summary`).
Swapping a profile's constants is done on ``profiles.PROFILES`` inside :func:`profile_constants` and undone on
exit, and the reference sets' cache is cleared on both sides, so nothing else sees the swap.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace

from labkit.advisor import reference_sets as rs
from labkit.predict import compute, profiles
from labkit.predict.tables import text_table


@dataclass(frozen=True)
class Fitted:
    """One fitted profile constant: where it came from and what it was before."""

    profile: str
    field: str
    prior: object  # the value before fitting (the module's first-principles default)
    fitted_on: tuple[str, ...]  # the reference sets it was fitted on (``reference_sets.SETS``)
    grid: tuple


TABLE2 = ("sc21-table2-175b", "sc21-table2-530b")
FITTED = (
    # fsdp: the three chosen together on llm-foundry's 11 rows (0.60, 0.75, 30: worst |log ratio| 0.098); the first
    # stored triple, 0.60, 0.50, 20 (worst 0.139), was not the rule's. Two sit on their grid's top edge: on wider
    # grids the minimax runs on along a ridge (0.65, 0.75, 60: 0.052) where GEMM share and element-wise passes trade
    # off, so llm-foundry alone does not pin them apart
    Fitted("fsdp", "gemm_efficiency", compute.GEMM_EFFICIENCY, ("llm-foundry-h100",),
           (0.5, 0.55, 0.6, 0.65, 0.7, 0.8)),
    Fitted("fsdp", "exposed_share", 0.0, ("llm-foundry-h100",), (0.0, 0.25, 0.5, 0.75)),
    Fitted("fsdp", "bsh_passes", 0.0, ("llm-foundry-h100",), (0.0, 10.0, 20.0, 30.0)),
    # eager: the element-wise bytes and the ops per layer are counted (predict.eager_elementwise, eager_ops), the
    # host's bare ops per layer measured (eager_ops.HOST_BARE_OPS); what is fitted is the share of the peak its GEMMs
    # reach
    Fitted("eager", "gemm_efficiency", compute.GEMM_EFFICIENCY, ("h200-eager",),
           (0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8)),
    # deepspeed-2021 (profiles): one port per GPU, and half the prefetched gathers exposed, fitted on Table 2's two
    # models together; held out, each model's rows are judged by the values chosen on the other's alone (the same
    # two, either way). The reuse distance is DeepSpeed's documented default
    Fitted("deepspeed-2021", "aggregate_ports", True, TABLE2, (True, False)),
    Fitted("deepspeed-2021", "exposed_share", 0.0, TABLE2, (0.0, 0.25, 0.5, 0.75)),
)


@contextmanager
def profile_constants(name: str, **values: object) -> Iterator[None]:
    """Price with profile ``name``'s constants set to ``values``; restored on exit."""
    old = profiles.PROFILES[name]
    profiles.PROFILES[name] = replace(old, **values)
    rs.compare.cache_clear()
    try:
        yield
    finally:
        profiles.PROFILES[name] = old
        rs.compare.cache_clear()


def worst_log(sets: list[str]) -> float:
    """The largest |log(predicted/published)| over every run of ``sets``, at the profiles as they stand."""
    return max(abs(math.log(r.ratio)) for s in sets for r in rs.compare(s))


def refit(name: str, constants: list[Fitted], sets: list[str]) -> dict[str, object]:
    """``constants`` of profile ``name`` chosen together on ``sets`` (module text: every point of their grids'
    product, the smallest worst-case |log ratio|, the first in grid order on a tie), or their values before
    fitting when ``sets`` is empty."""
    if not sets or not constants:
        return {c.field: c.prior for c in constants}
    best: tuple[float, dict[str, object]] | None = None
    for point in itertools.product(*(c.grid for c in constants)):
        values = {c.field: v for c, v in zip(constants, point, strict=True)}
        with profile_constants(name, **values):
            score = worst_log(sets)
        if best is None or score < best[0] - 1e-12:
            best = (score, values)
    return best[1]


def held_out_values(held: str) -> tuple[dict[str, object], list[str]]:
    """The values set ``held`` is judged by when held out, and the sets they were chosen on (none: the priors):
    every constant fitted on it refitted on the other sets of its profile (module text)."""
    name = rs.FRAMEWORK[held]
    mine = [c for c in FITTED if held in c.fitted_on and c.profile == name]
    others = [s for s in rs.SETS if s != held and rs.FRAMEWORK[s] == name] if mine else []
    return refit(name, mine, others), others


def leave_one_out(held: str) -> tuple[rs.Reference, ...]:
    """Set ``held`` priced with every constant fitted on it refitted without it (module text)."""
    values, _ = held_out_values(held)
    if not values:
        return rs.compare(held)
    with profile_constants(rs.FRAMEWORK[held], **values):
        return rs.compare(held)


def at_priors(name: str) -> tuple[rs.Reference, ...]:
    """Set ``name`` priced with every fitted constant of its profile put back to its value before fitting: how much
    of the set's agreement the fitted constants carry."""
    prof = rs.FRAMEWORK[name]
    with profile_constants(prof, **{c.field: c.prior for c in FITTED if c.profile == prof}):
        return rs.compare(name)


def prior_range(name: str) -> tuple[float, float]:
    """The lowest and highest ratio of set ``name`` at its profile's priors (:func:`at_priors`)."""
    ratios = [r.ratio for r in at_priors(name)]
    return min(ratios), max(ratios)


def fit_report() -> str:
    """What the held-out table stands on (notebook 09): each fitted constant as fitted and before fitting; the
    values each held-out set is judged by and the sets they were chosen on; each set whose profile has fitted
    constants at their priors (:func:`prior_range`)."""
    out = [f"{c.profile} {c.field} = {getattr(profiles.PROFILES[c.profile], c.field)} as fitted on "
           f"{' and '.join(c.fitted_on)}; {c.prior} before fitting" for c in FITTED]
    for name in rs.SETS:
        values, chosen_on = held_out_values(name)
        if values:
            out.append(f"{name} held out: {', '.join(f'{k} = {v}' for k, v in values.items())}, "
                       f"chosen on {', '.join(chosen_on) or 'nothing (the priors)'}")
    for name in rs.SETS:
        if sources(name):
            lo, hi = prior_range(name)
            out.append(f"{name}: {lo:.2f}-{hi:.2f} with every fitted constant of {rs.FRAMEWORK[name]} at its "
                       "value before fitting")
    return "\n".join(out)


def sources(name: str) -> list[str]:
    """Each fitted constant of reference set ``name``'s profile, with the sets it came from."""
    return [f"{c.field} = {getattr(profiles.PROFILES[c.profile], c.field)} (fitted on {' and '.join(c.fitted_on)})"
            for c in FITTED if c.profile == rs.FRAMEWORK[name]]


@dataclass(frozen=True)
class Summary:
    """One set's ratios in-sample and held out: (lowest, highest) each."""

    name: str
    in_sample: tuple[float, float]
    held_out: tuple[float, float]

    @property
    def spread(self) -> float:
        return self.in_sample[1] - self.in_sample[0]

    @property
    def held_out_spread(self) -> float:
        return self.held_out[1] - self.held_out[0]


def summary(name: str) -> Summary:
    """In-sample and leave-one-set-out ratio ranges of reference set ``name``."""
    ins = [r.ratio for r in rs.compare(name)]
    out = [r.ratio for r in leave_one_out(name)]
    return Summary(name, (min(ins), max(ins)), (min(out), max(out)))


IN_SAMPLE_TOLERANCE = 0.15  # issue 29: every set within 15% with the constants as fitted
HELD_OUT_TOLERANCE = 0.25  # and within 25% judged by constants not fitted on it
# the sets that miss those targets (issue 29, open), with what was measured and why: printed under the table,
# asserted by notebook 09 and strict expected failures in tests/test_advisor_holdout.py, so a set that starts to
# hold, or stops, fails loudly
IN_SAMPLE_OPEN = {
    **rs.OPEN,
}
HELD_OUT_OPEN: dict[str, str] = {}
# sets that hold out only within their own source (printed under the table, so a "yes" never stands unqualified)
WITHIN_ONE_SOURCE = {
    name: "held out within one table: values chosen on the other model's rows of the same paper, cluster and code "
          "(leave one model out, not one source out); no second publication of 2021's DeepSpeed ZeRO-3 gives shapes"
    for name in TABLE2
}


def misses() -> tuple[set[str], set[str]]:
    """The sets outside 15% in-sample and outside 25% held out, as priced now."""
    ins, out = set(), set()
    for name in rs.SETS:
        s = summary(name)
        ins |= set() if _within(s.in_sample, IN_SAMPLE_TOLERANCE) else {name}
        out |= set() if _within(s.held_out, HELD_OUT_TOLERANCE) else {name}
    return ins, out


def _within(lo_hi: tuple[float, float], tol: float) -> bool:
    return 1 - tol <= lo_hi[0] and lo_hi[1] <= 1 + tol


def worst_by_label() -> dict[str, tuple[float, str, str] | None]:
    """Per label (``reference_sets.LABELS``), the held-out ratio farthest from 1 in |log|, with its set and run
    (None: no set has the label): the figure to quote. A fitted set is judged by constants chosen without it; a
    watched set has nothing fitted on it, so its held-out ratio is its in-sample one."""
    out: dict[str, tuple[float, str, str] | None] = dict.fromkeys(rs.LABELS)
    for name in rs.SETS:
        for r in leave_one_out(name):
            cur = out[rs.LABEL[name]]
            if cur is None or abs(math.log(r.ratio)) > abs(math.log(cur[0])):
                out[rs.LABEL[name]] = (r.ratio, name, r.label)
    return out


def label_report() -> str:
    """Each label's sets and worst ratio (:func:`worst_by_label`), then each set's evidence for its label."""
    out = []
    for label, worst in worst_by_label().items():
        names = [n for n in rs.SETS if rs.LABEL[n] == label]
        if worst is None:
            out.append(f"{label}: no set yet (a new published set enters as held out only with its prediction "
                       "recorded in the commit that adds it)")
        else:
            out.append(f"{label} ({', '.join(names)}): worst ratio {worst[0]:.2f}, {100 * (worst[0] - 1):+.0f}% "
                       f"({worst[1]}, {worst[2]}{', held out' if label == 'fitted' else ''})")
    out += [f"{n} is {rs.LABEL[n]}: {rs.EVIDENCE[n]}" for n in rs.SETS]
    return "\n".join(out)


def table() -> str:
    """Every reference set's label, its ratio range in-sample and held out, beside what was fitted on it, and
    why each open set misses (notebook 09, ``labkit bench``)."""
    rows = []
    for name in rs.SETS:
        s = summary(name)
        mine = [c.field for c in FITTED if name in c.fitted_on]
        rows.append([name, rs.FRAMEWORK[name], rs.LABEL[name].replace(" ", "-"), ", ".join(mine) or "nothing",
                     f"{s.in_sample[0]:.2f}-{s.in_sample[1]:.2f}",
                     "yes" if _within(s.in_sample, IN_SAMPLE_TOLERANCE) else "NO",
                     f"{s.held_out[0]:.2f}-{s.held_out[1]:.2f}",
                     "yes" if _within(s.held_out, HELD_OUT_TOLERANCE) else "NO"])
    head = ["reference set", "profile", "label", "fitted on it", "in-sample", f"within {IN_SAMPLE_TOLERANCE:.0%}",
            "held out", f"within {HELD_OUT_TOLERANCE:.0%}"]
    why = [f"open, in-sample: {n}: {r}" for n, r in IN_SAMPLE_OPEN.items()]
    why += [f"open, held out: {n}: {r}" for n, r in HELD_OUT_OPEN.items()]
    why += [f"note, held out: {n}: {r}" for n, r in WITHIN_ONE_SOURCE.items()]
    return "\n".join([text_table(head, rows), *why])
