"""What a typical wrong choice or yes/no claim most likely means, for the predictions that ask one.

The companion of :mod:`labkit.teach.prediction_mistakes` for the predictions that are not numbers
(issue 20, "Feedback that names the mistake"): "Wrong: you said optimizer" becomes a sentence on
why Adam's moments lose to activations at this batch. Each text is tied to the truth it explains
(a claim's ``truth``, a choice's ``answer``), so if a rebuilt notebook's measurement changes, a
stale diagnosis is not shown: it is simply left out. The reasons are the notebooks' own, read
from the prose after each reveal.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ClaimMistake:
    """Saying the opposite of ``truth`` about one claim: why that is wrong."""

    truth: bool
    why: str


# Choice predictions: the right answer the texts assume, and per wrong option what it misses.
CHOICES: dict[str, tuple[str, dict[str, str]]] = {
    "01.predict.largest_category": ("activations", {
        "optimizer": "Adam's two moments are the largest model state (8 of 16 B/param), but activations grow "
                     "with batch x sequence x layers, and this step's batch and sequence are large for its size",
        "parameters": "the weights are 4 of fp32 AdamW's 16 B/param: the optimizer's moments alone are twice "
                      "them, and activations grow with batch x sequence",
        "gradients": "gradients are the size of the weights (4 B/param), a quarter of the model states",
    }),
}

CLAIMS: dict[str, dict[str, ClaimMistake]] = {
    "01.predict.activations_over_half": {
        "gpt2": ClaimMistake(True, "at this batch and sequence GPT-2's activations outgrow its model states: "
                                   "activations grow with batch x sequence, states do not"),
        "gpt3 on one GPU": ClaimMistake(False, "175 bn parameters at 16 B each dwarf one micro-batch's "
                                               "activations when one GPU must hold all the states"),
    },
    "04.predict.same_sequence": {
        "the same sequence in iterations 2 and 3": ClaimMistake(
            True, "every iteration runs the same layers on tensors of the same shapes: the sequence is fixed, "
                  "which is what lets an offload plan be made once, offline"),
    },
    "04.predict.fits_and_changes": {
        "the step fits": ClaimMistake(True, "each saved activation leaves as it is saved and comes back ahead "
                                            "of its backward, so the peak no longer holds them all"),
        "the parameters differ from the plain run's": ClaimMistake(
            False, "offload moves bytes, not arithmetic: the same values come back, so the update is "
                   "bit-identical to a run without it"),
    },
    "04.predict.pcie_stall": {
        "the A100 waits for PCIe at micro-batch 1": ClaimMistake(
            True, "a 7B layer's activations at this sequence take longer over PCIe than the A100 takes to "
                  "compute the next layer"),
    },
    "05.predict.trains_as_well": {
        "trains as well": ClaimMistake(True, "block-wise 8-bit codes with a dynamic code book keep Adam's "
                                             "moments as precise as the update needs (Dettmers et al.)"),
    },
    "05.predict.fits_xl": {
        "fits, no recompute": ClaimMistake(False, "the states alone nearly fill the card; the activations of "
                                                  "a whole sequence do not fit beside them"),
        "fits, full recompute": ClaimMistake(True, "full recompute keeps only each block's input, a small "
                                                   "part of its activations"),
    },
    "06.predict.bit_identical": {
        "bit-identical": ClaimMistake(True, "the checkpoint holds the random-number state and the data position "
                                            "too, so the resumed run does exactly the same arithmetic"),
    },
    "07.predict.offload_cheaper": {
        "offload rents for less": ClaimMistake(False, "with a large batch nothing waits for the slower tier, so "
                                                      "every layout uses the same GPU-hours: fewer GPUs for "
                                                      "more days rent for the same"),
    },
    "08.predict.near_faster": {
        "near-data is faster": ClaimMistake(True, "the optimizer step is memory-bound: computing in DRAM is "
                                                  "slower per byte than in HBM, but it saves the trip over "
                                                  "PCIe, which is slower still"),
    },
    "09.predict.table_claims": {
        "one technique alone fits on the GPU": ClaimMistake(False, "each technique removes one part of the "
                                                                   "bytes; GPT-3 needs several together"),
    },
}


def choice_mistake(key: str | None, chosen: str, answer: str) -> str:
    """Why choosing ``chosen`` is wrong when ``answer`` is right, or "" (no text, or the answer changed)."""
    right, texts = CHOICES.get(key or "", ("", {}))
    return texts.get(chosen, "") if answer == right and chosen != answer else ""


def claim_mistake(key: str | None, claim: str, said: bool | None, truth: bool) -> str:
    """Why saying ``said`` about ``claim`` is wrong when the truth is ``truth``, or ""."""
    found = CLAIMS.get(key or "", {}).get(claim)
    if found is None or said is None or said == truth or found.truth != truth:
        return ""
    return found.why
