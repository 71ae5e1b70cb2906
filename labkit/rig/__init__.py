"""The training rig: the lab's tiny GPT, its generated corpus and batches, and the training loop.

Everything a notebook trains runs through here: ``step`` is the one training step (forward under
the trainer's autocast, backward, optimizer step, zero_grad) with hooks at its phase boundaries,
which measuring, offload, tracing, the engines and the crash workers plug into. Depends only on
:mod:`labkit.errors`; the measuring core, the topics and the teaching layer sit above it.
"""
