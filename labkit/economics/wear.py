"""SSD wear: bytes written against the drive's rated endurance (TBW).

A drive's warranty allows a number of terabytes written (``endurance_tbw`` in the
catalogue, or drive writes per day x capacity x 365 x warranty years for enterprise drives:
7,008 TBW for the 3.84 TB, 1-DWPD, 5-year U.2 data drive of a DGX, against 1,200 TBW for a
2 TB consumer PCIe 4.0 drive). Offload that writes model states
to NVMe every step (ZeRO-Infinity, Rajbhandari et al., SC 2021) spends that budget:
fraction of life = bytes written per drive / endurance, assuming writes spread evenly
over the drives (striping) and no extra write amplification beyond what the rating assumes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from labkit import hardware
from labkit.errors import LabkitError, require_positive


@dataclass(frozen=True)
class Wear:
    """Bytes written over a run against the endurance of ``drives`` identical drives."""

    drive: str
    drives: int
    bytes_written: float
    endurance_bytes_per_drive: int
    drive_price_usd: float

    @property
    def life_used(self) -> float:
        """Fraction of each drive's rated life the run uses (1.0 = worn out at the end of the run)."""
        return self.bytes_written / self.drives / self.endurance_bytes_per_drive

    @property
    def replacements(self) -> int:
        """Drives bought to finish the run beyond the first set: drives x (ceil(life used) - 1)."""
        return self.drives * max(0, math.ceil(self.life_used - 1e-12) - 1)

    @property
    def replacement_usd(self) -> float:
        return self.replacements * self.drive_price_usd


def ssd_wear(bytes_written: float, drives: int = 1, drive: str = "NVMe-U2-3.84TB") -> Wear:
    """Wear of ``drives`` catalogue SSDs that together absorb ``bytes_written`` bytes."""
    if isinstance(bytes_written, bool) or not isinstance(bytes_written, (int, float)) \
            or not math.isfinite(bytes_written) or bytes_written < 0:
        raise LabkitError(f"bytes_written must be a non-negative number (got {bytes_written!r})")
    require_positive("drives", drives)
    tier = hardware.tier(drive)
    if tier.endurance_bytes is None:
        have = [t.name for t in hardware.load_catalogue().tiers if t.endurance_bytes is not None]
        raise LabkitError(f"drive must be one with endurance_tbw in the catalogue: {', '.join(have)} "
                          f"(got {tier.name!r})")
    price = tier.capacity_bytes / 1e9 * tier.price_usd_per_gb
    return Wear(tier.name, drives, float(bytes_written), tier.endurance_bytes, price)
