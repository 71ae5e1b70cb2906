"""The analytic model: memory, FLOPs and bytes predicted from formulas, with the paper each comes from.

Model states and activations per GPU (ZeRO, Korthikanti et al.), the conventions papers count
bytes by, offload bytes, the largest model a cluster holds, and their printed tables. Reads model
shapes and the hardware catalogue; never runs a model (that is :mod:`labkit.measure`).
"""
