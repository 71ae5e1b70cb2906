"""Notebook 07's coding exercise: a run's footprint from its IT energy and its SSD writes.

The learner writes ``footprint(it_joules, pue, g_co2_per_kwh, ssd_bytes_written, drives,
endurance_bytes)`` returning ``(facility_kwh, kg_co2, ssd_life_used)``: the energy the site
draws (IT energy x PUE, The Green Grid's definition), its carbon at the grid's intensity,
and the share of each offload SSD's rated endurance the run writes (writes striped evenly
over the drives). Each case costs a real configuration with :func:`labkit.economics.run.cost_run`
(Llama-2 7B, HBM, DRAM offload and SSD offload, grids from ``datasets/grid.toml``) and gives
the learner that run's inputs; the three answers must agree with labkit's model within 0.1%.
"""

from __future__ import annotations

from collections.abc import Callable

from labkit.practice.coding import Case, CodingExercise, attempt, register

RUNS = (("hbm", "world"), ("dram-offload", "france"), ("ssd-offload", "us"))
TOKENS = 2e10


def _inputs(strategy: str, region: str):
    from labkit import hardware
    from labkit.economics.run import cost_run

    run = cost_run(strategy, "llama2-7b", TOKENS, "H100-SXM", region=region)
    w = run.wear
    args = (run.energy.total_j, run.pue, run.g_co2_per_kwh, 0.0 if w is None else w.bytes_written,
            1 if w is None else w.drives, hardware.tier(w.drive).endurance_bytes if w else 1)
    return args, (run.facility_kwh, run.kg_co2, run.ssd_life_used)


HINTS = {"facility kWh": ("What does the site draw for a given IT energy, and how many joules are in one kWh?",
                         "The site draws the IT energy times its PUE (The Green Grid's definition); 1 kWh = 3.6e6 J."),
         "kg CO2": ("The grid's intensity is in grams per kWh: what unit does the product have, and what is asked?",
                    "kWh times grams per kWh gives grams; the answer is in kilograms."),
         "SSD life used": ("The writes are striped evenly over the drives: how many bytes does each drive absorb?",
                           "Each drive's share of the bytes written, over one drive's rated endurance.")}


def run(fn: Callable[..., tuple[float, float, float]]) -> list[Case]:
    cases = []
    for strategy, region in RUNS:
        name = f"Llama-2 7B, {TOKENS:.0e} tokens, {strategy}, grid {region}"
        args, want = _inputs(strategy, region)
        got, failed = attempt(name, lambda args=args: tuple(float(x) for x in fn(*args)))
        if failed:
            cases.append(failed)
            continue
        off = [lab for lab, g, w in zip(HINTS, got, want, strict=True) if abs(g - w) > 1e-3 * abs(w) + 1e-12]
        detail = "; ".join(f"{lab}: {got[i]:.4g}, the model says {want[i]:.4g}"
                           for i, lab in enumerate(HINTS) if lab in off)
        cases.append(Case(name, not off, detail, HINTS[off[0]] if off else ()))
    return cases


register(CodingExercise(
    "07.code.footprint",
    "Write footprint(it_joules, pue, g_co2_per_kwh, ssd_bytes_written, drives, endurance_bytes) -> "
    "(facility_kwh, kg_co2, ssd_life_used).",
    run,
    ("Three conversions, each with its unit: IT energy to the site's energy, energy to carbon, writes to drive wear.",
     "Return a tuple of three numbers: (facility_kwh, kg_co2, ssd_life_used)."),
    "facility_kwh = it_joules * pue / 3.6e6; kg_co2 = facility_kwh * g_co2_per_kwh / 1000; ssd_life_used = "
    "ssd_bytes_written / drives / endurance_bytes.",
))
