from labkit.measure import measure_step
from labkit.measure.activation_ledger import activation_ledger
from labkit.rig.model import GPTConfig
from labkit.rig.train import TrainConfig, Trainer


def test_memtracker_after_forward_is_saved_tensors_plus_logits_and_loss() -> None:
    cfg = TrainConfig(model=GPTConfig(vocab_size=35, seq_len=16, d_model=32), batch_size=4)
    trainer = Trainer(cfg)
    trainer.step()
    saved = measure_step(trainer).activations
    ledger = activation_ledger(trainer)
    assert ledger.saved == saved
    b, s, v = cfg.batch_size, cfg.model.seq_len, cfg.model.vocab_size
    assert ledger.unsaved_outputs == {"logits": 4 * b * s * v, "loss": 4}
    assert ledger.tracker_after_forward == ledger.after_forward == saved + 4 * b * s * v + 4
    assert len(ledger.per_layer) == cfg.model.n_layer and ledger.rows()[-1][1] == ledger.after_forward
