import pytest

from labkit.errors import LabkitError
from labkit.measure.state_conventions import measure_update_states
from labkit.predict.bytes_per_param import STATE_CONVENTIONS
from labkit.rig.train import TrainConfig, Trainer


def test_the_three_conventions_are_16_18_and_20() -> None:
    assert [c.bytes_per_param for c in STATE_CONVENTIONS] == [16, 18, 20]
    assert all(c.source for c in STATE_CONVENTIONS)


def test_a_real_bf16_step_holds_20_bytes_per_parameter_at_the_update() -> None:
    states = measure_update_states(Trainer(TrainConfig(precision="bf16-mixed")))
    assert states.at_update == 20.0
    assert [states.holds(c) for c in STATE_CONVENTIONS] == [16.0, 18.0, 20.0]
    assert states.per_param("grads32") == 4.0 and states.per_param("grads16") == 2.0


def test_fp32_training_is_refused_with_the_field_named() -> None:
    with pytest.raises(LabkitError, match="precision"):
        measure_update_states(Trainer(TrainConfig()))
