"""Build it yourself (notebook 04): offload saved activations to files in forward, read them back in backward.

vDNN (Rhu et al., MICRO 2016): what autograd saves for backward is not touched again until backward, so it can
leave memory. ``torch.autograd.graph.saved_tensors_hooks`` calls ``pack(t)`` for every tensor autograd saves
(forward) and ``unpack(handle)`` when backward needs it. Write each saved tensor that is NOT a parameter to one
raw file in ``folder`` (no header: np.memmap or ndarray.tofile), keep only a small handle, read the file back
in unpack and remove it. Check it with ``build.check_build("04.build.act_offload", path)``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np  # noqa: F401 - you will need it
import torch
import torch.nn as nn


class FileOffload(torch.autograd.graph.saved_tensors_hooks):
    """``with FileOffload(folder, model): out = model(x)``; then ``loss.backward()`` reads the files back."""

    def __init__(self, folder: str | Path, model: nn.Module) -> None:
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        # What else do you need to remember? (How will pack tell a parameter from an activation?)
        super().__init__(self.pack, self.unpack)

    def pack(self, t: torch.Tensor) -> object:
        """Called in forward with each tensor autograd saves; returns a handle that autograd keeps instead."""
        raise NotImplementedError

    def unpack(self, handle: object) -> torch.Tensor:
        """Called in backward with a handle pack returned; returns the tensor, bit for bit."""
        raise NotImplementedError
