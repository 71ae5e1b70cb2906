"""How a layout's layers are spread over its pipeline stages: even, uneven as given, or balanced.

Real runs put fewer layers on the first stage (it also holds the embedding) and on the last (it
holds the output layer and the loss): Megatron-LM's ``--decoder-first-pipeline-num-layers`` and
``--decoder-last-pipeline-num-layers`` set them and split the rest evenly over the middle stages.
When the stages are not given, pp must divide the layers; otherwise the error names the balanced
split, which gives the first and last stages one layer count f and the middle stages the rest,
evenly, with the largest stage as small as it can be (f no larger than a middle stage). The step
runs at the pace of its slowest stage; memory is bounded by pricing every stage as the largest.
"""

from __future__ import annotations

from labkit.errors import LabkitError


def _divisors(n: int) -> str:
    return ", ".join(str(d) for d in range(1, n + 1) if n % d == 0)


def check(first: object, last: object) -> None:
    """``first_stage_layers`` and ``last_stage_layers`` are whole numbers, 0 meaning "not given"."""
    for name, v in (("first_stage_layers", first), ("last_stage_layers", last)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise LabkitError(f"{name} must be a positive integer, or 0 for an even split (got {v!r})")


def split(layers: int, pp: int, first: int = 0, last: int = 0) -> tuple[int, ...]:
    """Layers on each of ``pp`` stages: ``first`` and ``last`` as given (0: not given, the other's count),
    the rest evenly over the middle; without either, even where pp divides the layers, else balanced."""
    if pp == 1:
        if first or last:
            raise LabkitError(f"first_stage_layers and last_stage_layers need pp > 1 (got pp=1, first={first}, "
                              f"last={last})")
        return (layers,)
    if not (first or last):
        if layers % pp == 0:
            return (layers // pp,) * pp
        hint = balanced(layers, pp)
        shown = f" (balanced: {hint[0]} and {hint[-1]}, {label(hint)})" if hint else ""
        raise LabkitError(f"pp must divide the {layers} layers (one of {_divisors(layers)}), or give "
                          f"--first-stage-layers and --last-stage-layers{shown} (got pp={pp})")
    first, last = first or last, last or first
    rest = layers - first - last
    if pp == 2:
        if rest:
            raise LabkitError(f"first_stage_layers + last_stage_layers must equal the {layers} layers with pp=2 "
                              f"(got {first} + {last})")
        return (first, last)
    if rest < pp - 2 or rest % (pp - 2):
        raise LabkitError(f"first_stage_layers and last_stage_layers must leave the {pp - 2} middle stages an equal "
                          f"share of at least one layer: {layers} - {first} - {last} = {rest} does not split "
                          f"{pp - 2} ways")
    return (first, *(rest // (pp - 2),) * (pp - 2), last)


def balanced(layers: int, pp: int) -> tuple[int, ...] | None:
    """The balanced split of ``layers`` over ``pp`` stages (module text), None when there is none."""
    best = None
    for f in range(1, layers // pp + 2):
        rest = layers - 2 * f
        if pp > 2 and rest >= pp - 2 and rest % (pp - 2) == 0 and rest // (pp - 2) >= f:
            cand = (f, *(rest // (pp - 2),) * (pp - 2), f)
            if best is None or max(cand) < max(best):
                best = cand
    return best


def label(counts: tuple[int, ...]) -> str:
    """The split for people: "24 x 4", or "5 + 10 x 6 + 5"."""
    if len(set(counts)) == 1:
        return f"{len(counts)} x {counts[0]}"
    middle = counts[1:-1]
    mid = f" + {len(middle)} x {middle[0]}" if middle else ""
    return f"{counts[0]}{mid} + {counts[-1]}"
