"""The instructor key: reference solutions of the coding exercises (tests check each one passes).

Kept outside the ``labkit`` package so a student's copy of the lab does not import it.
"""

from __future__ import annotations


def state_bytes(n_params: int, precision: str) -> dict[str, int]:
    """01.code.state_bytes: 4+4+8 B/param in fp32 (AdamW's two moments); 2+2+12 in bf16-mixed."""
    if precision == "fp32":
        return {"parameters": 4 * n_params, "gradients": 4 * n_params, "optimizer": 8 * n_params}
    return {"parameters": 2 * n_params, "gradients": 2 * n_params, "optimizer": 12 * n_params}


def one_f_one_b(rank: int, p: int, m: int) -> list[tuple[str, int]]:
    """02.code.one_f_one_b: p - rank forwards, then one backward and one forward in turn, then the rest."""
    warm = min(p - rank, m)
    order = [("F", i) for i in range(warm)]
    for i in range(m):
        order.append(("B", i))
        if warm + i < m:
            order.append(("F", warm + i))
    return order


def atomic_save(state: dict, path) -> None:
    """06.code.atomic_save: a temporary file beside the target, flushed to disk, renamed over it."""
    import os
    from pathlib import Path

    import torch

    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def mlp_shards(w1, w2, rank: int, t: int):
    """03.code.mlp_shards: rows of w1 (column-parallel), columns of w2 (row-parallel), block ``rank`` of t."""
    return w1.chunk(t, dim=0)[rank], w2.chunk(t, dim=1)[rank]


def evict(resident: set[int], future: list[int]) -> int:
    """08.code.evict: Belady's MIN, the block whose next use is furthest away."""
    def next_use(b: int) -> int:
        return future.index(b) if b in future else len(future)

    return max(sorted(resident), key=next_use)


def choose_swaps(act_bytes: list[float], budget: float) -> list[bool]:
    """04.code.choose_swaps: keep the largest activations that still fit the budget, swap the rest."""
    order = sorted(range(len(act_bytes)), key=lambda k: -act_bytes[k])
    swap, kept = [True] * len(act_bytes), 0.0
    for i in order:
        if kept + act_bytes[i] <= budget:
            swap[i] = False
            kept += act_bytes[i]
    return swap


def update_scale(scale: float, good_steps: int, found_inf: bool, growth_interval: int) -> tuple[float, int]:
    """05.code.update_scale: halve and reset on overflow; double after growth_interval clean steps."""
    if found_inf:
        return scale * 0.5, 0
    good_steps += 1
    if good_steps == growth_interval:
        return scale * 2.0, 0
    return scale, good_steps


def footprint(it_joules: float, pue: float, g_co2_per_kwh: float, ssd_bytes_written: float, drives: int,
              endurance_bytes: float) -> tuple[float, float, float]:
    """07.code.footprint: facility kWh = IT J x PUE / 3.6e6; kg = kWh x g/kWh / 1000; life = bytes/drives/endurance."""
    kwh = it_joules * pue / 3.6e6
    return kwh, kwh * g_co2_per_kwh / 1000, ssd_bytes_written / drives / endurance_bytes


def states_per_gpu(psi: int, tp: int, pp: int, dp: int, zero_stage: int) -> float:
    """09.code.states_per_gpu: (2 + 2 + 12) x psi / (tp x pp), ZeRO dividing terms by dp stage by stage."""
    weights = 2 / (dp if zero_stage >= 3 else 1)
    grads = 2 / (dp if zero_stage >= 2 else 1)
    optimizer = 12 / (dp if zero_stage >= 1 else 1)
    return (weights + grads + optimizer) * psi / (tp * pp)


REFERENCES = {"01.code.state_bytes": state_bytes, "02.code.one_f_one_b": one_f_one_b,
              "03.code.mlp_shards": mlp_shards, "06.code.atomic_save": atomic_save, "08.code.evict": evict,
              "04.code.choose_swaps": choose_swaps, "05.code.update_scale": update_scale,
              "07.code.footprint": footprint, "09.code.states_per_gpu": states_per_gpu}
