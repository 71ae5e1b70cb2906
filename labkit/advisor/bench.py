"""``labkit bench``'s step-time part: every reference set, published beside predicted, in one run."""

from __future__ import annotations

from labkit.advisor import reference_sets


def main(quick: bool = False) -> None:
    """Print each reference set's table (``reference_sets.table``); ``quick`` changes nothing: it is arithmetic."""
    print("\nStep time, published or measured beside labkit advise (each set under its framework profile)")
    for name in reference_sets.SETS:
        refs = reference_sets.compare(name)
        worst = max(abs(r.ratio - 1) for r in refs)
        print(f"\n{reference_sets.table(name)}\n  worst: {100 * worst:.0f}% off "
              f"(target: within {100 * reference_sets.TOLERANCE[name]:.0f}%)")
