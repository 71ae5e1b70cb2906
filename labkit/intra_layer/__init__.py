"""Intra-layer (tensor) parallelism (notebook 03): Megatron 1D, and 2D, 2.5D and 3D matrix multiplication.

* ``megatron``: 1D tensor and sequence parallelism of the tiny GPT with DTensor, measured per rank;
* ``multidim``: 2D (SUMMA), 2.5D and 3D matrix multiplication on process groups (written here: no
  library ships them), with ``costs``, the analytic per-device memory and communication of each mode.
"""
