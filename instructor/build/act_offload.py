"""Reference solution of 04.build.act_offload: saved activations to raw files in forward, back in backward.

vDNN (Rhu et al., MICRO 2016) moves what autograd saves off the device after forward and brings it back for
backward. Here every saved tensor that is not a parameter goes to one raw file (no header: the bytes on disk
are the tensor's bytes); bf16 goes through numpy as int16, since numpy has no bf16.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn


class FileOffload(torch.autograd.graph.saved_tensors_hooks):
    def __init__(self, folder: str | Path, model: nn.Module) -> None:
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.params = {p.untyped_storage().data_ptr() for p in model.parameters()}
        self.count = 0
        super().__init__(self.pack, self.unpack)

    def pack(self, t: torch.Tensor) -> object:
        if t.untyped_storage().data_ptr() in self.params:
            return t  # a parameter stays where it is: it is not an activation
        path = self.folder / f"{self.count:05d}.bin"
        self.count += 1
        c = t.detach().contiguous()
        (c.view(torch.int16) if c.dtype == torch.bfloat16 else c).numpy().tofile(path)
        return path, t.dtype, tuple(t.shape)

    def unpack(self, handle: object) -> torch.Tensor:
        if isinstance(handle, torch.Tensor):
            return handle
        path, dtype, shape = handle
        raw = torch.int16 if dtype == torch.bfloat16 else dtype
        arr = np.fromfile(path, dtype=torch.empty(0, dtype=raw).numpy().dtype)
        os.remove(path)  # read once: the file's job is done
        return torch.from_numpy(arr).view(dtype).view(shape)
