"""Block-wise quantization: code books, round-trip bounds, 8-bit AdamW beside fp32 AdamW, 8/4-bit weight storage."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from labkit.errors import LabkitError
from labkit.reduction.optim8bit import (
    AdamW8bit,
    compare_optimizers,
    explosive_fraction,
    measured_state_bytes,
    model_state_bytes,
    moment_round_trip,
    state_bytes,
    train_with,
)
from labkit.reduction.quantize import (
    MAPS,
    code_book,
    dequantize,
    max_rounding_error,
    pack4,
    quantize,
    unpack4,
)
from labkit.reduction.weight_quant import (
    compare_storage,
    load_weights,
    measure_storage,
    weight_bytes,
)
from labkit.rig.data import vocab_size
from labkit.rig.model import GPTConfig
from labkit.rig.train import TrainConfig, Trainer

# smaller than notebook 05's micro_train_config, one thread: fast on a shared 2-core machine
CFG = TrainConfig(model=GPTConfig(vocab_size=vocab_size(), seq_len=16, n_layer=2, n_head=4, d_model=32),
                  batch_size=4, lr=3e-3, threads=1)

# ---------------------------------------------------------------- code books


def test_code_books_shape() -> None:
    assert len(code_book("dynamic", True)) == len(code_book("dynamic", False)) == 256
    assert len(code_book("linear", True)) == 255 and len(code_book("linear", False)) == 256
    assert len(code_book("linear", True, bits=4)) == 15
    for kind in MAPS:
        for signed in (True, False):
            b = code_book(kind, signed)
            assert torch.all(b.diff() > 0) and float(b.max()) == 1.0 and 0.0 in b.tolist()
            assert (float(b.min()) < -0.99) if signed else float(b.min()) == 0.0


def test_dynamic_map_follows_its_bit_layout() -> None:
    """Signed: an exponent run of e zeros leaves 6 - e fraction bits, so 2^(6-e) values per decade."""
    pos = code_book("dynamic", True)
    pos = pos[(pos > 0) & (pos < 1)]
    for e in range(7):
        in_decade = ((pos >= 0.1 * 10.0**-e) & (pos < 10.0**-e)).sum()
        assert int(in_decade) == 2 ** (6 - e)
    unsigned = code_book("dynamic", False)
    assert int(((unsigned > 0.1) & (unsigned < 1)).sum()) == 128  # the sign bit buys one more fraction bit
    # the point of the map: far smaller non-zero values than a linear grid
    assert float(pos.min()) < 1e-6 < 1 / 127 == pytest.approx(float(code_book("linear")[code_book("linear") > 0].min()))


def test_bad_input_raises() -> None:
    with pytest.raises(LabkitError, match="map must be one of"):
        code_book("log")
    with pytest.raises(LabkitError, match="bits must be 8 for the dynamic"):
        code_book("dynamic", bits=4)
    with pytest.raises(LabkitError, match="block must be a positive"):
        quantize(torch.ones(3), code_book(), block=0)
    with pytest.raises(LabkitError, match="empty"):
        quantize(torch.ones(0), code_book())
    with pytest.raises(LabkitError, match="bits must be one of"):
        state_bytes(10, bits=16)
    with pytest.raises(LabkitError, match="map must be one of"):
        AdamW8bit([torch.nn.Parameter(torch.ones(2))], map="log")


# ---------------------------------------------------------------- round trip


def _assert_within_bound(x: torch.Tensor, kind: str, signed: bool, block: int) -> None:
    book = code_book(kind, signed)
    q = quantize(x, book, block)
    y = dequantize(q, book)
    assert y.shape == x.shape and q.codes.dtype == torch.uint8 and q.absmax.numel() == -(-x.numel() // block)
    err = torch.nn.functional.pad((x.float() - y).abs().reshape(-1), (0, (-x.numel()) % block)).view(-1, block)
    bound = q.absmax * max_rounding_error(book, signed)
    assert torch.all(err.amax(dim=1) <= bound * (1 + 1e-5) + 1e-38), (err.amax(dim=1) - bound).max()


@settings(max_examples=60, deadline=None)
@given(values=st.lists(st.floats(-1e6, 1e6, width=32, allow_subnormal=False), min_size=1, max_size=300),
       kind=st.sampled_from(MAPS), signed=st.booleans(), block=st.sampled_from([1, 7, 64, 2048]))
def test_round_trip_error_bounded_per_block(values: list[float], kind: str, signed: bool, block: int) -> None:
    x = torch.tensor(values)
    _assert_within_bound(x if signed else x.abs(), kind, signed, block)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), n=st.integers(1, 9000), decades=st.integers(0, 10),
       kind=st.sampled_from(MAPS), signed=st.booleans())
def test_round_trip_bound_on_wide_range_data(seed: int, n: int, decades: int, kind: str, signed: bool) -> None:
    """Values spread over many orders of magnitude (like Adam's v), sizes not divisible by 2048."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, generator=g) * 10.0 ** (-decades * torch.rand(n, generator=g))
    _assert_within_bound(x if signed else x.abs(), kind, signed, 2048)


def test_bounds_are_the_stated_numbers() -> None:
    assert max_rounding_error(code_book("linear", True), True) == pytest.approx(0.5 / 127, rel=1e-4)
    assert max_rounding_error(code_book("linear", False), False) == pytest.approx(0.5 / 255, rel=1e-4)
    assert max_rounding_error(code_book("dynamic", True), True) == pytest.approx(0.9 / 64 / 2, rel=1e-4)
    assert max_rounding_error(code_book("dynamic", False), False) == pytest.approx(0.9 / 128 / 2, rel=1e-4)


@pytest.mark.parametrize("kind", MAPS)
def test_zeros_constants_and_odd_sizes(kind: str) -> None:
    book = code_book(kind, True)
    z = torch.zeros(5000)
    assert torch.equal(dequantize(quantize(z, book), book), z)
    c = torch.full((3, 2049), 0.37)  # positive constant blocks come back exactly: 1.0 is in every book
    assert torch.equal(dequantize(quantize(c, book), book), c)
    x = torch.randn(4097)
    q = quantize(x, book)
    assert q.absmax.numel() == 3 and q.codes.numel() == 4097 and q.nbytes() == 4097 + 12
    one = torch.tensor([-2.5])
    assert dequantize(quantize(one, book), book).shape == (1,)


def test_pack4_round_trip() -> None:
    codes = torch.randint(0, 16, (101,), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    packed = pack4(codes)
    assert packed.numel() == 51 and packed.dtype == torch.uint8
    assert torch.equal(unpack4(packed, 101), codes)
    with pytest.raises(LabkitError, match="0..15"):
        pack4(torch.tensor([16], dtype=torch.uint8))


# ---------------------------------------------------------------- 8-bit AdamW


def test_state_bytes_formula() -> None:
    assert state_bytes(2048) == 2 * (2048 + 4)
    assert state_bytes(2049) == 2 * (2049 + 8)
    assert state_bytes(1) == 10
    assert state_bytes(10, bits=32) == 80
    assert state_bytes(2048 * 1000) / (2048 * 1000) == 2 + 8 / 2048


def test_first_step_equals_torch_adamw_and_state_is_uint8() -> None:
    torch.manual_seed(0)
    a = torch.nn.Parameter(torch.randn(3000))
    b = torch.nn.Parameter(a.detach().clone())
    g = torch.randn(3000)
    a.grad, b.grad = g.clone(), g.clone()
    ref, ours = torch.optim.AdamW([a], lr=1e-2, weight_decay=0.1, foreach=False), AdamW8bit([b], 1e-2, weight_decay=0.1)
    ref.step()
    ours.step()
    assert torch.equal(a, b)  # the first update reads no quantized state
    st_ = ours.state[b]
    assert st_["m_codes"].dtype == st_["v_codes"].dtype == torch.uint8 and st_["m_absmax"].numel() == 2
    assert measured_state_bytes(ours) == state_bytes(3000) == 2 * (3000 + 8)
    assert measured_state_bytes(ref) == state_bytes(3000, bits=32)
    a.grad, b.grad = g.clone(), g.clone()
    ref.step()
    ours.step()
    diff = (a - b).detach().abs()  # now quantized m, v are read back: close, not equal
    assert 0 < float(diff.max()) < 1e-2 and float(diff.mean()) < 1e-4


@pytest.fixture(scope="module")
def fp32_run():
    return train_with(CFG, 60, "fp32")


def test_8bit_adamw_trains_like_fp32(fp32_run) -> None:
    trainer32, ref = fp32_run
    _, q8 = train_with(CFG, 60, "dynamic")
    assert ref.state_bytes == ref.predicted_bytes == 8 * ref.n_params
    assert q8.state_bytes == q8.predicted_bytes == model_state_bytes([p.numel() for p in trainer32.model.parameters()])
    assert 2.0 < q8.bytes_per_param < 2.02 and ref.bytes_per_param == 8.0
    assert q8.losses[0] == ref.losses[0] and q8.final_loss < ref.losses[0] - 0.5  # it learns
    # stated tolerance: within 0.05 nats of fp32 AdamW after 60 steps (measured: ~0.002)
    assert abs(q8.eval_loss - ref.eval_loss) < 0.05 and abs(q8.final_loss - ref.final_loss) < 0.05


def test_linear_map_blows_up_and_comparison_is_deterministic() -> None:
    cmp = compare_optimizers(CFG, steps=20, maps=("linear",))
    ref, lin = cmp.runs
    assert not math.isfinite(lin.eval_loss) or lin.eval_loss > 10 * ref.eval_loss  # diverged
    again = compare_optimizers(CFG, steps=20, maps=("linear",))
    assert again.rows()[0] == cmp.rows()[0] and again.run("fp32 AdamW").losses == ref.losses
    assert [r["step"] for r in cmp.loss_table(5)] == [0, 5, 10, 15]


def test_linear_map_underflows_adams_second_moment() -> None:
    trainer, _ = train_with(CFG, 1, "fp32")
    rt = {(r.map, r.moment): r for r in moment_round_trip(trainer.optimizer)}
    assert rt["linear", "v"].zero_fraction > 0.1 > 10 * rt["dynamic", "v"].zero_fraction
    assert explosive_fraction(trainer.optimizer, "linear") > 50 * explosive_fraction(trainer.optimizer, "dynamic")


# ---------------------------------------------------------------- weight storage


def test_weight_bytes_formula() -> None:
    assert weight_bytes(64, 4, 64) == 32 + 4
    assert weight_bytes(65, 4, 64) == 33 + 8
    assert weight_bytes(100, 8, 64) == 100 + 8
    assert weight_bytes(100, 32) == 400
    with pytest.raises(LabkitError, match="bits must be one of"):
        weight_bytes(100, 2)


def test_weight_storage_bytes_and_error(fp32_run) -> None:
    trainer: Trainer = fp32_run[0]
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    f32, q8, q4 = compare_storage(trainer, ((32, 64), (8, 64), (4, 64)))
    for r in (f32, q8, q4):
        assert r.payload_bytes == r.predicted_bytes  # exact: tensor bytes inside the archive
        assert 0 < r.file_bytes - r.payload_bytes < 16_384  # pickle + zip headers
    assert f32.bytes_per_param == 4.0 and q8.payload_bytes < 0.3 * f32.payload_bytes
    assert q4.payload_bytes < 0.6 * q8.payload_bytes
    assert f32.rel_error == 0.0 and 0 < q8.rel_error < 0.01 < q4.rel_error < 0.15
    assert abs(q8.eval_loss - f32.eval_loss) < 0.005 and abs(q4.eval_loss - f32.eval_loss) < 0.05
    assert f32.eval_loss == trainer.eval_loss()  # the model was restored
    assert all(torch.equal(p, before[n]) for n, p in trainer.model.named_parameters())
    coarse = measure_storage(trainer, 4, 2048)
    assert coarse.payload_bytes < q4.payload_bytes and coarse.rel_error > q4.rel_error  # fewer scales, more error


def test_checkpoint_is_weights_only_and_checked(tmp_path) -> None:
    torch.save({"w": torch.ones(2)}, tmp_path / "plain.pt")
    with pytest.raises(LabkitError, match="format must be"):
        load_weights(tmp_path / "plain.pt")
