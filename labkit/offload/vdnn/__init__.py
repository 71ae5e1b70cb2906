"""vDNN: saved activations offloaded in forward and prefetched in backward (Rhu et al., MICRO 2016).

vDNN's observation: an activation saved in forward is not touched again until backward
reaches its layer, so it can leave the device right after it is made and come back just
before it is used; backward visits layers in reverse, so the next tensor needed is known
and can be read ahead while the current layer computes. Here that runs for real on the
tiny GPT through ``torch.autograd.graph.saved_tensors_hooks``:

* ``store="dram"``: a copy into a separate host buffer. On a GPU this is a pinned-memory
  D2H copy; on this CPU-only build it is a plain copy into another buffer, the same bytes;
* ``store="disk"``: one raw file per storage in a :class:`labkit.offload.disk.store.DiskStore`
  (``O_DIRECT`` where the file system allows it, so the bytes reach the disk rather than the
  page cache); bytes are written as a uint8 view of the storage, so bf16 round-trips bit
  for bit, like the int16 view in the field notes;
* a background thread reads offloaded tensors in backward order (from the trace of the
  first iteration, or reversed save order without one), at most ``lookahead`` ahead; a use
  that finds its tensor not yet read is a *stall*.

A file that is missing, truncated (also while backward runs) or unreadable (``EIO``), or a
full disk, raises :class:`OffloadError` in the training step, naming the file, the tensor
and the OS's reason, whichever thread hit it; the prefetch thread stops and no offload file
is left behind.

Which tensors go (``OffloadPolicy``): ``all`` (every saved storage of at least
``min_bytes``), ``conv-like`` (vDNN's ``vDNN_conv``: only the inputs saved by the
compute-heavy modules, here ``Linear`` and ``MatMul``, whose compute can hide the copy),
``largest-k`` (the k largest storages of the trace) and ``modules`` (fnmatch patterns
of module names, e.g. ``"*.attn.core.softmax"`` for the attention probabilities).

Whole storages move, so views (q, k, v of one buffer) are restored as views of one copy
and the gradients are bit-identical to the plain run. Originals are kept referenced until
forward ends, only so that a storage address cannot be reused while it names an offloaded
tensor; the budget counts them as gone once copied, as vDNN's device would.
"""

from labkit.offload.vdnn.offloader import STORES, Offloader
from labkit.offload.vdnn.policy import COMPUTE_HEAVY, POLICIES, OffloadPolicy
from labkit.offload.vdnn.prediction import predict_vdnn, stall_seconds, timed
from labkit.offload.vdnn.slots import OffloadDiskFull, OffloadError, OffloadStats
from labkit.offload.vdnn.step import offloaded_forward_backward, offloaded_step

__all__ = [
    "COMPUTE_HEAVY",
    "OffloadDiskFull",
    "OffloadError",
    "OffloadPolicy",
    "OffloadStats",
    "Offloader",
    "POLICIES",
    "STORES",
    "offloaded_forward_backward",
    "offloaded_step",
    "predict_vdnn",
    "stall_seconds",
    "timed",
]
