"""A calibration: this machine's rates measured with real kernels, as a file, in place of the datasheet's.

``labkit calibrate`` (``labkit.measure.calibrate``) times GEMMs over a model's shapes, attention
(eager and sdpa), an element-wise kernel, an empty kernel's launch and dispatch, and AdamW's step, and
writes them here as JSON with the machine's name, the torch version and the date. The step-time model
(``labkit.predict.compute``, the advisor's kernels) prices a kernel at a share of a device's peak
(``gemm_efficiency`` of its dense FLOP/s, ``memory_efficiency`` of its bandwidth); the file records
those shares as they were when it was measured, and :meth:`Calibration.device` divides the measured
rates by them, so that the model's shares of the calibrated device give back the measured rates.

The file is data: read with ``json`` only, every field checked, never executed or unpickled. A file
that is not a labkit calibration, or has a missing, negative or non-finite figure, is refused with
one line naming the field. Torch-free.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from labkit.errors import LabkitError
from labkit.hardware.types import Device

FORMAT = "labkit-calibration/1"
RATES = ("gemm_flops", "memory_bandwidth", "launch_s", "adamw_s_per_param")


@dataclass(frozen=True)
class Calibration:
    """Rates measured on one machine (FLOP/s, B/s, seconds), and where and when they were measured."""

    machine: str
    device_kind: str  # "cpu" or "cuda"
    torch: str
    date: str  # ISO 8601
    dtype: str  # the GEMMs' dtype ("fp32" on a CPU, "bf16" on a GPU)
    gemm_flops: float  # median achieved FLOP/s over the GEMM shapes
    memory_bandwidth: float  # element-wise kernel, bytes read plus written per second
    launch_s: float  # one small kernel's launch and dispatch, seconds
    adamw_s_per_param: float  # torch's AdamW step, seconds per parameter
    attention_flops: dict[str, float] = field(default_factory=dict)  # "eager"/"sdpa" -> achieved FLOP/s
    gemm_shapes: list[dict] = field(default_factory=list)  # each {"m", "n", "k", "seconds", "flops_per_s"}
    gemm_efficiency: float = 1.0  # the step-time model's share of the dense peak when this was measured
    memory_efficiency: float = 1.0  # ... and of the memory bandwidth
    loss_s_per_logit: float = 0.0  # fp32 cross-entropy forward + backward, seconds per logit (0: not measured)

    def device(self, base: Device) -> Device:
        """``base`` (a catalogue device, or :meth:`host_device`) with the measured rates in place of its datasheet's."""
        peak = dict(base.peak_flops)
        peak[self.dtype] = self.gemm_flops / self.gemm_efficiency
        return replace(base, name=f"{base.name} (calibrated)", peak_flops=peak,
                       memory_bandwidth=self.memory_bandwidth / self.memory_efficiency,
                       source=f"labkit calibrate on {self.machine}, {self.date}, torch {self.torch}")

    def gemm_rate(self, m: float, n: float, k: float) -> float:
        """FLOP/s of a GEMM's forward and backward at (m x k) @ (k x n), read off the measured shapes: a straight
        line through log rate against log weight size (k x n), least squares over every measured shape, taken at
        this size clamped to the measured range. On a shared CPU one shape's timing can be 2x off (another
        process takes a core), so a fit through all of them, not the two nearest, sets the rate; on a quiet VM
        the rates ran 100-175 GFLOP/s across 0.07-39 M weights. The file's ``gemm_flops`` when it holds no shapes."""
        pts = [(math.log(s["k"] * s["n"]), math.log(6.0 * s["m"] * s["n"] * s["k"]
                                                   / (s["seconds"] + s.get("backward_seconds", 2 * s["seconds"]))))
               for s in self.gemm_shapes]
        if not pts:
            return self.gemm_flops
        xs, ys = [x for x, _ in pts], [y for _, y in pts]
        mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
        var = sum((x - mx) ** 2 for x in xs)
        slope = sum((x - mx) * (y - my) for x, y in pts) / var if var else 0.0
        x = min(max(math.log(k * n), min(xs)), max(xs))
        return math.exp(my + slope * (x - mx))

    def device_for(self, base: Device, gemms: list[tuple[float, float, float, float]]) -> Device:
        """:meth:`device` with the GEMM rate of one model's step: ``gemms`` is (m, n, k, count) of its GEMMs,
        their FLOPs over the seconds each takes at :meth:`gemm_rate` (a harmonic, FLOP-weighted mean)."""
        flops = sum(2.0 * m * n * k * c for m, n, k, c in gemms)
        seconds = sum(2.0 * m * n * k * c / self.gemm_rate(m, n, k) for m, n, k, c in gemms)
        return replace(self, gemm_flops=flops / seconds).device(base) if seconds > 0 else self.device(base)

    def host_device(self, memory_bytes: int = 0, gemms: list | None = None) -> Device:
        """This machine as a device of its own (a CPU has no catalogue entry): the measured rates only (with
        ``gemms``, one model's GEMM rate, :meth:`device_for`); a kernel in another dtype (the step-time model's
        element-wise kernels default to bf16) runs at the measured one's."""
        base = Device(self.machine, (), memory_bytes, "host", 0.0, {}, None, "none", 0.0, 0.0, None, "")
        dev = self.device_for(base, gemms) if gemms else self.device(base)
        return replace(dev, peak_flops=dict.fromkeys(("fp32", "bf16", "fp16"), dev.peak_flops[self.dtype]))

    def to_json(self) -> dict:
        return {"format": FORMAT} | asdict(self)


def _rate(raw: dict, name: str) -> float:
    value = raw.get(name)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise LabkitError(f"calibration field {name} must be a positive finite number (got {value!r})")
    return float(value)


def from_json(raw: object) -> Calibration:
    """A ``Calibration`` from parsed JSON, every field checked."""
    if not isinstance(raw, dict) or raw.get("format") != FORMAT:
        got = raw.get("format") if isinstance(raw, dict) else type(raw).__name__
        raise LabkitError(f"calibration format must be {FORMAT!r} (got {got!r}): not a labkit calibration file")
    for name in ("machine", "device_kind", "torch", "date", "dtype"):
        if not isinstance(raw.get(name), str) or not raw[name]:
            raise LabkitError(f"calibration field {name} must be a non-empty string (got {raw.get(name)!r})")
    if raw["device_kind"] not in ("cpu", "cuda"):
        raise LabkitError(f"calibration field device_kind must be one of cpu, cuda (got {raw['device_kind']!r})")
    rates = {name: _rate(raw, name) for name in (*RATES, "gemm_efficiency", "memory_efficiency")}
    if raw.get("loss_s_per_logit", 0) != 0:  # 0 or absent: not measured (files written before it was)
        rates["loss_s_per_logit"] = _rate(raw, "loss_s_per_logit")
    attention = raw.get("attention_flops", {})
    if not isinstance(attention, dict):
        raise LabkitError("calibration field attention_flops must be an object of kernel -> FLOP/s")
    attention = {str(k): _rate(attention, k) for k in attention}
    shapes = raw.get("gemm_shapes", [])
    if not isinstance(shapes, list) or not all(isinstance(s, dict) for s in shapes):
        raise LabkitError("calibration field gemm_shapes must be a list of objects")
    for i, sh in enumerate(shapes):
        for key in ("m", "n", "k", "seconds", *(("backward_seconds",) if "backward_seconds" in sh else ())):
            value = sh.get(key)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
                raise LabkitError(f"calibration field gemm_shapes[{i}].{key} must be a positive finite number "
                                  f"(got {value!r})")
    if any(r > 1 for r in (rates["gemm_efficiency"], rates["memory_efficiency"])):
        raise LabkitError("calibration fields gemm_efficiency and memory_efficiency must be shares in (0, 1]")
    return Calibration(raw["machine"], raw["device_kind"], raw["torch"], raw["date"], raw["dtype"],
                       attention_flops=attention, gemm_shapes=shapes, **rates)


def load(path: str | Path) -> Calibration:
    """Read a calibration file (JSON only); a missing, corrupt or foreign file is refused with one line."""
    p = Path(path)
    try:
        raw = json.loads(p.read_text(encoding="utf-8"))
    except OSError as err:
        raise LabkitError(f"calibration {str(p)!r} cannot be read: {err.strerror}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise LabkitError(f"calibration {str(p)!r} is not valid JSON: {err}") from None
    return from_json(raw)


def save(cal: Calibration, path: str | Path) -> Path:
    """Write ``cal`` as JSON (atomically: a temporary file renamed over the target)."""
    p = Path(path)
    tmp = p.with_name(p.name + ".tmp")
    tmp.write_text(json.dumps(cal.to_json(), indent=2) + "\n", encoding="utf-8")
    tmp.replace(p)
    return p
