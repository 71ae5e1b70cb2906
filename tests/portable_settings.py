"""Another machine's settings, under which the notebooks' checked outputs must not change (issue 28).

* ``other-cpu``: torch's portable kernels instead of this CPU's vector ones (``ATEN_CPU_CAPABILITY``),
  MKL and oneDNN held to AVX2 (``MKL_ENABLE_INSTRUCTIONS``, ``ONEDNN_MAX_CPU_ISA``) and numpy's OpenBLAS
  on its Haswell kernels (``OPENBLAS_CORETYPE``): the GEMMs and reductions of a CPU without AVX-512;
* ``one-thread``: the lab's intra-op thread count at 1 (``LABKIT_THREADS``, ``OMP_NUM_THREADS``,
  ``MKL_NUM_THREADS``), which splits reductions differently.

``make test`` runs each notebook's strict nbval under one of them, alternating (``tests/conftest.py``);
``make portability`` runs every notebook under each (``tests/test_portable_outputs.py``).
``LABKIT_PORTABILITY=own`` runs the notebooks under this machine's own settings instead.
"""

from __future__ import annotations

import os
from pathlib import Path

SETTINGS: dict[str, dict[str, str]] = {
    "other-cpu": {"ATEN_CPU_CAPABILITY": "default", "MKL_ENABLE_INSTRUCTIONS": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2",
                  "OPENBLAS_CORETYPE": "Haswell"},
    "one-thread": {"LABKIT_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"},
}
KEYS = sorted({k for env in SETTINGS.values() for k in env})


def setting_for(notebook: Path) -> str:
    """The setting a notebook's strict nbval runs under in ``make test``: by its number, alternating."""
    names = list(SETTINGS)
    return names[int(notebook.name[:2]) % len(names)]


def apply(name: str | None, saved: dict[str, str | None]) -> None:
    """Put setting ``name``'s variables into os.environ (None: back to ``saved``, the values before any)."""
    env = SETTINGS[name] if name else {}
    for key in KEYS:
        value = env.get(key, saved.get(key))
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
