"""Processing in memory: energy of an analog matrix-vector product, and the headline PIM results beside the lab's model.

Two questions, both answered from data (``datasets/pim.toml`` and the 45 nm energy table of Han et
al., NeurIPS 2015, Figure 1, after Horowitz, ISSCC 2014, in ``datasets/references.toml``) and formulas here:

* What does one matrix-vector product cost on a crossbar, against moving the weights to a digital
  unit? On the crossbar the weights never move: the cost is ADC conversions (Walden's figure of
  merit: energy per conversion doubles with every bit), device reads, and the digital shift-adds of
  partial sums. The digital unit reads every 32-bit weight (640 pJ from DRAM, 5 pJ from an 8 kB SRAM)
  and multiplies and adds it (3.7 + 0.9 pJ in fp32), Han et al. 2015 (45 nm); or, as an int8
  baseline, reads 8-bit weights (a quarter of those) and multiplies them into a 32-bit accumulator
  (0.2 + 0.1 pJ, Horowitz's ISSCC 2014 table).
* What does the lab's model say about each headline result? A memory-bound kernel's roofline time
  (Williams et al., CACM 2009, ``labkit.hardware.roofline_time``) with the PIM's internal bandwidth
  against the host's external one, or the crossbar energy model against a digital baseline.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from labkit import hardware
from labkit.errors import LabkitError, read_toml, require_choice, require_positive
from labkit.references import section

PIM_FILE = Path(__file__).resolve().parent.parent.parent / "datasets" / "pim.toml"
BASELINES = ("dram", "sram")
PRECISIONS = ("fp32", "int8")
KERNELS = {  # name -> (FLOPs or ops per element, bytes per element, dtype); a GEMV's element is one weight
    "gemv-fp16": (2.0, 2.0, "fp16"),
    "vector-add-int32": (1.0, 12.0, "int32"),
}


@lru_cache(maxsize=2)
def load_pim(path: str | None = None) -> dict[str, Any]:
    """The raw PIM file (cached); an unreadable file names itself."""
    where = Path(path) if path else PIM_FILE
    return read_toml(where, "PIM file")


@dataclass(frozen=True)
class MvmEnergy:
    """Joules of one (in x out) matrix-vector product: on crossbars, and on a digital unit fed from DRAM or SRAM."""

    in_features: int
    out_features: int
    conversions: int
    adc_j: float
    array_j: float
    periphery_j: float
    dram_j: float
    sram_j: float
    mac_j: float
    int8_mac_j: float = 0.0  # int8 multiply + int32 add per weight

    def _reads_j(self, baseline: str, precision: str) -> float:
        require_choice("precision", precision, PRECISIONS)
        j = self.dram_j if baseline == "dram" else self.sram_j
        return j * (8 / 32 if precision == "int8" else 1.0)

    @property
    def crossbar_j(self) -> float:
        return self.adc_j + self.array_j + self.periphery_j

    def digital_j(self, baseline: str = "dram", precision: str = "fp32") -> float:
        """Weights read from ``baseline`` (dram or sram), then multiplied and added in ``precision``."""
        require_choice("baseline", baseline, BASELINES)
        return self._reads_j(baseline, precision) + (self.mac_j if precision == "fp32" else self.int8_mac_j)

    def ratio(self, baseline: str = "dram", precision: str = "fp32") -> float:
        """How many times less energy the crossbar spends than the digital path."""
        return self.digital_j(baseline, precision) / self.crossbar_j

    def rows(self) -> list[tuple[str, str, float]]:
        """(path, part, nJ) rounded for printing."""
        parts = [("crossbar", "ADC conversions", self.adc_j), ("crossbar", "device reads", self.array_j),
                 ("crossbar", "shift-add and rescale", self.periphery_j), ("crossbar", "total", self.crossbar_j),
                 ("digital, weights from DRAM", "weight reads", self.dram_j),
                 ("digital, weights from SRAM", "weight reads", self.sram_j),
                 ("digital", "fp32 multiply-adds", self.mac_j),
                 ("digital, weights from DRAM", "total", self.digital_j("dram")),
                 ("digital, weights from SRAM", "total", self.digital_j("sram")),
                 ("int8 digital, weights from DRAM", "weight reads", self._reads_j("dram", "int8")),
                 ("int8 digital, weights from SRAM", "weight reads", self._reads_j("sram", "int8")),
                 ("int8 digital", "int8 multiply, int32 add", self.int8_mac_j),
                 ("int8 digital, weights from DRAM", "total", self.digital_j("dram", "int8")),
                 ("int8 digital, weights from SRAM", "total", self.digital_j("sram", "int8"))]  # fmt: skip
        return [(path, part, round(j * 1e9, 4)) for path, part, j in parts]


def adc_pj(bits: int) -> float:
    """pJ per conversion at ``bits``: the file's reference figure scaled by 2^(bits - reference) (Walden 1999)."""
    if isinstance(bits, bool) or not isinstance(bits, int) or not 1 <= bits <= 16:
        raise LabkitError(f"adc_bits must be an integer from 1 to 16 (got {bits!r})")
    ce = load_pim()["crossbar_energy"]
    return ce["adc_pj_at_reference_bits"] * 2.0 ** (bits - ce["adc_reference_bits"])


def mvm_energy(in_features: int, out_features: int, adc_bits: int = 8, rows: int = 128, cols: int = 128,
               input_cycles: int = 1, cells_per_weight: int = 1) -> MvmEnergy:
    """Energy of y = W x with W (out x in) held in ``rows x cols`` arrays, beside the digital path.

    Every column of every row tile is converted once per input cycle and weight slice
    (``input_cycles`` > 1: bit-serial inputs; ``cells_per_weight`` > 1: a weight sliced over several
    devices, as ISAAC does); each conversion is shift-added into an fp32 accumulator (an upper bound:
    integer adders cost less) and each output is rescaled once by an fp32 multiply.
    """
    for name, v in (("in_features", in_features), ("out_features", out_features), ("rows", rows),
                    ("cols", cols), ("input_cycles", input_cycles), ("cells_per_weight", cells_per_weight)):
        require_positive(name, v)
    pj, ce, i8 = section("energy_pj"), load_pim()["crossbar_energy"], load_pim()["digital_int8"]
    row_tiles = -(-in_features // rows)
    conversions = row_tiles * out_features * input_cycles * cells_per_weight
    devices = 2 * in_features * out_features * cells_per_weight  # a differential pair per weight slice
    weights = in_features * out_features
    return MvmEnergy(
        in_features, out_features, conversions,
        adc_j=conversions * adc_pj(adc_bits) * 1e-12,
        array_j=devices * input_cycles * ce["cell_read_fj"] * 1e-15,
        periphery_j=(conversions * pj["fp32_add"] + out_features * pj["fp32_multiply"]) * 1e-12,
        dram_j=weights * pj["dram_read_32bit"] * 1e-12,
        sram_j=weights * pj["sram_read_32bit_8kb"] * 1e-12,
        mac_j=weights * (pj["fp32_multiply"] + pj["fp32_add"]) * 1e-12,
        int8_mac_j=weights * (i8["int8_multiply_pj"] + i8["int32_add_pj"]) * 1e-12,
    )  # fmt: skip


@dataclass(frozen=True)
class PimResult:
    """One headline result as its source reports it."""

    system: str
    kind: str
    year: int
    claim: str
    speedup_x: float | None
    energy_x: float | None
    on_what: str
    source: str
    model: dict = field(default_factory=dict, hash=False)  # the parameters of the lab's model of it


def pim_results(path: str | None = None) -> list[PimResult]:
    """The headline results (HBM-PIM, UPMEM, PRIME, ISAAC), each checked to carry a source and a year."""
    out = []
    for i, raw in enumerate(load_pim(path).get("pim", [])):
        label = f"pim {raw.get('system', f'#{i + 1}')!r}"
        for key in ("system", "kind", "claim", "on_what", "source"):
            if not isinstance(raw.get(key), str) or not raw[key].strip():
                raise LabkitError(f"{label}: {key} must be a non-empty string (got {raw.get(key)!r})")
        year = raw.get("year")
        if isinstance(year, bool) or not isinstance(year, int) or not 1950 <= year <= 2100:
            raise LabkitError(f"{label}: year must be a year such as 2021 (got {year!r})")
        for key in ("speedup_x", "energy_x"):
            v = raw.get(key)
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v)
                                  or v <= 0):  # fmt: skip
                raise LabkitError(f"{label}: {key} must be a positive number or absent (got {v!r})")
        out.append(PimResult(raw["system"], raw["kind"], year, raw["claim"], raw.get("speedup_x"),
                             raw.get("energy_x"), raw["on_what"], raw["source"], dict(raw.get("model", {}))))
    return out


def pim_result(system: str) -> PimResult:
    """One headline result by name (case-insensitive)."""
    results = pim_results()
    for r in results:
        if r.system.lower() == str(system).lower():
            return r
    raise LabkitError(f"system must be one of {', '.join(r.system for r in results)} (got {system!r})")


def _device(name: str, bandwidth_gbps: float, tflops: float, dtype: str, source: str) -> hardware.Device:
    return hardware.Device(name=name, aliases=(), memory_bytes=0, memory_type="", memory_bandwidth=bandwidth_gbps * 1e9,
                           peak_flops={dtype: tflops * 1e12}, nvlink=None, pcie="", tdp_watts=0.0, price_usd=0.0,
                           cloud_usd_per_hour=None, source=source)  # fmt: skip


@dataclass(frozen=True)
class ModelView:
    """What the lab's model says about one headline result, beside what the paper reports."""

    system: str
    metric: str  # "speedup" (roofline) or "energy" (crossbar against a digital baseline)
    reported_x: float | None
    modelled_x: float
    detail: str

    def row(self) -> tuple[str, str, float | None, float, str]:
        return (self.system, self.metric, self.reported_x, round(self.modelled_x, 2), self.detail)


def model_view(result: PimResult) -> ModelView:
    """The lab's model of ``result``: roofline speedup of a memory-bound kernel, or crossbar energy ratio."""
    m = result.model
    require_choice(f"{result.system} model kind", m.get("kind"), ("roofline", "crossbar-energy"))
    if m["kind"] == "roofline":
        per_flop, per_byte, dtype = KERNELS[require_choice(f"{result.system} kernel", m["kernel"], KERNELS)]
        n = m["size"] ** 2 if m["kernel"].startswith("gemv") else m["size"]
        flops, nbytes = per_flop * n, per_byte * n
        host = _device("host", m["external_gbps"], m["host_tflops"], dtype, m["external_source"])
        pim = _device(result.system, m["internal_gbps"], m["pim_tflops"], dtype, m["internal_source"])
        t_host, t_pim = (hardware.roofline_time(flops, nbytes, d, dtype) for d in (host, pim))
        detail = (f"{m['kernel']} of {n:,} elements: host {t_host * 1e6:,.0f} us at {m['external_gbps']:g} GB/s, "
                  f"PIM {t_pim * 1e6:,.0f} us at {m['internal_gbps']:g} GB/s inside (roofline, predicted)")
        return ModelView(result.system, "speedup", result.speedup_x, t_host / t_pim, detail)
    e = mvm_energy(m["size"], m["size"], m["adc_bits"], m["rows"], m["cols"], m["input_cycles"],
                   m["cells_per_weight"])
    baseline = require_choice(f"{result.system} baseline", m["baseline"], BASELINES)
    detail = (f"{m['size']} x {m['size']} MVM: crossbar {e.crossbar_j * 1e9:,.0f} nJ against digital with weights "
              f"from {baseline.upper()} {e.digital_j(baseline) * 1e9:,.0f} nJ (predicted)")
    return ModelView(result.system, "energy", result.energy_x, e.ratio(baseline), detail)


def model_views() -> list[ModelView]:
    """The lab's model beside every headline result in the file."""
    return [model_view(r) for r in pim_results()]
