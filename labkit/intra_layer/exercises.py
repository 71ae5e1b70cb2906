"""Self-check exercises of notebook 03, registered with ``labkit.teach.checks`` when imported."""

from __future__ import annotations

from labkit.intra_layer import costs, megatron
from labkit.predict.estimate import activation_bytes_per_layer
from labkit.shapes import model_shape
from labkit.teach.checks import Exercise, register


def _megatron_allreduces_per_layer() -> float:
    layers = megatron.model_config().n_layer
    rows = megatron.collectives(2, False)
    return sum(r.calls for r in rows if r.part == "layers" and r.kind == "all_reduce") / layers


def _activation_share_2d_16() -> float:
    return float(costs.ratios("2d", 16, 64, 64, 64)["activations"])


def _gpt3_layer_gb(tp: int = 1, sp: bool = False) -> float:
    return activation_bytes_per_layer(model_shape("gpt3-175b"), 2048, 1, tp=tp, sp=sp) / 1e9


register("03.allreduces", Exercise(
    "How many all-reduces of b*s*h elements does Megatron 1D issue per transformer layer, forward + backward?",
    _megatron_allreduces_per_layer,
    0.0,
    "Each of attention and MLP has one g operator (all-reduce in forward) and one f operator (in backward).",
    "4: two in forward after the row-parallel layers, two in backward before the column-parallel ones.",
))
register("03.act_share_2d", Exercise(
    "With 2D tensor parallelism on 16 devices, what share of a linear layer's input does one device keep?",
    _activation_share_2d_16,
    0.0,
    "2D cuts X into a q x q grid of blocks, with q*q = 16: how many blocks, and how many per device?",
    "1/q^2 = 1/16: unlike 1D, which keeps the whole input on every device, 2D divides activations too.",
))
register("03.gpt3_tp8_sp_gb", Exercise(
    "GB of activations one GPT-3 175B layer keeps per GPU with t=8 and sequence parallelism (s=2048, b=1)?",
    lambda: _gpt3_layer_gb(8, True),
    0.02,
    "Korthikanti et al.: s*b*h*(34/t + 5*a*s/(h*t)) with h=12288, a=96, t=8; divide by 1e9.",
    lambda: f"{_gpt3_layer_gb(8, True):.3f} GB, 8x less than without parallelism ({_gpt3_layer_gb():.3f} GB): "
    "sequence parallelism splits the 10 sbh that tensor parallelism replicates.",
))
