"""The notebook 09 design panel: builds, redraws when a control changes, shows bad input as a message."""

from labkit.advisor.panel import AdvisorPanel


def test_panel_builds_and_reacts():
    panel = AdvisorPanel()
    assert panel.advice is not None and panel.advice.best is not None and len(panel.figures) == 1
    first = panel.message.value
    assert "best for fastest" in first
    panel.goal.value = "greenest"
    assert panel.message.value != first and "best for greenest" in panel.message.value


def test_panel_shows_bad_input_without_raising():
    panel = AdvisorPanel(model="gpt3-175b", gpus=8, batch=8, seq=2048)
    assert "offload nvme" in panel.message.value  # 8 GPUs hold GPT-3 only with its states on NVMe
    panel.gpus.value = 0
    assert "bad input" in panel.message.value and "gpus must be a positive integer" in panel.message.value
    assert panel.figures == []
