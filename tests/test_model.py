import pytest
import torch

from labkit.errors import LabkitError
from labkit.rig.model import GPTConfig, TinyGPT, count_parameters

SMALL = dict(vocab_size=35, seq_len=16, n_layer=1, n_head=2, d_model=32)


def test_forward_shapes_and_tied_head():
    model = TinyGPT(GPTConfig(**SMALL))
    x = torch.randint(0, 35, (3, 16))
    logits, loss = model(x, x)
    assert logits.shape == (3, 16, 35) and loss.ndim == 0
    assert model.lm_head.weight is model.wte.weight
    assert count_parameters(model) < sum(p.numel() for p in model.state_dict().values())


def test_fused_and_explicit_agree_without_dropout():
    torch.manual_seed(0)
    a = TinyGPT(GPTConfig(**SMALL, dropout=0.0))
    b = TinyGPT(GPTConfig(**SMALL, dropout=0.0, attention="fused"))
    b.load_state_dict(a.state_dict())
    x = torch.randint(0, 35, (2, 16))
    torch.testing.assert_close(a(x), b(x), rtol=1e-5, atol=1e-5)


def test_mask_kinds_drop_the_same_fraction():
    for mask in ("bool", "float"):
        torch.manual_seed(0)
        model = TinyGPT(GPTConfig(**SMALL, mask=mask)).train()
        y = model.drop(torch.ones(1000, 100))
        assert 0.08 < float((y == 0).float().mean()) < 0.12


@pytest.mark.parametrize(
    "bad, field",
    [
        (dict(d_model=0), "d_model"),
        (dict(n_layer=-1), "n_layer"),
        (dict(n_head=3), "n_head"),
        (dict(attention="flash"), "attention"),
        (dict(mask="int"), "mask"),
        (dict(dropout=1.5), "dropout"),
        (dict(ffn=-2), "ffn"),
    ],
)
def test_bad_config_names_the_field(bad, field):
    with pytest.raises(LabkitError, match=field):
        GPTConfig(**{**SMALL, **bad})


def test_too_long_sequence_is_refused():
    model = TinyGPT(GPTConfig(**SMALL))
    with pytest.raises(LabkitError, match="seq_len"):
        model(torch.zeros(1, 17, dtype=torch.long))


def test_config_from_names_unknown_fields_and_refuses_dropout_when_asked():
    from labkit.rig.model import config_from

    assert config_from({"d_model": 32, "n_head": 2}, {"n_layer": 3}).n_layer == 3
    with pytest.raises(LabkitError, match="unknown field.*layers: allowed vocab_size"):
        config_from({}, {"layers": 2})
    with pytest.raises(LabkitError, match="model dropout must be 0.0: ranks must agree"):
        config_from({"dropout": 0.1}, no_dropout="ranks must agree")
