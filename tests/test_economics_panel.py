"""The cost and green storage panel of notebook 07, driven without a browser."""

from __future__ import annotations

import pytest

from labkit.economics.panel import CUSTOM, EconomicsPanel, design_task, panel_gpus
from labkit.economics.strategies import STRATEGIES


@pytest.fixture(scope="module")
def panel():
    return EconomicsPanel()


def test_panel_builds_with_one_bar_per_strategy_and_metric(panel):
    assert panel.runs is not None and set(panel.runs) == set(STRATEGIES) and len(panel.figures) == 1
    axes = panel.figures[0].axes
    assert len(axes) == 5 and all(len(ax.patches) == 3 for ax in axes)
    assert [t.get_text() for t in axes[0].get_xticklabels()] == list(STRATEGIES)
    chosen = axes[0].patches[STRATEGIES.index("dram-offload")]
    assert chosen.get_facecolor()[0] > 0.7  # the chosen strategy in red
    text = panel.message.value
    for word in ("dram-offload", "days", "rented", "MWh", "CO2e", "world (481 gCO2/kWh)", "predicted"):
        assert word in text
    assert "RTX-4090" not in panel_gpus() and "H100-SXM" in panel_gpus()


def test_panel_reacts_to_tokens_region_price_and_strategy(panel):
    panel.strategy.value, panel.region.value = "dram-offload", "world"
    before = panel.run
    panel.tokens.value = panel.tokens.value * 2
    assert panel.run.time_s == pytest.approx(2 * before.time_s)
    panel.region.value = "norway"
    assert panel.run.kg_co2 < before.kg_co2 and "norway (30 gCO2/kWh)" in panel.message.value
    panel.region.value = CUSTOM
    panel.intensity.value = 0.0
    assert panel.run.kg_co2 == 0.0 and "0 gCO2/kWh" in panel.message.value
    owned = panel.run.owned_usd
    panel.price.value = panel.price.value * 3
    assert panel.run.owned_usd > owned
    panel.strategy.value = "ssd-offload"
    assert "lifetimes used" in panel.message.value and panel.run.wear is not None


@pytest.mark.parametrize("control, value, message", [
    ("tokens", 0.0, "tokens (1e9) must be a positive number"),
    ("price", -0.1, "$ per kWh must be a non-negative number"),
])  # fmt: skip
def test_panel_shows_bad_input(control, value, message):
    p = EconomicsPanel()
    getattr(p, control).value = value
    assert p.runs is None and p.run is None and not p.figures
    assert "bad input" in p.message.value and message in p.message.value


def test_custom_intensity_must_be_non_negative():
    p = EconomicsPanel(region=CUSTOM)
    p.intensity.value = -5.0
    assert p.runs is None and "custom gCO2/kWh must be a non-negative number" in p.message.value
    p.intensity.value = 100.0
    assert p.runs is not None and "100 gCO2/kWh" in p.message.value


def test_unknown_values_name_the_field():
    with pytest.raises(Exception, match="strategy must be one of hbm, dram-offload, ssd-offload"):
        EconomicsPanel(strategy="tape")
    with pytest.raises(Exception, match="region must be one of world"):
        EconomicsPanel(region="mars")
    with pytest.raises(Exception, match="gpu must be one of"):
        EconomicsPanel(gpu="RTX-4090")


def test_gpu_count_and_batch_controls():
    p = EconomicsPanel(model="llama2-7b", tokens_billion=20.0)
    fewest = {s: r.gpus for s, r in p.runs.items()}
    p.gpus.value = 8
    assert all(r.gpus == max(8, fewest[s]) for s, r in p.runs.items())
    big = p.runs["ssd-offload"].plan.stall_s
    p.batch.value = 32.0
    assert p.runs["ssd-offload"].plan.stall_s > big and p.runs["ssd-offload"].plan.sequences_per_step == 8
    for control, value, message in (("gpus", -1, "GPUs, at least must be a whole number, 0 or more"),
                                    ("batch", 0.0, "batch (k tokens) must be a positive number")):
        getattr(p, control).value = value
        assert p.runs is None and message in p.message.value
        getattr(p, control).value = 8 if control == "gpus" else 32.0


def test_design_task_has_a_solution_on_the_panel():
    """Notebook 07's task: SSD offload within 10% of all in HBM's carbon, its worn drives' embodied carbon counted,
    in a run shorter than a year.

    The search moves only the panel's own controls (model, GPU, GPU floor, batch) and reads the
    panel's result and its message, as a learner would.
    """
    p = EconomicsPanel(tokens_billion=100.0)
    found = []
    for model in ("llama2-70b", "gpt3-175b"):
        for gpu in ("H100-SXM", "A100-80GB", "H200"):
            for gpus in (0, 512):
                for batch in (32.0, 4096.0):
                    p.model.value, p.gpu.value, p.gpus.value, p.batch.value = model, gpu, gpus, batch
                    met, why = design_task().check(p)
                    if met:
                        assert "(within 10%)" in p.message.value and "embodied carbon of the drives" in why
                        ssd, hbm = p.runs["ssd-offload"], p.runs["hbm"]
                        assert ssd.kg_co2 + ssd.ssd_embodied_kg <= 1.1 * hbm.kg_co2 and ssd.days <= 365
                        found.append((model, gpu, gpus, batch))
    assert found, "no panel setting has SSD offload within 10% of HBM's carbon"
    assert ("gpt3-175b", "A100-80GB", 512, 4096.0) in found  # many GPUs and a large batch: the drives hardly wear
    assert not any(batch == 32.0 for *_, batch in found)  # a small batch wears the drives: their carbon counts


def test_design_task_rejects_runs_longer_than_a_year():
    p = EconomicsPanel(model="gpt3-175b", tokens_billion=100.0, gpu="A100-80GB", gpus=0, batch_k_tokens=4096.0)
    met, why = design_task().check(p)
    assert not met and "more than 365 days is no plan" in why


def test_design_task_check_says_what_is_missing():
    p = EconomicsPanel(model="llama2-70b", tokens_billion=10.0, gpus=0, batch_k_tokens=4096.0).set_task(design_task())
    met, reason = p.check_design()
    assert not met and "look for a model" in reason and "Not yet" in p.task_result.value
