"""Notebook 07's claims (``labkit.economics.trends``) on the real cost model: they hold for the notebook's runs and
fail where the runs say otherwise (a small batch for the large-batch claims, swapped arguments). Pure arithmetic on
the catalogue: well under 1 s."""

from __future__ import annotations

from labkit.economics import published, run, strategies, trends


def test_large_and_small_batch_claims_hold_for_the_notebooks_runs_and_not_for_each_other():
    large = run.compare("llama2-7b", 20e9, "H100-SXM")
    small = run.compare("llama2-7b", 20e9, "H100-SXM", gpus=dict.fromkeys(strategies.STRATEGIES, 8),
                        batch_tokens=32 * 4096)
    assert all(trends.large_batch(large).values()) and all(trends.small_batch(small).values())
    on_small = trends.large_batch(small)
    assert not on_small["every strategy rents for the same dollars (within 0.5%)"]
    assert not trends.small_batch(large)["SSD offload takes longer, rents for more and emits more"]


def test_grid_and_published_claims():
    assert trends.grid_spread([30, 713], 1.05) == {"the grids' spread over 10x the strategies' ratio": True}
    assert not any(trends.grid_spread([300, 400], 1.05).values())
    meta = published.load_runs()[0].implied_g_co2_per_kwh
    at_meta, as_labkit = published.beside(pue=1.0, g_co2_per_kwh=meta), published.beside()
    assert all(trends.published(at_meta, as_labkit).values())
    assert not trends.published(as_labkit, at_meta)["at Meta's PUE and grid: the grid factor 1 and the energy factor "
                                                    "within 5%"]
