"""The analog crossbar: exact when ideal, worse as bits fall, deterministic noise, clear errors."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

from labkit.errors import LabkitError
from labkit.future.crossbar import (
    AnalogLinear,
    CrossbarConfig,
    analog_model,
    eval_loss,
    relative_error,
    sweep,
    tiny_trainer,
)


def _layer(n_in: int = 200, n_out: int = 70, seed: int = 0) -> tuple[nn.Linear, torch.Tensor]:
    torch.manual_seed(seed)
    layer = nn.Linear(n_in, n_out)
    return layer, torch.randn(2, 5, n_in)


@pytest.fixture(scope="module")
def trainer():
    return tiny_trainer(steps=15, d_model=32)


@pytest.mark.parametrize("rows, cols", [(128, 128), (64, 32), (7, 300), (256, 256)])
def test_ideal_crossbar_equals_the_digital_layer(rows, cols):
    layer, x = _layer()
    analog = AnalogLinear(layer, CrossbarConfig(rows=rows, cols=cols))
    assert analog(x).shape == (2, 5, 70)
    assert torch.allclose(analog(x), layer(x).detach(), rtol=1e-5, atol=1e-5)
    assert analog.tiles == -(-200 // rows) * -(-70 // cols)


def test_error_grows_as_adc_bits_fall_on_average_over_seeds():
    mean = []
    for bits in (2, 4, 6, 8, 10):
        errs = [relative_error(*_layer(seed=s), CrossbarConfig(adc_bits=bits)) for s in range(3)]
        mean.append(sum(errs) / len(errs))
    assert all(a > b for a, b in zip(mean, mean[1:], strict=False)), mean
    assert mean[0] > 0.5 and mean[-1] < 0.05


@pytest.mark.parametrize("field", ["weight_bits", "dac_bits"])
def test_error_grows_as_weight_and_dac_bits_fall(field):
    layer, x = _layer()
    errs = [relative_error(layer, x, CrossbarConfig(**{field: b})) for b in (2, 4, 8)]
    assert errs[0] > errs[1] > errs[2] > 0


def test_noise_is_seeded_and_grows():
    layer, x = _layer()
    a = AnalogLinear(layer, CrossbarConfig(noise=0.02, seed=3))
    first = a(x)
    assert not torch.equal(first, a(x))  # a new read, new noise
    a.reseed()
    assert torch.equal(first, a(x))
    assert torch.equal(first, AnalogLinear(layer, CrossbarConfig(noise=0.02, seed=3))(x))
    assert not torch.equal(first, AnalogLinear(layer, CrossbarConfig(noise=0.02, seed=4))(x))
    errs = [relative_error(layer, x, CrossbarConfig(noise=n)) for n in (0.0, 0.01, 0.05)]
    assert errs[0] < 1e-5 < errs[1] < errs[2]


def test_tile_range_is_coarser_than_column_range():
    layer, x = _layer()
    col = relative_error(layer, x, CrossbarConfig(adc_bits=6, adc_range="column"))
    tile = relative_error(layer, x, CrossbarConfig(adc_bits=6, adc_range="tile"))
    assert tile > col


def test_ideal_analog_gpt_matches_the_digital_loss(trainer):
    digital = eval_loss(trainer.model, trainer)
    assert digital == pytest.approx(trainer.eval_loss(2), abs=1e-6)
    assert trainer.model.training  # eval_loss restores the mode it found
    twin = analog_model(trainer.model, CrossbarConfig(rows=16, cols=16))
    assert sum(isinstance(m, AnalogLinear) for m in twin.modules()) == 4 * trainer.cfg.model.n_layer
    assert eval_loss(twin, trainer) == pytest.approx(digital, abs=1e-4)


def test_loss_sweep_over_adc_bits_is_deterministic(trainer):
    first = sweep(trainer, "adc_bits", [2, 8, None])
    assert first.rows() == sweep(trainer, "adc_bits", [2, 8, None]).rows()
    two, eight, ideal = first.points
    assert two.gap > eight.gap >= -1e-3 and abs(ideal.gap) < 1e-4
    noisy = sweep(trainer, "noise", [0.05], CrossbarConfig(seed=1))
    assert noisy.rows() == sweep(trainer, "noise", [0.05], CrossbarConfig(seed=1)).rows()
    assert noisy.points[0].loss != first.digital_loss


@pytest.mark.parametrize("kwargs, message", [
    ({"adc_bits": 1}, "adc_bits must be an integer from 2 to 16, or None"),
    ({"weight_bits": 0}, "weight_bits must be an integer from 1 to 16"),
    ({"dac_bits": 4.5}, "dac_bits must be an integer"),
    ({"noise": -0.1}, "noise must be a fraction of G_max between 0 and 1"),
    ({"rows": 0}, "rows must be a positive integer"),
    ({"adc_range": "chip"}, "adc_range must be one of column, tile"),
])  # fmt: skip
def test_bad_config_names_the_field(kwargs, message):
    with pytest.raises(LabkitError, match=message):
        CrossbarConfig(**kwargs)


def test_bad_sweep_field_names_the_allowed(trainer):
    with pytest.raises(LabkitError, match="field must be one of adc_bits, dac_bits"):
        sweep(trainer, "volts", [1])


def test_averaged_reads_cut_the_noise_as_one_over_sqrt_reads():
    layer, x = _layer()
    one = relative_error(layer, x, CrossbarConfig(noise=0.05))
    many = relative_error(layer, x, CrossbarConfig(noise=0.05, reads=16))
    assert many == pytest.approx(one / 4, rel=0.35)  # noise only: 1/sqrt(16)
    assert relative_error(layer, x, CrossbarConfig(reads=16)) < 1e-5  # no noise: reads change nothing
    with pytest.raises(LabkitError, match="reads must be a positive integer"):
        CrossbarConfig(reads=0)


def test_seed_sweep_spreads_and_layer_inputs_are_the_real_ones(trainer):
    from labkit.future.crossbar_study import layer_inputs, seed_sweep

    s = seed_sweep(trainer, "noise", [0.0, 0.1], seeds=[0, 1, 2])
    quiet, loud = s.points
    assert len(set(quiet.gaps)) == 1 and abs(quiet.gaps[0]) < 1e-5  # no noise: every seed the same
    assert len(set(loud.gaps)) == 3  # noise differs by seed
    assert loud.spread[0] <= loud.mean <= loud.spread[1]
    assert s.rows()[1][0] == "0.1"
    layer, x = layer_inputs(trainer, "mlp.c_fc", block=1)
    assert layer is trainer.model.h[1].mlp.c_fc and x.shape[1] == layer.in_features
    with pytest.raises(LabkitError, match="block must be an integer from 0 to 1"):
        layer_inputs(trainer, block=2)
    with pytest.raises(LabkitError, match="seeds must name at least one seed"):
        seed_sweep(trainer, "noise", [0.1], seeds=[])
