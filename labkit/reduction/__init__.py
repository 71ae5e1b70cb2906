"""Data reduction (notebook 05): trade compute or precision for memory, and see why compression fails.

``recompute`` (activation checkpointing with ``torch.utils.checkpoint``), ``checkpoint_plan``
(the best plan for a memory budget), ``tradeoffs`` (selective recompute's FLOP counts and
Korthikanti's GPT-3 headline; segment length against Chen's sqrt(n)), ``precision`` (bf16
autocast, fp16 with loss scaling), ``quantize`` (block-wise 8-bit optimizer states, 8/4-bit weight
storage), ``compress`` (zstd and lz4 on the run's own tensors, with ``codecs``, ``planes`` for
ZipNN's byte planes and ``corpora`` for real text from Python's standard library) and ``design``
(a real model on a real GPU).
"""
