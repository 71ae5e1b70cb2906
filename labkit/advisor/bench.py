"""``labkit bench``'s step-time part: every reference set, published beside predicted, in-sample and held out."""

from __future__ import annotations

from labkit.advisor import holdout, reference_sets
from labkit.advisor.holdout import HELD_OUT_TOLERANCE, IN_SAMPLE_TOLERANCE
from labkit.predict.profiles import EAGER_BARE_OP_S


def main(quick: bool = False) -> None:
    """Print each reference set's table (``reference_sets.table``), its fitted constants with their source sets,
    and its ratio range in-sample and leave-one-set-out (``holdout``), then re-measure the host figures the eager
    profile stands on (:func:`print_host_measurements`; ``quick`` skips them: they take tens of seconds)."""
    print("\nStep time, published or measured beside labkit advise (each set under its framework profile)")
    for name in reference_sets.SETS:
        s = holdout.summary(name)
        worst = max(abs(r.ratio - 1) for r in reference_sets.compare(name))
        print(f"\n{reference_sets.table(name)}\n  worst: {100 * worst:.0f}% off "
              f"(target: within {100 * reference_sets.TOLERANCE[name]:.0f}%)")
        print(f"  fitted constants of {reference_sets.FRAMEWORK[name]}: "
              f"{'; '.join(holdout.sources(name)) or 'none'}")
        if holdout.sources(name):
            lo, hi = holdout.prior_range(name)
            print(f"  with them at their values before fitting: {lo:.2f}-{hi:.2f}")
        print(f"  predicted/published in-sample {s.in_sample[0]:.2f}-{s.in_sample[1]:.2f} (spread {s.spread:.2f}; "
              f"target within {IN_SAMPLE_TOLERANCE:.0%}); leave-one-set-out {s.held_out[0]:.2f}-{s.held_out[1]:.2f} "
              f"(spread {s.held_out_spread:.2f}; target within {HELD_OUT_TOLERANCE:.0%})")
    print(f"\nEvery set in-sample and held out (leave one set out):\n{holdout.table()}")
    print(f"\nThe worst ratio per label, the figure to quote (fitted: constants chosen on the set; watched: consulted "
          f"while the model changed; held out: never consulted):\n{holdout.label_report()}")
    if quick:
        print("\n(the host re-measures are skipped with --quick)")
    else:
        print_host_measurements()


def print_host_measurements() -> None:
    """The lab optimizer's host multiple and an eager layer's host bare ops, re-measured on this CPU beside the
    stored figures (timings: printed, never asserted)."""
    from labkit.measure.optimizer_host import lab_adamw_host_ops
    from labkit.predict.profiles import LAB_ADAMW_HOST_OPS

    print("\nThe lab optimizer's host loop, re-measured on this CPU in bare ops per parameter tensor (the stored "
          "multiple prices it on a GPU host)")
    for master in (True, False):
        r = lab_adamw_host_ops(master)
        print(f"  {'MasterWeightAdamW (bf16-mixed)' if master else 'AdamW(foreach=False) (fp32)':<32} measured "
              f"{r['ops']:.1f}, stored {LAB_ADAMW_HOST_OPS[master]:.1f} (a change to the optimizer's ops moves it)")
    from labkit.measure.host_time import EAGER_CASES, layer_host_ops, tiny_gpt_step_ops
    from labkit.predict.eager_ops import HOST_BARE_OPS

    print("\nAn eager layer's host time, re-measured on this CPU in bare ops per layer (forward, backward) beside the "
          "stored figures that price the eager profile (labkit.measure.host_time)")
    for (arch, case), prec in EAGER_CASES.items():
        r = layer_host_ops(arch, prec)
        stored = HOST_BARE_OPS.get((arch, prec.weights, prec.autocast))
        print(f"  {arch:8} {case:11} measured {r['forward']:.0f}, {r['backward']:.0f}; stored "
              f"{f'{stored[0]:.0f}, {stored[1]:.0f}' if stored else 'none'}; outside the layers "
              f"{r['outside_forward']:.0f}, {r['outside_backward']:.0f}")
    s = tiny_gpt_step_ops()
    print(f"  the lab's tiny GPT, one Trainer.step(): {s['ops']:.0f} bare ops, x the H200's "
          f"{EAGER_BARE_OP_S * 1e6:.1f} us = {s['ops'] * EAGER_BARE_OP_S * 1e3:.2f} ms beside the "
          f"{reference_sets.tiny_gpt_measured_s() * 1e3:.2f} ms the H200 measured")
