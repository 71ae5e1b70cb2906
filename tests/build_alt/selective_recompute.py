"""An independent correct 05.build.selective_recompute (written apart from the reference): the core's forward is
swapped for a checkpointed one for the length of one call of the whole block."""

from torch.utils.checkpoint import checkpoint


def selective_forward(block, x):
    core = block.attn.core
    plain = type(core).forward

    def recomputed(q, k, v):
        return checkpoint(lambda *t: plain(core, *t), q, k, v, use_reentrant=False)

    core.forward = recomputed
    try:
        return block(x)
    finally:
        del core.forward
