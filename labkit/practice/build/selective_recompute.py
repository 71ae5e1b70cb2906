"""Notebook 05's build-it exercise: selective activation recompute (Korthikanti et al. 2022, section 5).

A layer keeps sbh(34 + 5as/h) bytes for backward at 16 bits; the 5as^2b term is the attention core's (scores,
softmax, dropout mask), which has no weights and is cheap to recompute. The learner writes
``selective_forward(block, x)``: labkit's pre-norm layer (:class:`labkit.rig.model.Block`, explicit attention,
dropout on, 1-byte masks) with only ``block.attn.core`` under ``torch.utils.checkpoint``.

Split by trust (:mod:`labkit.practice.build.harness`): :func:`draw` picks the layer's shapes and dropout per run;
:func:`collect` runs the learner's forward and backward in a child process under labkit's saved-tensor recorder
(:class:`labkit.measure.SavedTensorRecorder`: each saved storage once, parameters left out; non-reentrant
checkpoint saves a region's inputs through it and keeps nothing else) and returns the output, the gradients and the
bytes kept; :func:`judge` runs the plain layer itself (one thread, the same seed: bit for bit) and predicts the bytes
of no recompute, selective and full recompute with :func:`labkit.reduction.recompute.predicted_layer_bytes`
(Korthikanti's terms plus each LayerNorm's mean and 1/sigma, exact at this scale), and names what was recomputed:
nothing (the scores still kept), the whole block (full recompute), more than the core (the linear layers' inputs,
cheap to keep), and a recomputation whose dropout mask is not the first one (gradients differ, output equal).
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import torch

from labkit.measure import SavedTensorRecorder
from labkit.practice.build import diagnosis as dg
from labkit.practice.build import records
from labkit.practice.build.harness import BuildExercise, register_build
from labkit.practice.build.rank_record import attempt
from labkit.practice.build.records import load_module
from labkit.practice.coding import Case
from labkit.reduction.recompute import predicted_layer_bytes, uniform_plan
from labkit.rig.model import Block, GPTConfig

KEY = "05.build.selective_recompute"
TIMEOUT_S = 30.0


def draw(seed: int) -> dict[str, Any]:
    """A layer the learner cannot hard-code: heads, width, sequence, batch and dropout drawn per run."""
    rng = random.Random(seed)
    heads = rng.choice((2, 3, 4))
    return {"n_head": heads, "d_model": heads * rng.choice((4, 6, 8)), "seq": rng.randint(7, 20),
            "batch": rng.randint(1, 3), "dropout": rng.choice((0.1, 0.2, 0.3))}


def config(params: dict[str, Any]) -> GPTConfig:
    return GPTConfig(vocab_size=16, seq_len=int(params["seq"]), n_layer=1, n_head=int(params["n_head"]),
                     d_model=int(params["d_model"]), dropout=float(params["dropout"]), mask="bool",
                     attention="explicit")


def layer(params: dict[str, Any]) -> tuple[Block, torch.Tensor, torch.Tensor]:
    """The block, its input and the loss weights: the same in the child and in the judge."""
    cfg = config(params)
    torch.manual_seed(int(params["seed"]))
    block = Block(cfg)
    shape = (int(params["batch"]), cfg.seq_len, cfg.d_model)
    return block, torch.randn(shape).requires_grad_(), torch.randn(shape)


def _step(block: Block, x: torch.Tensor, w: torch.Tensor, forward: Any, seed: int) -> dict[str, Any]:
    torch.manual_seed(seed)  # the dropout masks: the same draws in the plain run and the learner's
    with SavedTensorRecorder(block) as rec:
        out = forward(block, x)
    saved = sum(t.nbytes for t in rec.saved)
    (out * w).sum().backward()
    return {"out": out.detach(), "xgrad": x.grad, "grads": [p.grad for p in block.parameters()],
            "saved": int(saved), "by_module": {t.module or "(block input)": int(t.nbytes) for t in rec.saved}}


def recompute_rank(rank: int, world: int, log: records.OpLog, path: str, params: dict[str, Any],
                   paths: list[str] | None = None) -> list[dict[str, Any]]:
    """(Runs in the child.) Per module: the learner's forward and backward, measured."""
    out = []
    for p in paths or [path]:
        loaded = attempt(p, lambda p=p: {"m": load_module(p)})
        if "m" not in loaded:
            out.append(loaded)
            continue
        block, x, w = layer(params)
        out.append(attempt(p, lambda m=loaded["m"], block=block, x=x, w=w: _step(
            block, x, w, m.selective_forward, int(params["seed"]) + 1)))
    return out


def collect_many(paths: list[Path], params: dict[str, Any]) -> list[dict[str, Any]]:
    """One child process for every module in ``paths`` (a test's mutants); one record each."""
    got = records.ask(recompute_rank, paths[0], timeout=TIMEOUT_S, params=params, paths=[str(p) for p in paths])
    if "ranks" not in got:
        return [got for _ in paths]
    return [{**got, "ranks": [r]} for r in got["ranks"][0]]


def collect(path: Path, params: dict[str, Any]) -> dict[str, Any]:
    """The raw record of the learner's module at ``path``, run in a child process."""
    return collect_many([path], params)[0]


def predictions(params: dict[str, Any]) -> dict[str, int]:
    """Bytes the layer keeps with no recompute, selective and full (Korthikanti et al. 2022, fp32 here)."""
    cfg, b = config(params), int(params["batch"])
    return {mode: predicted_layer_bytes(cfg, b, uniform_plan(mode, 1), 4)[0] for mode in ("none", "selective", "full")}


def _plain(params: dict[str, Any]) -> dict[str, Any]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the child runs on one thread: the same kernels, the same bits
    try:
        block, x, w = layer(params)
        return _step(block, x, w, lambda blk, t: blk(t), int(params["seed"]) + 1)
    finally:
        torch.set_num_threads(threads)


def judge(record: dict[str, Any], params: dict[str, Any]) -> list[Case]:
    """(TRUSTED side.) Output and gradients bit for bit against the plain layer; the bytes kept against
    selective's prediction."""
    if stop := dg.failure_case(record, f"selective_forward runs within {TIMEOUT_S:g} s", {"raised": GRADS}):
        return [stop]
    r = dg.field(dg.ranks_of(record, 1), 0, dict)
    if failure := r.get("failure"):
        where = f" (at {failure.get('learner_frames')})" if failure.get("learner_frames") else ""
        return [Case("selective_forward runs", False, f"raised {failure.get('message')}{where}", GRADS)]
    plain, pred = _plain(params), predictions(params)
    out = dg.field(r, "out", torch.Tensor)
    same_out = out.dtype == plain["out"].dtype and out.shape == plain["out"].shape and torch.equal(out, plain["out"])
    grads = [dg.field(r, "xgrad", torch.Tensor), *dg.field(r, "grads", list, len(plain["grads"]))]
    want = [plain["xgrad"], *plain["grads"]]
    same = all(isinstance(g, torch.Tensor) and g.shape == p.shape and torch.equal(g, p) for g, p in zip(
        grads, want, strict=True))  # fmt: skip
    cases = [Case("output equals block(x), bit for bit", same_out, "the output differs from the plain layer's: "
                  "the same operations in the same order give the same bits (compare with the stub's plain forward)",
                  GRADS)]
    why = ("the output is right but the gradients differ: the dropout mask was not replayed in the recomputation "
           "(preserve_rng_state=False, or the RNG moved between forward and recompute)" if same_out else
           "the gradients differ from no recompute's (the output differs too: see above)")
    cases.append(Case("gradients bit-identical to no recompute (dropout on)", same and same_out, why, RNG))
    saved = dg.field(r, "saved", int)
    sel, none, full = pred["selective"], pred["none"], pred["full"]
    if saved == none:
        why = (f"{saved:,} B, no recompute's: nothing recomputed, the attention scores are kept ({none - sel:,} B "
               "of the layer's, the 5as^2b term)")
    elif saved == full:
        why = (f"{saved:,} B, only the block's input: the whole block recomputed (full recompute, not selective: "
               "backward repeats every matmul of the layer)")
    elif saved < sel:
        why = (f"{saved:,} B, {sel - saved:,} B fewer: recomputes more than the attention core (the linear layers' "
               "inputs are cheap to keep and their matmuls expensive to repeat)")
    else:
        why = f"{saved:,} B, {saved - sel:,} B more: part of the attention core (scores, softmax, mask) is still kept"
    cases.append(Case(f"bytes kept equal selective recompute's prediction ({sel:,} B, beside {none:,} B with no "
                      f"recompute)", saved == sel, why, BYTES))
    return cases


GRADS = ("Does your forward run the same operations, in the same order, as the plain one in the stub?",
         "Copy the plain forward and change one line: y = checkpoint(a.core, q, k, v, use_reentrant=False)...")
RNG = ("Dropout draws a new mask each time it runs. What must checkpoint restore before it recomputes?",
       "Leave preserve_rng_state at its default (True) and use use_reentrant=False.")
BYTES = ("Which activations are expensive to recompute (matmuls with weights) and which cheap (the core: no "
         "weights)? Keep the first, recompute the second.",
         "Checkpoint block.attn.core alone; run ln_1, c_attn, c_proj, ln_2 and the MLP normally.")


register_build(BuildExercise(
    key=KEY, stub="selective_recompute.py",
    task="In build/selective_recompute.py write selective_forward(block, x): labkit's pre-norm layer's forward "
         "(the stub shows it) with only the attention core (block.attn.core) recomputed in backward through "
         "torch.utils.checkpoint. Checked on a layer drawn per run, dropout on: output and gradients bit-identical "
         "to no recompute, bytes kept equal to Korthikanti et al.'s selective prediction (the 5as^2b term gone).",
    hint=("Which part of a layer's activations grows with s^2, and which part has no weights to multiply again?",
          "Run the layer as usual, but call the core through checkpoint(..., use_reentrant=False)."),
    worked="Copy the plain forward and replace a.core(q, k, v) by checkpoint(a.core, q, k, v, use_reentrant=False): "
           "checkpoint keeps q, k, v (views of c_attn's output, kept anyway), stashes the RNG state, and in "
           "backward reruns the core with the same dropout mask; ln_1, c_attn, c_proj, ln_2 and the MLP keep their "
           "inputs as without recompute.",
    draw=draw, collect=collect, judge=judge,
))
