"""The host's seconds of one eager layer's forward and backward, in bare ops: what ``eager_ops.HOST_BARE_OPS`` stores.

An eager training step on a GPU is issued op by op from Python: each op costs the host its Python call, the module
calls around it, the dispatcher, autocast, autograd's bookkeeping and the launch call, and a small model's step is
nothing but that (the GPU waits for work). On tiny tensors (hidden size 16, 8 tokens) the CPU's kernels do next to
nothing too, so a step timed here is the host's time. It is reported, as ``optimizer_host`` reports the lab
optimizer's loop, in units of one bare op timed exactly as ``labkit calibrate`` times ``launch_s``
(``calibrate.bare_op_seconds``), alternating with it in rounds and taking the median of the rounds' ratios
(``calibrate.in_bare_ops``): a shared machine that slows one slows both. ``labkit bench`` prints them.

Per layer: the same model at two depths (``DEPTHS``), the difference over the layers between them, so the
embedding, the final norm, the head and the loss fall out (and are reported as what is left at the shallower
depth: ``outside``). Forward (the model's call with the loss) and backward (``loss.backward()`` after it) are
timed separately, each the fastest of a few runs in a round. Models: the lab's TinyGPT (``labkit.rig``) and
transformers' Llama, Qwen2 and GPT-2 built from tiny configs here (random weights, sdpa, nothing downloaded),
at a precision given as ``Precision`` (``predict.eager_elementwise``): weights' bytes, autocast bf16 on or off,
dropout. CPU autocast stands in for CUDA's (its op lists differ a little: ``eager_ops``' CUDA-only terms).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch

from labkit.measure.calibrate import bare_op_seconds, in_bare_ops
from labkit.predict.eager_elementwise import Precision
from labkit.shapes.hf_models import build_model, small_spec

ARCHS = ("tinygpt", "llama", "qwen2", "gpt2")
DEPTHS = (2, 4)
HIDDEN, HEADS, KV_HEADS, FFN, VOCAB, SEQ = 16, 4, 2, 32, 64, 8
_DTYPES = {2: torch.bfloat16, 4: torch.float32}


def _model(arch: str, layers: int, prec: Precision) -> tuple[torch.nn.Module, Callable[[], torch.Tensor]]:
    """A tiny ``arch`` model of ``layers`` layers at ``prec`` (weights' bytes: 4 fp32 when 0), and its loss."""
    torch.manual_seed(0)
    drop = 0.1 if prec.dropout else 0.0
    ids = torch.randint(0, VOCAB, (1, SEQ))
    if arch == "tinygpt":
        from labkit.rig.model import GPTConfig, TinyGPT

        model = TinyGPT(GPTConfig(vocab_size=VOCAB, n_layer=layers, d_model=8, n_head=2, seq_len=SEQ, dropout=drop))
        def loss() -> torch.Tensor:
            return model(ids, ids)[1]
    else:  # TinyLlama's untied head, Qwen2-1.5B's tied one (datasets/hf_configs); GPT-2's MLP at 4 h
        spec = small_spec(arch, layers, HIDDEN, HEADS, KV_HEADS, 4 * HIDDEN if arch == "gpt2" else FFN, VOCAB,
                          **({"tie_word_embeddings": True} if arch == "qwen2" else {}))
        model = build_model(spec, "sdpa", dropout=drop if arch == "gpt2" else None)

        def loss() -> torch.Tensor:
            return model(input_ids=ids, labels=ids).loss
    model.to(_DTYPES[prec.weights or 4]).train()
    return model, loss


def _pass_times(model: torch.nn.Module, loss: Callable[[], torch.Tensor], autocast: bool,
                repeats: int = 5) -> tuple[float, float]:
    """Fastest forward (the loss) and fastest backward (``loss.backward()`` after it) of ``repeats``, after one
    untimed step; gradients dropped between runs (untimed), as ``zero_grad`` leaves them."""
    best_f = best_b = float("inf")
    for i in range(repeats + 1):
        for p in model.parameters():
            p.grad = None
        t0 = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            out = loss()
        t1 = time.perf_counter()
        out.backward()
        t2 = time.perf_counter()
        if i:
            best_f, best_b = min(best_f, t1 - t0), min(best_b, t2 - t1)
    return best_f, best_b


def layer_host_ops(arch: str, prec: Precision, rounds: int = 7, calls: int = 3000) -> dict[str, float]:
    """Host bare ops of one layer's forward and backward of ``arch`` at ``prec`` (module text), and of the rest
    of the model's (embedding, final norm, head, loss) at the shallower depth: the median over ``rounds`` of each
    round's ratio to one bare op (``bare_op_s``: the fastest bare op seen)."""
    models = {d: _model(arch, d, prec) for d in DEPTHS}
    lo, hi = DEPTHS
    keys = ("forward", "backward", "outside_forward", "outside_backward")
    ratios: dict[str, list[float]] = {k: [] for k in keys}
    bare_seen = []
    for _ in range(rounds):
        t = {d: _pass_times(*models[d], prec.autocast) for d in DEPTHS}
        bare = bare_op_seconds(calls)
        bare_seen.append(bare)
        for j, name in enumerate(("forward", "backward")):
            per_layer = (t[hi][j] - t[lo][j]) / (hi - lo)
            ratios[name].append(per_layer / bare)
            ratios[f"outside_{name}"].append((t[lo][j] - lo * per_layer) / bare)
    return {k: statistics.median(v) for k, v in ratios.items()} | {"bare_op_s": min(bare_seen)}


def tiny_gpt_step_ops(rounds: int = 7, calls: int = 3000) -> dict[str, float]:
    """One ``Trainer.step()`` of the lab's tiny GPT (2 layers, d_model 8, batch 1 x 8, bf16-mixed, one thread: the
    model of the H200's tiny-GPT row at a size whose kernels do nothing) in bare ops: the median of the rounds'
    ratios, and the fastest step and bare op seen."""
    from labkit.rig.data import vocab_size
    from labkit.rig.model import GPTConfig
    from labkit.rig.train import TrainConfig, Trainer

    trainer = Trainer(TrainConfig(model=GPTConfig(vocab_size=vocab_size(), n_layer=2, d_model=8, n_head=2, seq_len=8,
                                                  dropout=0.1), batch_size=1, precision="bf16-mixed", threads=1))
    r = in_bare_ops(trainer.step, rounds, calls)
    return {"ops": r["ops"], "step_s": r["fn_s"], "bare_op_s": r["bare_op_s"]}


# the eager sets' precisions (reference_sets): h200_eager.toml builds each model in its config's dtype (TinyLlama's
# float32, Qwen2-1.5B's bfloat16, GPT-2 medium's float32 with its 0.1 dropouts) under autocast bf16; the lab's loop
# (h200-gpu-check, tools/gpu_check.sh) runs bf16 weights, no autocast, dropout 0
EAGER_CASES = {("llama", "h200-eager"): Precision(4, True, True), ("qwen2", "h200-eager"): Precision(2, True, True),
               ("gpt2", "h200-eager"): Precision(4, True, True),
               **{(a, "lab"): Precision(2, autocast=False, dropout=False) for a in ARCHS}}

