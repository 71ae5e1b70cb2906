"""Notebook 03's coding exercise: split an MLP the way Megatron does, checked on real tensors.

The learner writes ``mlp_shards(w1, w2, rank, t)`` returning rank ``rank``'s pieces of an
``nn.Linear``-layout MLP (``w1``: [4h, h], ``w2``: [h, 4h]). The cases compute each rank's
partial output ``GeLU(x @ w1_r.T) @ w2_r.T`` and add them up, which is exactly what the
all-reduce after the row-parallel linear (Megatron's operator g; Shoeybi et al. 2019,
section 3) returns on every rank; here the t ranks are computed one after another in one
process, so the sum stands in for the all-reduce. The sum must equal the unsplit MLP, and
each rank must hold 1/t of each weight. Splitting ``w1`` along its input dimension fails:
GeLU is not linear, so partial pre-activations cannot be activated before they are summed.
"""

from __future__ import annotations

from collections.abc import Callable

from labkit.practice.coding import Case, CodingExercise, attempt, register

SIZES = ((2, 8), (4, 16), (8, 16))  # (t, h)


SIZES_HINTS = ("Each of the t ranks holds exactly 1/t of w1 and 1/t of w2: what shapes do your pieces have?",
               "Cut each weight into t equal blocks along one of its two dimensions; no rank keeps a whole weight.")
SUM_HINTS = ("GeLU is not linear: does each rank's piece of x @ w1.T hold whole pre-activations, or only partial sums "
             "of them that GeLU cannot be applied to?",
             "Give each rank whole output features of the first linear, so GeLU sees whole values, and the matching "
             "input features of the second, so the partial outputs simply add up.")


def run(fn: Callable) -> list[Case]:
    import torch
    import torch.nn.functional as F

    cases = []
    for t, h in SIZES:
        g = torch.Generator().manual_seed(t * 100 + h)
        x = torch.randn(3, 5, h, generator=g, dtype=torch.float64)
        w1 = torch.randn(4 * h, h, generator=g, dtype=torch.float64)
        w2 = torch.randn(h, 4 * h, generator=g, dtype=torch.float64)
        name = f"t={t}, h={h}"
        shards, failed = attempt(name, lambda w1=w1, w2=w2, t=t: [fn(w1, w2, r, t) for r in range(t)])
        total, failed = (None, failed) if failed else attempt(
            name, lambda x=x, shards=shards: sum(F.gelu(x @ a.T) @ b.T for a, b in shards))
        if failed:
            cases.append(failed)
            continue
        sizes_ok = all(a.numel() * t == w1.numel() and b.numel() * t == w2.numel() for a, b in shards)
        same = torch.allclose(total, F.gelu(x @ w1.T) @ w2.T, rtol=1e-9, atol=1e-9)
        if not sizes_ok:
            cases.append(Case(name, False, "a rank does not hold 1/t of w1 and of w2", SIZES_HINTS))
            continue
        cases.append(Case(name, same, "" if same else "the summed partial outputs differ from the unsplit MLP",
                          SUM_HINTS))
    return cases


register(CodingExercise(
    "03.code.mlp_shards",
    "Write mlp_shards(w1, w2, rank, t) -> (w1_part, w2_part): rank's share of an MLP y = GeLU(x w1^T) w2^T "
    "(nn.Linear layout, w1 [4h, h], w2 [h, 4h]) so that the t partial outputs add up to y.",
    run,
    ("GeLU is not linear: which split of the first linear lets each rank apply it to whole values, and which split "
     "of the second lets the partial outputs simply add up?",
     "Return a pair of tensors (w1_part, w2_part) for rank, in nn.Linear layout."),
    "w1_part = w1.chunk(t, dim=0)[rank] (rows: output features, a column-parallel linear) and w2_part = "
    "w2.chunk(t, dim=1)[rank] (columns: input features, a row-parallel linear); the all-reduce sums the partials.",
))
