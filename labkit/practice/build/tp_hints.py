"""Hints of 03.build.tp_layers and 03.build.sp_block, keyed to the bug the judge diagnosed: a question first,
then a direction (the harness shows one more step per failed try, then the worked answer)."""

from __future__ import annotations

from typing import Any

from labkit.practice.coding import Case

HINTS: dict[str, tuple[str, ...]] = {
    "f_missing": ("f's input x is the same on every rank; each rank's copy of it feeds a different slice of the "
                  "output. What is the gradient of x, then?",
                  "In CopyToParallel.backward, all-reduce (sum) the gradient before returning it."),
    "g_missing": ("After the row-parallel layer each rank holds a partial product. What turns them into the output?",
                  "ReduceFromParallel.forward all-reduces (sums) a contiguous clone of its input."),
    "extra_backward": ("The forward of g is a sum over ranks. What does the gradient of a sum send to each of its "
                       "terms? Count the all-reduces your backward runs.",
                       "Only f's backward all-reduces; g's backward returns grad as it is."),
    "f_forward": ("What does f do in forward?", "CopyToParallel.forward returns x (x.view_as(x))."),
    "g_backward": ("What is the gradient of a sum with respect to one of its terms?",
                   "ReduceFromParallel.backward returns grad unchanged."),
    "contiguous": ("Is the tensor you hand to the collective one dense buffer? A column slice of a bigger tensor "
                   "is not.", "Call .contiguous() (and clone, to leave autograd's buffers alone) before "
                   "dist.all_reduce."),
    "hard2": ("Does your module use the world size it is given, or a number you had in mind?",
              "Use the world argument (or dist.get_world_size()) everywhere you wrote 2."),
    "wrong_dim": ("nn.Linear stores weight as [out_features, in_features]. Which dimension holds the outputs?",
                  "Column-parallel: weight.chunk(world, dim=0)[rank]; row-parallel: weight.chunk(world, dim=1)[rank]."),
    "strided": ("Which rows does rank r own in Megatron's layout: every t-th one, or one block?",
                "weight.chunk(world, dim)[rank]: rows r*n/t to (r+1)*n/t, a contiguous block."),
    "row_bias": ("The row-parallel outputs are summed over ranks. How many times may the bias be in that sum?",
                 "row_shard returns the whole bias; RowParallelLinear adds it once, after g."),
    "bias_twice": ("Where is fc2's bias added: inside the sum over ranks, or after it?",
                   "RowParallelLinear: g(F.linear(x, w)) + b, never g(F.linear(x, w, b))."),
    "shard": ("Which block of the dense weight does rank r hold?",
              "Column: rows weight.chunk(world, 0)[rank] and bias.chunk(world, 0)[rank]; row: weight.chunk(world, "
              "1)[rank] and the whole bias."),
    "names": ("What are your parallel MLP's parameters called?",
              "self.fc1 = ColumnParallelLinear(...), self.fc2 = RowParallelLinear(...), each with weight and bias."),
    "some_ranks": ("A collective returns only when every rank has called it. Does every rank reach each of yours?",
                   "Call each collective unconditionally, on every rank, in the same order (no `if rank == 0:`)."),
    "raised": ("Read the error and the line of your module it points at: what did the code expect?",
               "Run the failing function by hand on a tensor of the shapes in the message."),
    "mlp": ("Which of f, g, the shards is wrong? The cases above test each alone.",
            "ParallelMLP: fc2(gelu(fc1(x))) on ColumnParallelLinear (f inside) and RowParallelLinear (g inside)."),
    "sp_gather": ("Under sequence parallelism each rank holds s/t tokens. What does a column-parallel layer need?",
                  "Before the column-parallel linears all-gather the sequence (dim 0); its backward is a "
                  "reduce-scatter."),
    "sp_scatter": ("The row-parallel partial sums must be summed AND cut back to this rank's tokens. Which one "
                   "collective does both?", "After the row-parallel linears reduce-scatter along the sequence "
                   "(dim 0); its backward is an all-gather."),
    "sp_heads": ("Which heads does rank r compute, and where are their q, k, v rows in c_attn?",
                 "Rank r's heads are n_head/t consecutive heads; take their q, k and v rows from each third of "
                 "c_attn's weight."),
    "sp_ln": ("LayerNorm's weight is replicated and its gradient comes from every rank's tokens. What must happen "
              "to it after backward?", "All-reduce (sum) the LayerNorm and row-bias gradients over the ranks."),
}


def fault_text(part: Any) -> str | None:
    """The learner's fault recorded for one part of a rank's checks, as text; None when the part ran."""
    failure = part.get("failure") if isinstance(part, dict) else None
    if failure is None:
        return None
    if not isinstance(failure, dict):
        return "a malformed part of the record"
    where = f" (at {failure.get('learner_frames')})" if failure.get("learner_frames") else ""
    return f"raised {failure.get('message', '?')}{where}"


def case(name: str, ok: bool, detail: str, bug: str) -> Case:
    """A case whose hints are those of the diagnosed ``bug`` (the generic ones when unknown)."""
    return Case(name, ok, detail, HINTS.get(bug, HINTS["mlp"]) if not ok else ())


FAILURE_HINTS = {"a collective only some ranks call": HINTS["some_ranks"], "raised": HINTS["raised"],
                 "timeout": HINTS["some_ranks"]}  # keyed as labkit.practice.build.diagnosis.failure_case names them
