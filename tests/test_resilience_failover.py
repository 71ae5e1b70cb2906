"""Bamboo's failover for real: a SIGKILLed rank, and the survivor finishing alone from its replica."""

from __future__ import annotations

import pytest

from labkit.errors import LabkitError
from labkit.resilience import failover as fo


@pytest.mark.parametrize("call, message", [
    (lambda: fo.run_failover(steps=3, kill_step=3), "kill_step must be one of 0, 1, 2"),
    (lambda: fo.run_failover(kill_rank=2), "kill_rank must be one of 0, 1"),
    (lambda: fo.run_failover(microbatches=3), "microbatches must divide batch_size=4"),
    (lambda: fo.run_failover(model={"n_layer": 3}), "n_layer must be even"),
    (lambda: fo.run_failover(model={"dropout": 0.1}), "dropout must be 0.0"),
])  # fmt: skip
def test_bad_input_names_the_field(call, message):
    with pytest.raises(LabkitError, match=message):
        call()


@pytest.mark.parametrize("kill_rank, kill_step", [(1, 3), (0, 0)])
def test_real_sigkill_survived_from_the_peers_replica_bit_identical(kill_rank, kill_step):
    run = fo.run_failover(steps=5, kill_step=kill_step, kill_rank=kill_rank, timeout=60.0)
    assert run.exit_codes[kill_rank] == -9 and run.exit_codes[1 - kill_rank] == 0  # a real SIGKILL
    assert run.survivor == 1 - kill_rank and run.failed_at == kill_step
    assert run.resumed_from == kill_step and run.steps_lost == 0  # no completed step redone, no disk read
    assert run.modes == ("pipeline + RC",) * kill_step + ("alone (failover)",) * (5 - kill_step)
    assert run.losses_identical and run.params_identical and run.losses == run.reference_losses
    assert run.redundant_matched  # every redundant activation / gradient equalled the one sent
    assert run.replica_bytes == run.predicted_replica_bytes  # 12 B per replica parameter (fp32 + 2 moments)
    assert "Connection" in run.error or "Timed out" in run.error
    assert run.step_s_after > 0 and run.detect_s is not None  # wall-clock: shown, not compared
