import pytest
import torch

from labkit import data
from labkit.errors import LabkitError
from labkit.model import GPTConfig
from labkit.train import TrainConfig, Trainer

TINY = GPTConfig(vocab_size=35, seq_len=32, n_layer=1, n_head=2, d_model=32)


def test_corpus_is_deterministic_and_round_trips():
    assert data.corpus() == data.corpus.__wrapped__()
    tokens, tok = data.dataset()
    assert tok.vocab_size == data.vocab_size() == 35
    assert tok.decode(tok.encode("the gpu stores weights.")) == "the gpu stores weights."
    with pytest.raises(LabkitError, match="vocabulary"):
        tok.encode("Ω")


def test_batches_are_a_function_of_the_step():
    b = data.batches(4, 16, seed=3)
    x1, y1 = b(7)
    x2, y2 = data.batches(4, 16, seed=3)(7)
    assert torch.equal(x1, x2) and torch.equal(y1, y2)
    assert torch.equal(x1[:, 1:], y1[:, :-1])
    assert not torch.equal(b(8)[0], x1)


@pytest.mark.parametrize("bad", [dict(batch_size=0), dict(lr=-1.0), dict(precision="fp8")])
def test_bad_train_config(bad):
    with pytest.raises(LabkitError):
        TrainConfig(model=TINY, **bad)


def test_training_is_bit_reproducible_and_learns():
    a = Trainer(TrainConfig(model=TINY, batch_size=8)).run(40)
    b = Trainer(TrainConfig(model=TINY, batch_size=8)).run(40)
    assert a == b
    assert sum(a[-5:]) / 5 < a[0] - 0.5


def test_bf16_mixed_keeps_fp32_master_weights_in_sync():
    t = Trainer(TrainConfig(model=TINY, batch_size=4, precision="bf16-mixed"))
    t.run(3)
    p = next(t.model.parameters())
    assert p.dtype == torch.bfloat16 and t.optimizer.master[0].dtype == torch.float32
    assert torch.equal(p, t.optimizer.master[0].to(torch.bfloat16))
    assert all(m.grad is None for m in t.optimizer.master)
