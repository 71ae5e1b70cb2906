"""Exercises that need two results put together: a crossover, a difference, a ratio that does not scale.

Each is registered with :mod:`labkit.teach.checks` like the look-up exercises, with its likely
wrong answers named (the answer of the tempting shortcut), so ``checks.check`` diagnoses
the shortcut a learner took. Every answer is computed by labkit, never typed in.
"""

from __future__ import annotations

import math

from labkit.teach.checks import Exercise, Mistake, register


def _total_gb(micro_batch: int) -> dict[str, float]:
    from labkit.predict.estimate import TrainingSetup, estimate_memory
    from labkit.shapes import model_shape

    est = estimate_memory(TrainingSetup(model_shape("llama2-7b"), micro_batch=micro_batch, seq=2048))
    return {k: v / 1e9 for k, v in est.per_device_bytes.items()}


def _batch8_extra() -> float:
    return _total_gb(8)["total"] - _total_gb(1)["total"]


def _fewest_microbatches(p: int = 8, target: float = 0.10) -> float:
    from labkit.sim import bubble_fraction

    return float(next(m for m in range(1, 10_000) if bubble_fraction(p, m) < target))


def _fewest_microbatches_wrong(p: int = 8, target: float = 0.10) -> float:
    return float(math.floor((p - 1) / target) + 1)


def _gpt3_layer_gb(t: int, sp: bool) -> float:
    from labkit.predict.estimate import activation_bytes_per_layer
    from labkit.shapes import model_shape

    return activation_bytes_per_layer(model_shape("gpt3-175b"), 2048, 1, tp=t, sp=sp) / 1e9


def _smallest_tp(limit_gb: float = 0.5, sp: bool = True) -> float:
    return float(next(t for t in (1, 2, 4, 8, 16, 32, 64) if _gpt3_layer_gb(t, sp) < limit_gb))


def _offload_step_s() -> float:
    from labkit import hardware
    from labkit.predict import offload_model

    dev = hardware.gpu("H100-SXM")
    per_direction = offload_model.ZERO_OFFLOAD.link_bytes_per_param() / 2 * 7e9
    return per_direction / hardware.link(dev.pcie).bandwidth


def _selective_share(of: str = "full_saving") -> float:
    from labkit.predict.estimate import activation_bytes_per_layer
    from labkit.shapes import model_shape

    g = model_shape("gpt3-175b")
    none, sel, full = (activation_bytes_per_layer(g, 2048, 1, recompute=r) for r in ("none", "selective", "full"))
    return {"full_saving": (none - sel) / (none - full), "of_none": (none - sel) / none, "kept": sel / none,
            "full_of_none": (none - full) / none}[of]


def _grid_ratio() -> float:
    from labkit.economics import grid

    return grid.region("india").value / grid.region("norway").value


def _grid_difference() -> float:
    from labkit.economics import grid

    return grid.region("india").value - grid.region("norway").value


def _break_even_gbps(params: float) -> float:
    from labkit.future.near_data import break_even_bandwidth

    return break_even_bandwidth("dram", params=int(params)) / 1e9


register("01.reason.batch8_extra_gb", Exercise(
    "Llama-2 7B, bf16-mixed, s = 2048, one GPU: how many GB (1e9 B) MORE does a step hold at micro-batch 8 than "
    "at micro-batch 1? (Use the estimate at micro-batch 1 and what grows with the batch.)",
    _batch8_extra, 0.02,
    ("Which categories depend on the micro-batch? Parameters, gradients and optimizer states do not.",
     "Only the activations grow, linearly: the extra is 7 x the activations at micro-batch 1."),
    lambda: f"Only activations scale with the batch: 7 x {_total_gb(1)['activations']:.1f} GB; the "
    f"{_total_gb(1)['total'] - _total_gb(1)['activations']:.1f} GB of model states stay put.",
    (Mistake("the whole step scaled by 8 (model states do not grow with the batch)", lambda: 7 * _total_gb(1)["total"]),
     Mistake("the activations at micro-batch 8, not the difference", lambda: 8 * _total_gb(1)["activations"])),
    unit="GB",
))

register("02.reason.microbatches_for_10pct", Exercise(
    "A 1F1B pipeline has p = 8 stages. What is the fewest micro-batches m that makes the bubble less than 10% "
    "of the step?",
    _fewest_microbatches, 0.0,
    ("The bubble's share of the whole step is (p-1)/(m+p-1); set it below 0.10 and solve for m.",
     "7/(m+7) < 0.1 means m + 7 > 70."),
    "m = 64: 7/71 = 9.9%. The share of the step, not of the useful time, is what the 10% refers to.",
    (Mistake("(p-1)/m < 10%: the bubble over the useful time, Narayanan's ratio, not its share of the step",
             _fewest_microbatches_wrong),
     Mistake("m = 63 makes the bubble exactly 10% (7/70), not less than 10%", lambda: _fewest_microbatches() - 1)),
))

register("03.reason.tp_for_half_gb", Exercise(
    "GPT-3 175B, s = 2048, b = 1, 16-bit, with sequence parallelism: the smallest tensor-parallel degree (a power "
    "of two) at which one layer's activations drop below 0.5 GB per GPU?",
    _smallest_tp, 0.0,
    ("With sequence parallelism every term of the layer's activations is divided by t.",
     "Divide the t = 1 figure by 2, 4, 8 ... until it is under 0.5 GB."),
    lambda: f"t = 8: {_gpt3_layer_gb(8, True):.3f} GB; at t = 4 it is {_gpt3_layer_gb(4, True):.3f} GB. Without "
    f"sequence parallelism the LayerNorm and dropout terms stay whole and it takes t = {_smallest_tp(sp=False):.0f}.",
    (Mistake("a degree one step too small: at it the layer still keeps more than 0.5 GB", lambda: _smallest_tp() / 2),
     Mistake("without sequence parallelism: the LayerNorm and dropout activations stay whole and a larger degree is "
             "needed, but the question turns it on", lambda: _smallest_tp(sp=False))),
))

register("04.reason.offload_step_s", Exercise(
    "ZeRO-Offload moves 4 bytes per parameter per step over PCIe: 2 down (gradients), 2 up (weights), and PCIe "
    "carries both directions at once. For a 7bn-parameter model on one H100 (its PCIe link from the catalogue), "
    "what is the shortest step, in seconds, that this traffic fits in at full link speed?",
    _offload_step_s, 0.02,
    ("The two directions run at the same time: only 2 bytes per parameter cross each direction.",
     "2 x 7e9 bytes over the link's per-direction bandwidth."),
    "The down and up copies overlap, so a direction's 2 bytes per parameter set the time.",
    (Mistake("all 4 bytes per parameter sent one way (the directions overlap)", lambda: 2 * _offload_step_s()),
     Mistake("the 12 bytes of optimizer states sent too: they stay on the CPU, where the step runs",
             lambda: 8 * _offload_step_s())),
    unit="s",
))

register("05.reason.selective_share", Exercise(
    "GPT-3 175B, one layer, s = 2048, b = 1: what FRACTION (0..1) of full recompute's activation saving does "
    "selective recompute get?",
    _selective_share, 0.005,  # 0.702, selective's saving over the whole layer, is 1.7% away and a different idea
    ("Saving = activations kept without recompute minus activations kept with it, for each mode.",
     "(none - selective) / (none - full), from the per-layer estimates."),
    "Selective drops the attention core's large s x s terms, most of the memory at long sequences, for a few per "
    "cent more FLOPs (Korthikanti et al., 2022).",
    (Mistake("selective's saving over ALL the activations (none - selective) / none: the question compares it with "
             "full recompute's saving, which keeps the layer input", lambda: _selective_share("of_none")),
     Mistake("the share selective KEEPS (selective / none), not the share of the saving it gets",
             lambda: _selective_share("kept")),
     Mistake("full recompute's own saving over the activations (none - full) / none",
             lambda: _selective_share("full_of_none"))),
    unit="fraction",
))

register("06.reason.young_factor", Exercise(
    "Young's interval is sqrt(2 C M). If the cluster doubles (its MTBF M halves) and the checkpoint cost C stays, "
    "by what factor does the best interval change?",
    lambda: 1 / math.sqrt(2), 0.01,
    ("Only M changes, and it sits under a square root.",
     "sqrt(2 C M/2) / sqrt(2 C M) = sqrt(1/2)."),
    "1/sqrt(2) = 0.707: the interval shrinks more slowly than the MTBF, so lost work per failure falls less than "
    "the failure rate rises.",
    (Mistake("the interval scaled like the MTBF itself", lambda: 0.5),
     Mistake("the interval scaled like the failure rate", lambda: 2.0)),
))

register("07.reason.grid_ratio", Exercise(
    "The same training run, same PUE, on India's grid and on Norway's (datasets/grid.toml): how many times more "
    "CO2 does it emit in India?",
    _grid_ratio, 0.02,
    ("Energy is the same in both places; only the grid's intensity (g CO2 per kWh) changes.",
     "Carbon = facility energy x intensity: divide India's intensity by Norway's (datasets/grid.toml)."),
    "Carbon = facility energy x intensity: the ratio is the ratio of the intensities.",
    (Mistake("the inverse ratio (Norway over India)", lambda: 1 / _grid_ratio()),
     Mistake("the difference of the intensities in g CO2/kWh, not their ratio", _grid_difference)),
))

register("08.reason.break_even_70b", Exercise(
    "With Adam's states in DRAM, near-data processing wins below a break-even link bandwidth (printed in section 2 "
    "for 1 bn parameters). What is the break-even in GB/s for a 70bn-parameter model?",
    lambda: _break_even_gbps(70e9), 0.02,
    ("Both paths move bytes in proportion to the parameter count.",
     "Times that both scale with the model size cross at the same bandwidth."),
    "The same as for any size: both paths' bytes scale with the parameters, so the crossing does not move.",
    (Mistake("scaled with the model size (70x)", lambda: 70 * _break_even_gbps(1e9)),
     Mistake("divided by the model size (1/70): neither path gets faster per byte for a larger model",
             lambda: _break_even_gbps(1e9) / 70)),
))


def _megatron_bubble(micro_batches_split: bool = True, share_of_step: bool = True) -> float:
    from labkit.sim import bubble_fraction, bubble_over_ideal

    p, dp, batch, b = 16, 8, 1536, 1
    m = batch // (dp * b) if micro_batches_split else batch // b
    return bubble_fraction(p, m) if share_of_step else bubble_over_ideal(p, m)


register("09.reason.megatron_bubble_share", Exercise(
    "Megatron-LM's example GPT-3 configuration: tp 8 x pp 16 x dp 8, global batch 1,536 sequences, micro-batch 1, "
    "1F1B. What share of the step (0..1) is pipeline bubble?",
    _megatron_bubble, 0.01,
    ("How many micro-batches does ONE pipeline run per step? The global batch is split over the dp replicas first.",
     "m = 1536 / (8 x 1) = 192; the bubble's share of the step is (p-1)/(m+p-1)."),
    lambda: f"{_megatron_bubble():.4f}: 15 / 207. With 192 micro-batches per pipeline the bubble is small; the "
    "advisor finds the larger losses elsewhere (tensor-parallel communication, recompute).",
    (Mistake("all 1,536 sequences run through one pipeline (the dp split forgotten)",
             lambda: _megatron_bubble(micro_batches_split=False)),
     Mistake("(p-1)/m, the bubble over the useful time, not its share of the step",
             lambda: _megatron_bubble(share_of_step=False))),
    unit="fraction",
))
