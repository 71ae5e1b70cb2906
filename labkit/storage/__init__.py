"""Topic of notebook 01, storage challenges: what a training step holds.

The measuring core (:mod:`labkit.measure`) and the analytic model (:mod:`labkit.predict`) do the
work of this notebook; what is its own is its self-check exercises (``exercises``).
"""
