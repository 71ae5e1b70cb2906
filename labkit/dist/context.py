"""How ranks are started: from a forkserver that imported torch once, else by spawn.

A spawned rank imports torch afresh: about 1.5-2 s a rank on two shared cores, paid again by every cell
and test that starts a group. A forkserver is a clean process that imports torch (and this package) once;
each rank is forked from it, so a group starts in tens of milliseconds after the first. The caller
itself is never forked: a notebook kernel runs torch's thread pools, and fork copies a process mid-state.
The forkserver is started once, with the caller's environment at that moment; a rank sets what it needs
(``GLOO_SOCKET_IFNAME``, threads, seed) itself. Where the platform has no forkserver, ranks are spawned.
"""

from __future__ import annotations

import torch.multiprocessing as mp

# torch._dynamo: AdamW's first step imports it (about 1.1 s a rank otherwise); labkit.practice.build: the build-it
# ranks' own package (0.1-0.3 s a rank). Measured: a 2-rank ZeRO-1 check 2.5 s -> 0.12 s with both.
PRELOAD = ("torch", "torch.distributed", "torch._dynamo", "labkit.dist", "labkit.practice.build")
_context = None


def context():
    """The start context every local group uses: forkserver with ``PRELOAD`` imported, else spawn."""
    global _context
    if _context is None:
        if "forkserver" in mp.get_all_start_methods():
            ctx = mp.get_context("forkserver")
            ctx.set_forkserver_preload(list(PRELOAD))
        else:
            ctx = mp.get_context("spawn")
        _context = ctx
    return _context
