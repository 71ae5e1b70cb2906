"""Self-check exercises of notebook 03, registered with ``labkit.teach.checks`` when imported."""

from __future__ import annotations

from labkit.intra_layer import costs, megatron
from labkit.predict.estimate import activation_bytes_per_layer
from labkit.shapes import model_shape
from labkit.teach.checks import Exercise, Mistake, register


def _megatron_allreduces_per_layer(backward: bool = True) -> float:
    layers = megatron.model_config().n_layer
    rows = megatron.collectives(2, False)
    total = sum(r.calls for r in rows if r.part == "layers" and r.kind == "all_reduce") / layers
    return total if backward else total / 2


def _activation_share_2d_16() -> float:
    return float(costs.ratios("2d", 16, 64, 64, 64)["activations"])


def _gpt3_layer_gb(tp: int = 1, sp: bool = False) -> float:
    return activation_bytes_per_layer(model_shape("gpt3-175b"), 2048, 1, tp=tp, sp=sp) / 1e9


register("03.allreduces", Exercise(
    "How many all-reduces of b*s*h elements does Megatron 1D issue per transformer layer, forward + backward?",
    _megatron_allreduces_per_layer,
    0.0,
    ("Megatron-LM pairs a column-parallel linear with a row-parallel one, so each of attention and MLP needs one "
     "all-reduce in each pass. Which operator issues it in forward, which in backward?",
     "Each of attention and MLP has one g operator (all-reduce in forward) and one f operator (in backward)."),
    "4: two in forward after the row-parallel layers, two in backward before the column-parallel ones.",
    (Mistake("forward only: the f operators all-reduce the input gradients in backward too",
             lambda: _megatron_allreduces_per_layer(backward=False)),
     Mistake("one per linear layer and pass: the column-parallel layers need none in forward, the row-parallel ones "
             "none in backward", lambda: 2 * _megatron_allreduces_per_layer())),
))
register("03.act_share_2d", Exercise(
    "With 2D tensor parallelism on 16 devices, what share (0..1) of a linear layer's input does one device keep?",
    _activation_share_2d_16,
    0.0,
    ("2D cuts X into a q x q grid of blocks, with q*q = 16: how many blocks, and how many per device?",
     "q = 4, so 16 blocks of X, one per device."),
    "1/q^2 = 1/16: unlike 1D, which keeps the whole input on every device, 2D divides activations too.",
    (Mistake("1/q: one row of the q x q grid, where each device keeps a single block", lambda: 1 / 4),
     Mistake("1D's share: the whole input on every device; 2D splits the activations too", lambda: 1.0)),
    unit="fraction",
))
register("03.gpt3_tp8_sp_gb", Exercise(
    "GB of activations one GPT-3 175B layer keeps per GPU with t=8 and sequence parallelism (s=2048, b=1)?",
    lambda: _gpt3_layer_gb(8, True),
    0.02,
    ("Start from the layer's s*b*h*(34 + 5*a*s/h) bytes without parallelism (Korthikanti et al., 2022). Which "
     "terms does tensor parallelism divide by t, and which does sequence parallelism add?",
     "With sequence parallelism every term is divided by t: s*b*h*(34/t + 5*a*s/(h*t)) with h=12288, a=96, t=8; "
     "divide by 1e9."),
    lambda: f"{_gpt3_layer_gb(8, True):.3f} GB, 8x less than without parallelism ({_gpt3_layer_gb():.3f} GB): "
    "sequence parallelism splits the 10 sbh that tensor parallelism replicates.",
    (Mistake("without sequence parallelism: tensor parallelism alone leaves the LayerNorm and dropout activations "
             "(10 sbh) whole on every GPU", lambda: _gpt3_layer_gb(8, False)),
     Mistake("no parallelism at all: the t = 8 split forgotten", lambda: _gpt3_layer_gb())),
    unit="GB",
))
