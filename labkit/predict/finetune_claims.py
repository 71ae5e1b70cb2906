"""The QLoRA and LoRA papers' memory claims, predicted by ``labkit.predict.finetune`` under their conventions.

``datasets/finetune_claims.toml`` holds each claim (paraphrased, with its source), the setting the lab
predicts it at (the paper's where it states one, "assumed" where not) and the conventions the figure
depends on: GB or GiB, the precision of each state, a paged optimizer, and what "memory" counts.
QLoRA (Dettmers et al. 2023): 65B on one 48 GB GPU, 33B on one 24 GB GPU, judged on the whole step's
predicted peak (``labkit.predict.finetune_peak``, on CUDA). LoRA (Hu et al. 2021): GPT-3 175B's training
memory 1.2 TB -> 350 GB and its checkpoint 350 GB -> 35 MB with r = 4 on W_q and W_v, judged on model
states at 16 bits (the paper's fp16 checkpoint). Torch-free.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from labkit.errors import LabkitError
from labkit.predict.finetune import Finetune, finetune_bytes, parse_targets
from labkit.predict.finetune_peak import FinetuneStep, finetune_peak
from labkit.shapes import ModelShape, model_shape

CLAIMS_FILE = Path(__file__).resolve().parents[2] / "datasets" / "finetune_claims.toml"


@dataclass(frozen=True)
class ClaimCheck:
    """One claim beside the lab's prediction (bytes)."""

    id: str
    claim: str
    source: str
    conventions: str
    claimed: float  # the capacity a QLoRA claim fits in, or the LoRA side's bytes
    predicted: float  # the predicted peak, or the predicted LoRA bytes
    full_claimed: float | None = None  # LoRA: the full fine-tune's figure
    bracket: tuple[float, float] | None = None  # LoRA training memory: full fine-tunes at 4 and 8 bytes a parameter

    @property
    def holds(self) -> bool:
        """QLoRA: the peak fits the capacity. LoRA: within 10% (checkpoint: of MiB) and the full figure bracketed."""
        if self.full_claimed is None:
            return self.predicted <= self.claimed
        inside = self.bracket is None or self.bracket[0] <= self.full_claimed <= self.bracket[1]
        return abs(self.predicted / self.claimed - 1) <= 0.10 and inside


def load_claims(path: str | Path | None = None) -> dict[str, Any]:
    """The TOML file's models and claims."""
    p = Path(path) if path else CLAIMS_FILE
    try:
        return tomllib.loads(p.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as err:
        raise LabkitError(f"claims file {str(p)!r} must be readable TOML ({err})") from None


def _shape(name: str, data: dict[str, Any]) -> ModelShape:
    for m in data.get("model", []):
        if m["name"] == name:
            return ModelShape(name=name, layers=m["layers"], hidden=m["hidden"], heads=m["heads"], vocab=m["vocab"],
                              seq=m["seq"], ffn=m["ffn"], gated=True, norm="rmsnorm", bias=False, tied=False,
                              learned_pos=False, dropout=False, source=m["source"])
    return model_shape(name)


def lora_qv_params(shape: ModelShape, rank: int) -> int:
    """LoRA on W_q and W_v (each h x h) of every layer: 2 r (h + h) a layer (Hu et al. 2021, section 4)."""
    return shape.layers * 2 * rank * 2 * shape.hidden


def check_claim(c: dict[str, Any], data: dict[str, Any]) -> ClaimCheck:
    """One claim of the file, predicted."""
    shape = _shape(c["model"], data)
    if c.get("method") == "qlora":
        ft = Finetune("qlora", c["rank"], parse_targets(c["targets"], shape.gated), double_quant=c["double_quant"],
                      paged=c["paged"], checkpointing=c["checkpointing"])
        pk = finetune_peak(FinetuneStep(shape, ft, c["micro_batch"], c["seq"], "bf16-mixed", "cuda"))
        return ClaimCheck(c["id"], c["claim"], c["source"], c["conventions"], c["capacity_bytes"], pk.peak)
    adapters = lora_qv_params(shape, c["rank"])
    if "checkpoint" in c["id"]:  # the adapters alone at 16 bits, against MB read as MiB
        return ClaimCheck(c["id"], c["claim"], c["source"], c["conventions"], c["lora_bytes"] / 1e6 * 2**20,
                          2 * adapters, c["full_bytes"], None)
    states = 2 * shape.params + (2 + 2 + 12) * adapters  # frozen fp16 weights; adapters, grads, master + moments
    return ClaimCheck(c["id"], c["claim"], c["source"], c["conventions"], c["lora_bytes"], states, c["full_bytes"],
                      (4.0 * shape.params, 8.0 * shape.params))


def check_claims(path: str | Path | None = None) -> list[ClaimCheck]:
    """Every claim of ``datasets/finetune_claims.toml``, predicted."""
    data = load_claims(path)
    return [check_claim(c, data) for c in data.get("claim", [])]


def qlora_without(c_id: str, **change: Any) -> float:
    """A QLoRA claim's predicted peak with one setting changed (``paged=False``, ``checkpointing=False``...)."""
    data = load_claims()
    c = next((c for c in data["claim"] if c["id"] == c_id), None)
    if c is None or c.get("method") != "qlora":
        raise LabkitError(f"claim must be a QLoRA claim's id (got {c_id!r})")
    return check_claim(c | change, data).predicted


def lora_state_bytes(shape: ModelShape, ft: Finetune) -> int:
    """Frozen weights, adapters, gradients and optimizer states at 16 bits (bf16-mixed) for a shape."""
    fb = finetune_bytes(shape, ft, 1, 1, "bf16-mixed")
    return fb.frozen + fb.adapters + fb.gradients + fb.optimizer
