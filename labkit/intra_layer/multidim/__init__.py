"""1D, 2D, 2.5D and 3D tensor parallelism of a linear layer and an MLP block, by hand, on torch.distributed groups.

Written here because no library ships them: torch's DTensor plans cover 1D (column and row) only, and
Colossal-AI's 2D/2.5D/3D layers live in its legacy package, not a dependency of this lab. Each mode is
an ``autograd.Function`` with its forward and backward written out, so the collectives it runs and the
tensors it keeps are exactly those ``costs`` counts:

* ``1d``: Megatron's column-parallel then row-parallel layers (Shoeybi et al., 2019), the baseline;
* ``2d``: SUMMA (van de Geijn & Watts, "SUMMA: Scalable Universal Matrix Multiplication Algorithm",
  1997) as Optimus uses it (Xu et al., "An Efficient 2D Method for Training Super-Large Deep Learning
  Models", 2021): X and W cut into q x q blocks; step k broadcasts X_ik along grid row i and W_kj
  down grid column j. Backward broadcasts W (then X) again and reduces the partial products to the
  block's owner, as Colossal-AI's Matmul_ABT/ATB do;
* ``2.5d``: Tesseract (Wang et al., "Tesseract: Parallelize the Tensor Parallelism Efficiently", 2022):
  d layers of q x q grids; the rows of X are cut over the layers too, W is replicated over them, so
  backward also all-reduces dW over the d layers. With d = 1 it is 2d, call for call;
* ``3d``: Bian et al., "Maximizing Parallelism in Distributed Training for Huge Neural Networks", 2021,
  as the Colossal-AI documentation describes it: all-gather X and W, multiply, reduce-scatter Y. Each
  layer keeps only its own 1/q^3 of X and W and gathers them again in backward (two more all-gathers),
  so activations stay at the published 1/q^3. Colossal-AI's ``_Linear3D`` keeps the gathered blocks
  instead (1/q^2 of X), which is where its table's 6(q-1) collectives per layer come from.

Rank r sits at ``(l, i, j)`` with ``r = (l q + i) q + j`` in 2d/2.5d (l the layer, i the grid row, j the
column) and at ``(i, j, l)`` with ``r = (i q + j) q + l`` in 3d. Everything is fp32; the data are made
from one seed on every rank, each rank cuts out its blocks, and returns its output and gradient blocks
with their place in the full tensor, so the parent can put Y, dX, dW and db back together (:func:`assemble`)
and compare them with one process (:func:`reference`). Collectives are counted by a ``TorchDispatchMode``
that sees every ``c10d`` op, with its group's size; activations by saved-tensor hooks, one count per storage.
"""

from labkit.intra_layer.multidim.collectives import CollectiveLog
from labkit.intra_layer.multidim.layers import linear, mlp
from labkit.intra_layer.multidim.mesh import Mesh, build_mesh
from labkit.intra_layer.multidim.prediction import compare, max_error, predicted
from labkit.intra_layer.multidim.runs import (
    BLOCKS,
    DEFAULTS,
    MODES,
    assemble,
    problem,
    reference,
    run_configs,
    run_mode,
    run_modes,
)

__all__ = [
    "BLOCKS",
    "CollectiveLog",
    "DEFAULTS",
    "MODES",
    "Mesh",
    "assemble",
    "build_mesh",
    "compare",
    "linear",
    "max_error",
    "mlp",
    "predicted",
    "problem",
    "reference",
    "run_configs",
    "run_mode",
    "run_modes",
]
