import pytest
import torch

from labkit.errors import LabkitError
from labkit.rig import data
from labkit.rig.model import GPTConfig
from labkit.rig.train import TrainConfig, Trainer, study_dtype

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


class _Regressor(torch.nn.Module):
    """A model nobody in the lab wrote: a stack of identical blocks, no loss of its own."""

    def __init__(self) -> None:
        super().__init__()
        self.stack = torch.nn.ModuleList(torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Tanh()) for _ in range(3))
        self.head = torch.nn.Linear(8, 1)

    def forward(self, x):
        for block in self.stack:
            x = block(x)
        return self.head(x)


def _mse(model, batch):
    x, y = batch
    return torch.nn.functional.mse_loss(model(x), y)


def test_trainer_takes_a_users_model_with_its_loss_and_learns_reproducibly():
    from labkit.measure import measure_step

    g = torch.Generator().manual_seed(0)
    x = torch.randn(32, 8, generator=g)
    batch = (x, x.sum(1, keepdim=True))
    runs = []
    for _ in range(2):
        torch.manual_seed(0)
        t = Trainer(model=_Regressor(), data=batch, loss=_mse, lr=1e-2)
        runs.append(t.run(30))
    assert runs[0] == runs[1] and runs[0][-1] < runs[0][0] / 2
    assert t.blocks == "stack"
    step = measure_step(t)
    assert len(step.activations_per_layer()) == 3 and step.optimizer == 2 * step.parameters
    with pytest.raises(LabkitError, match="tiny GPT only"):
        t.eval_loss()


def test_trainer_with_a_user_model_in_bf16_mixed_keeps_fp32_masters_and_refuses_a_foreign_optimizer():
    torch.manual_seed(0)
    x = torch.randn(4, 8, dtype=torch.bfloat16)  # a bf16 model takes bf16 inputs: the user's batch, as given
    model = _Regressor()
    t = Trainer(model=model, data=(x, x[:, :1]), loss=_mse, precision="bf16-mixed")
    t.step()
    assert next(model.parameters()).dtype == torch.bfloat16 and t.optimizer.master[0].dtype == torch.float32
    with pytest.raises(LabkitError, match="MasterWeightAdamW"):
        Trainer(model=_Regressor(), data=(x, x), precision="bf16-mixed",
                optimizer=torch.optim.SGD(model.parameters(), lr=0.1))
    with pytest.raises(LabkitError, match="blocks must be one of stack"):
        Trainer(model=_Regressor(), data=(x, x), blocks="layers")


def test_a_study_names_its_dtype_and_a_wrong_name_is_refused_naming_the_choices():
    assert study_dtype("fp64") is torch.float64 and study_dtype("fp32") is torch.float32
    with pytest.raises(LabkitError, match="dtype must be one of fp32, fp64"):
        study_dtype("bf16")
