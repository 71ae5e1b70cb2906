"""ZeRO-Offload and ZeRO-Infinity micro-runs: exact byte counts, bit-identical training, cleanup."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from labkit.errors import LabkitError
from labkit.offload.disk.store import DiskStore
from labkit.offload.infinity_scale import dgx2_fit
from labkit.offload.zero_infinity import ZeroInfinityTrainer, io_bytes_per_step, run_zero_infinity
from labkit.offload.zero_offload import largest_model, largest_model_table, run_zero_offload, step_time
from labkit.rig.train import TrainConfig, Trainer
from labkit.shapes import model_shape

STEPS = 3
CFG = TrainConfig(precision="bf16-mixed")


@pytest.fixture(scope="module")
def plain() -> tuple[list[float], list[torch.Tensor]]:
    t = Trainer(CFG)
    losses = t.run(STEPS)
    return losses, [p.detach().clone() for p in t.model.parameters()]


def _same_bits(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    pairs = zip(a, b, strict=True) if len(a) == len(b) else []
    return bool(pairs) and all(torch.equal(x.view(torch.int16), y.view(torch.int16)) for x, y in pairs)


def test_zero_offload_bytes_and_bits(plain) -> None:
    run = run_zero_offload(CFG, STEPS)
    psi = run.params
    assert run.bytes_down == [2 * psi] * STEPS and run.bytes_up == [2 * psi] * STEPS
    assert run.predicted_bytes_per_step == 4 * psi
    assert run.device_bytes == {"parameters_16bit": 2 * psi, "gradients_16bit": 2 * psi}
    assert run.host_bytes == {"master_fp32": 4 * psi, "adam_moments_fp32": 8 * psi, "buffer_16bit": 2 * psi}
    assert run.losses == plain[0]
    assert _same_bits(run.final_params, plain[1])


def test_zero_offload_at_scale() -> None:
    rows = largest_model_table()
    pytorch, offload4, offload2, published = (r["params"] for r in rows)
    assert pytorch < offload4 < offload2
    assert 1e9 < pytorch < 2.5e9 and offload2 > published  # the paper's 13B within the 2 B/param bound
    with pytest.raises(LabkitError, match="gpu"):
        largest_model("no-such-gpu")
    t = step_time(model_shape("gpt2-xl"))
    assert t.cpu_adam_s > 0 and t.link_down_s == t.link_up_s > 0 and "pcie3" in t.assumptions


def test_zero_infinity_bytes_bits_and_cleanup(plain, tmp_path: Path) -> None:
    run = run_zero_infinity(CFG, STEPS, root=tmp_path, measure_raw_bytes=8 * 2**20)
    assert run.losses == plain[0]
    assert _same_bits(run.final_params, plain[1])
    psi, psi_b = run.params, run.block_params
    assert run.bytes_read == [14 * psi + 2 * psi_b] * STEPS == [run.predicted["read"]] * STEPS
    assert run.bytes_written == [14 * psi] * STEPS == [run.predicted["write"]] * STEPS
    assert [(r.name, r.measured, r.error) for r in run.records] == [
        ("bytes read per step", 14 * psi + 2 * psi_b, 0.0), ("bytes written per step", 14 * psi, 0.0)]
    assert run.raw is not None and run.read_ratio is not None and run.read_ratio > 0
    assert list(tmp_path.iterdir()) == []


def test_zero_infinity_full_disk_cleans_up(tmp_path: Path) -> None:
    with pytest.raises(LabkitError, match="disk full"):
        run_zero_infinity(CFG, 1, root=tmp_path, quota_bytes=100_000, measure_raw_bytes=None)
    assert list(tmp_path.iterdir()) == []


def test_zero_infinity_missing_and_truncated_state(tmp_path: Path) -> None:
    with DiskStore(tmp_path) as store:
        trainer = ZeroInfinityTrainer(CFG, store)
        try:
            assert store.path is not None
            (store.path / "block1.p16").unlink()
            with pytest.raises(LabkitError, match="missing"):
                trainer.step(0)
        finally:
            trainer.close()
    with DiskStore(tmp_path) as store:
        trainer = ZeroInfinityTrainer(CFG, store)
        try:
            assert store.path is not None
            with open(store.path / "block0.exp_avg", "r+b") as f:
                f.truncate(16)
            with pytest.raises(LabkitError, match="truncated"):
                trainer.step(0)
        finally:
            trainer.close()
    assert list(tmp_path.iterdir()) == []


def test_zero_infinity_at_scale() -> None:
    fit = dgx2_fit()
    assert fit.params_nvme == 30e12 / 20 == 1.5e12
    assert fit.params_nvme > fit.published_params > fit.params_dram > fit.params_gpu_only
    assert io_bytes_per_step(10, 8) == {"read": 156, "write": 140}
    with pytest.raises(LabkitError, match="params"):
        io_bytes_per_step(0, 0)
