"""The training rig: the lab's tiny GPT, its generated corpus and batches, and the training loop.

Everything a notebook trains runs through here. Depends only on :mod:`labkit.errors`; the
measuring core, the topics and the teaching layer sit above it.
"""
