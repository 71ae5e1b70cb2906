"""QLoRA's 4-bit NormalFloat storage of frozen weights, and a linear layer that computes through it.

QLoRA (Dettmers et al., NeurIPS 2023, section 3) stores each frozen weight matrix as 4-bit NF4 codes
(the 16 quantiles of a standard normal, rescaled to [-1, 1]; two codes a byte) in blocks of 64, each
block with its absmax scale. Double quantization stores those fp32 scales again in 8 bits, in blocks
of 256 after subtracting their mean, with one fp32 scale per 256 blocks: 32/64 = 0.5 bits a weight
become 8/64 + 32/(64*256) = 0.127. Here the second level is a symmetric int8 grid (the paper uses an
8-bit float); the bytes are the same. bitsandbytes' CPU backend was tried and not used: its 4-bit
layers fetch a kernel from the Hugging Face Hub at run time (remote code, network), which the lab
does not allow; this is the lab's own storage (``labkit.reduction.weight_quant`` holds a linear int4
checkpoint format, a topic that ``measure`` may not import).

``NF4Linear`` keeps only the codes and scales. Its forward dequantizes the weight to the activations'
dtype (in chunks of ``CHUNK`` code bytes, into one (out, in) buffer), multiplies and frees it; its
backward dequantizes again, as bitsandbytes' ``MatMul4Bit`` does, so neither pass saves the weight or
the input. The dequantized weight is a transient of its layer, counted by ``labkit.predict.finetune_peak``.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from labkit.errors import LabkitError

# The NF4 code book: bitsandbytes' table for QLoRA (Dettmers et al. 2023, appendix E).
NF4 = (-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453, -0.28444138169288635,
       -0.18477343022823334, -0.09105003625154495, 0.0, 0.07958029955625534, 0.16093020141124725,
       0.24611230194568634, 0.33791524171829224, 0.44070982933044434, 0.5626170039176941,
       0.7229568362236023, 1.0)
BLOCK = 64
SCALE_BLOCK = 256  # double quantization: scales per second-level block
CHUNK = 2**18  # code bytes dequantized at once
QUANT_ROWS = 2**14  # blocks quantized at once (no step measures it)


def _table256() -> torch.Tensor:
    """(256, 2) fp32: the two NF4 values a byte holds (high nibble first)."""
    t = torch.tensor(NF4, dtype=torch.float32)
    idx = torch.arange(256)
    return torch.stack((t[idx >> 4], t[idx & 15]), dim=1)


_TABLE = _table256()
_MIDPOINTS = (torch.tensor(NF4[1:]) + torch.tensor(NF4[:-1])) / 2


def _codes_of(x: torch.Tensor) -> torch.Tensor:
    """Nearest NF4 index of each value of ``x`` (already in [-1, 1]), as uint8."""
    return torch.bucketize(x, _MIDPOINTS).to(torch.uint8)


class NF4Linear(nn.Module):
    """A frozen linear layer stored as NF4 codes + blocked scales (``double_quant``: int8 scales of scales).

    ``transposed``: the weight is (in, out), as transformers' GPT-2 ``Conv1D`` keeps it. The bias, if
    any, stays in the model's 16-bit dtype (QLoRA quantizes matrices only).
    """

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, transposed: bool = False,
                 double_quant: bool = False) -> None:
        super().__init__()
        w = weight.detach()
        if w.numel() % (2 * BLOCK):
            raise LabkitError(f"weight must hold a multiple of {2 * BLOCK} elements for NF4 blocks of {BLOCK} "
                              f"(got shape {tuple(w.shape)})")
        self.shape, self.transposed, self.double_quant = tuple(w.shape), transposed, double_quant
        flat = w.reshape(-1, BLOCK).float()
        absmax = flat.abs().amax(dim=1).clamp_min(torch.finfo(torch.float32).tiny)
        codes = torch.empty(w.numel(), dtype=torch.uint8)
        rows = QUANT_ROWS
        for i in range(0, flat.shape[0], rows):
            codes[i * BLOCK:(i + rows) * BLOCK] = _codes_of(flat[i:i + rows] / absmax[i:i + rows, None]).reshape(-1)
        self.register_buffer("codes", (codes[0::2] << 4) | codes[1::2])
        if double_quant:
            mean = absmax.mean()
            centred = absmax - mean
            pad = (-centred.numel()) % SCALE_BLOCK
            blocks = torch.cat((centred, centred.new_zeros(pad))).view(-1, SCALE_BLOCK)
            scale2 = blocks.abs().amax(dim=1).clamp_min(torch.finfo(torch.float32).tiny)
            q = torch.round(blocks / scale2[:, None] * 127).to(torch.int8).reshape(-1)[:centred.numel()]
            self.register_buffer("absmax_codes", q.clone())
            self.register_buffer("absmax_scale", scale2)
            self.register_buffer("absmax_mean", mean.reshape(()).clone())
        else:
            self.register_buffer("absmax", absmax)
        self.bias = None if bias is None else nn.Parameter(bias.detach().clone(), requires_grad=False)

    def scales(self) -> torch.Tensor:
        """The fp32 absmax of every block (decoded from int8 under double quantization)."""
        if not self.double_quant:
            return self.absmax
        n = self.absmax_codes.numel()
        idx = torch.arange(n, device=self.absmax_codes.device) // SCALE_BLOCK
        return self.absmax_codes.float() / 127 * self.absmax_scale[idx] + self.absmax_mean

    def dequantize(self, dtype: torch.dtype) -> torch.Tensor:
        """The weight in ``dtype``, its stored shape, decoded chunk by chunk into one buffer."""
        out = torch.empty(self.codes.numel() * 2, dtype=dtype, device=self.codes.device)
        scales, table = self.scales(), _TABLE.to(self.codes.device)
        per = CHUNK * 2 // BLOCK  # blocks a chunk of codes covers
        for j, i in enumerate(range(0, self.codes.numel(), CHUNK)):
            idx = self.codes[i:i + CHUNK].int()  # 4 bytes a code byte
            pairs = table.index_select(0, idx).view(-1, BLOCK)  # 8 bytes a code byte (two fp32 values)
            del idx
            pairs.mul_(scales[j * per:(j + 1) * per, None])
            out[2 * i:2 * i + pairs.numel()].view(-1, BLOCK).copy_(pairs)
            del pairs
        return out.view(self.shape)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = _NF4Matmul.apply(x, self)
        return y if self.bias is None else y + self.bias


class _NF4Matmul(torch.autograd.Function):
    """x @ W^T with W dequantized in forward and again in backward: nothing saved but the layer itself."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, layer: NF4Linear) -> torch.Tensor:
        ctx.layer = layer
        w = layer.dequantize(x.dtype)
        return x @ (w if layer.transposed else w.t())

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        w = ctx.layer.dequantize(grad.dtype)
        return grad @ (w.t() if ctx.layer.transposed else w), None


def _linear_weight(m: nn.Module) -> tuple[torch.Tensor, torch.Tensor | None, bool] | None:
    """(weight, bias, transposed) of an ``nn.Linear`` or transformers' ``Conv1D``; None for anything else."""
    if isinstance(m, nn.Linear):
        return m.weight, m.bias, False
    if type(m).__name__ == "Conv1D" and getattr(m, "weight", None) is not None:
        return m.weight, m.bias, True
    return None


def quantize_base(blocks: nn.Module, double_quant: bool = False) -> int:
    """Replace every frozen linear layer inside ``blocks`` (LoRA's base layers included) by an ``NF4Linear``.

    Embeddings, norms and the output layer stay in 16 bits, as in QLoRA. Returns the layers replaced.
    """
    done = 0
    for name, parent in list(blocks.named_modules()):
        for child_name, child in list(parent.named_children()):
            found = _linear_weight(child)
            if found is None or found[0].requires_grad or "lora_" in f"{name}.{child_name}":
                continue
            weight, bias, transposed = found
            setattr(parent, child_name, NF4Linear(weight, bias, transposed, double_quant))
            done += 1
    return done


def storage_bytes(blocks: nn.Module) -> int:
    """Bytes of every ``NF4Linear``'s codes, scales and biases inside ``blocks``."""
    return sum(sum(t.untyped_storage().nbytes() for t in (*m.buffers(), *m.parameters()))
               for m in blocks.modules() if isinstance(m, NF4Linear))
