"""The caching allocator's reserve beyond the allocated peak, as measured on a real GPU: the fit verdicts' margin.

PyTorch's CUDA caching allocator keeps freed blocks for reuse, so the memory a process holds from the
device (``torch.cuda.max_memory_reserved``) runs above the most its tensors held at once
(``max_memory_allocated``). How far depends on the order of allocations, so the lab does not predict it
term by term: it states the largest share measured beyond a peak in ``datasets/measurements`` (the H200
runs, ``labkit.predict.reference``) as a margin beside the predicted peak. Near the capacity the
allocator frees cached blocks and retries before it fails, so a step inside the capacity but not inside
the margin is "tight", not out of memory. Torch-free.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

from labkit.errors import LabkitError

H200_FILE = Path(__file__).resolve().parents[2] / "datasets" / "measurements" / "h200-2026-12.jsonl"


def records(path: str | Path | None = None) -> list[dict]:
    """The JSON objects of a measurements file, one a line (the first names the setup)."""
    p = Path(path) if path else H200_FILE
    try:
        return [json.loads(line) for line in p.read_text(encoding="utf-8").splitlines() if line.strip()]
    except (OSError, json.JSONDecodeError) as err:
        raise LabkitError(f"reference file {str(p)!r} must be JSON lines ({err})") from None


def _peaks(path: str | Path | None) -> list[dict]:
    return [r.get("peak") or r["measure"]["peak"] for r in records(path)
            if "case" in r and (r.get("peak") or r.get("measure", {}).get("peak"))]


@lru_cache(maxsize=4)
def reserve_share(path: str | None = None) -> float:
    """The largest caching-allocator reserve measured beyond a peak, as a share of that peak."""
    return max((p["reserved"] - p["measured"]) / p["measured"] for p in _peaks(path))
