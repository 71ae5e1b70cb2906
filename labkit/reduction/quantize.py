"""Block-wise quantization: code books (dynamic and linear) and absmax blocks, in torch.

Dettmers et al., "8-bit Optimizers via Block-wise Quantization" (ICLR 2022) store a
tensor as blocks of 2048 values, each with one fp32 scale (the block's absolute
maximum) and one 8-bit code per value. A code is an index into a *code book*: 256
numbers in [-1, 1] (signed) or [0, 1] (unsigned). Quantizing divides a block by its
absmax and picks the nearest code-book entry; dequantizing looks the entry up and
multiplies by the absmax back. Two code books:

* ``linear``: evenly spaced (k/127 signed, k/255 unsigned; k/7 for 4-bit). Every
  value of a block below absmax/254 becomes 0: fine for weights, fatal for Adam's
  second moment, which spans many orders of magnitude within one block.
* ``dynamic``: the paper's dynamic tree quantization (after Dettmers, "8-Bit
  Approximations for Parallelism in Deep Learning", ICLR 2016). The bits of a code
  are a sign bit, then a run of E zeros (the exponent, base 10), a 1 that ends the
  run, and the remaining F bits as a linear fraction in [0.1, 1]: the value is
  +-10^-E times the middle of fraction bin f of 2^F. Large exponents leave fewer
  fraction bits, so the code book is dense near 0 (down to ~3e-7) and coarse near
  1. The unsigned variant spends the sign bit on one more fraction bit. As in the
  reference implementation (``bitsandbytes.functional.create_dynamic_map``) the
  exponent stops at 6 and the codes left over hold 0 and exactly 1.0, so a block's
  largest value survives the round trip.

Codes are indices into the sorted code book, found with ``torch.bucketize`` on the
midpoints between entries (nearest rounding). Round-trip error bound, per block:
``|x - dequantize(quantize(x))| <= absmax * max_rounding_error(code)``, where
``max_rounding_error`` is half the largest gap between neighbouring entries, with
the ends of [-1, 1] (or [0, 1]) counted as neighbours.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache

import torch

from labkit.errors import LabkitError, require_choice, require_positive

MAPS = ("dynamic", "linear")
BLOCK = 2048  # Dettmers et al. 2022, section 2.2
SCALE_BYTES = 4  # one fp32 absmax per block


def _dynamic_values(signed: bool, exponent_bits: int = 7) -> list[float]:
    """The dynamic tree's values, generated from its bit layout (see the module docstring)."""
    values: list[float] = [0.0, 1.0]
    fraction_width = 7 - exponent_bits + (0 if signed else 1)  # bits after sign, exponent run and indicator
    for e in range(exponent_bits):  # e leading zeros, then the indicator bit
        f = exponent_bits - 1 - e + fraction_width
        edges = torch.linspace(0.1, 1.0, 2**f + 1, dtype=torch.float32)
        mids = ((edges[:-1] + edges[1:]) / 2 * 10.0**-e).tolist()
        values += mids + ([-m for m in mids] if signed else [])
    return values


@cache
def _code_book(kind: str, signed: bool, bits: int) -> torch.Tensor:
    if kind == "dynamic":
        if bits != 8:
            raise LabkitError(f"bits must be 8 for the dynamic map (got {bits})")
        values = _dynamic_values(signed)
    else:
        top = 2 ** (bits - 1) - 1 if signed else 2**bits - 1
        values = [k / top for k in range(-top if signed else 0, top + 1)]
    book = torch.tensor(sorted(values), dtype=torch.float32)
    if len(book) > 2**bits or len(set(book.tolist())) != len(book):
        raise AssertionError(f"{kind} code book has {len(book)} entries for {bits} bits")
    return book


def code_book(kind: str = "dynamic", signed: bool = True, bits: int = 8) -> torch.Tensor:
    """The sorted code book of ``kind`` (``dynamic`` or ``linear``): at most 2**bits fp32 values in [-1, 1]."""
    require_choice("map", kind, MAPS)
    require_choice("bits", bits, (4, 8))
    return _code_book(kind, bool(signed), bits).clone()


def max_rounding_error(book: torch.Tensor, signed: bool = True) -> float:
    """Half the largest gap in ``book``, the ends of the normalised range included: the per-block error bound."""
    lo = -1.0 if signed else 0.0
    pts = torch.cat([torch.tensor([lo]), book.double(), torch.tensor([1.0])]).unique()
    gaps = pts.diff()
    ends = max(float(book.min()) - lo, 1.0 - float(book.max()))
    return max(float(gaps.max()) / 2, ends)


@dataclass(frozen=True)
class Quantized:
    """A tensor stored block-wise: one code per value, one fp32 absmax per block."""

    codes: torch.Tensor  # uint8, one per value (4-bit codes are packed only for storage)
    absmax: torch.Tensor  # fp32, one per block
    shape: tuple[int, ...]
    block: int

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    def nbytes(self, bits: int = 8) -> int:
        """Bytes of codes (``bits`` per value, rounded up to whole bytes) and scales."""
        return -(-self.numel * bits // 8) + SCALE_BYTES * self.absmax.numel()


def _blocks(x: torch.Tensor, block: int) -> torch.Tensor:
    flat = x.detach().reshape(-1).float()
    pad = (-flat.numel()) % block
    return torch.nn.functional.pad(flat, (0, pad)).view(-1, block)


def quantize(x: torch.Tensor, book: torch.Tensor, block: int = BLOCK) -> Quantized:
    """Absmax block-wise quantization of ``x`` onto the sorted code book ``book`` (any size; last block padded)."""
    require_positive("block", block)
    if x.numel() == 0:
        raise LabkitError("x must have at least one element (got an empty tensor)")
    if len(book) > 256:
        raise LabkitError(f"code book must have at most 256 entries (got {len(book)})")
    blocks = _blocks(x, block)
    absmax = blocks.abs().amax(dim=1)
    normed = blocks / torch.where(absmax > 0, absmax, 1.0).unsqueeze(1)
    codes = torch.bucketize(normed, (book[1:] + book[:-1]) / 2).to(torch.uint8)
    return Quantized(codes.view(-1)[: x.numel()].clone(), absmax, tuple(x.shape), block)


def dequantize(q: Quantized, book: torch.Tensor) -> torch.Tensor:
    """fp32 tensor of ``q``'s shape: code-book entry times its block's absmax."""
    values = book[q.codes.long()]
    pad = (-q.numel) % q.block
    values = torch.nn.functional.pad(values, (0, pad)).view(-1, q.block) * q.absmax.unsqueeze(1)
    return values.view(-1)[: q.numel].view(q.shape)


def pack4(codes: torch.Tensor) -> torch.Tensor:
    """Two 4-bit codes per byte (low nibble first); an odd count is padded with a zero nibble."""
    if codes.numel() and int(codes.max()) > 15:
        raise LabkitError(f"4-bit codes must be in 0..15 (got {int(codes.max())})")
    flat = codes.reshape(-1).to(torch.uint8)
    if flat.numel() % 2:
        flat = torch.cat([flat, flat.new_zeros(1)])
    pairs = flat.view(-1, 2)
    return pairs[:, 0] | (pairs[:, 1] << 4)


def unpack4(packed: torch.Tensor, n: int) -> torch.Tensor:
    """The ``n`` 4-bit codes that :func:`pack4` stored."""
    return torch.stack([packed & 0x0F, packed >> 4], dim=1).view(-1)[:n]
