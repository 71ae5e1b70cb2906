"""The teaching layer: the learner's journal, feedback, self-checks, reveals, panels and plots.

From the bottom up: ``journal`` (every answer, in order) and ``feedback`` (what a learner reads);
``diagnose`` (the likely mistake in a number); ``checks`` and ``reveal`` on them; ``plots`` and
``widgets`` for the panels. Topics register their exercises here; the coding exercises
(:mod:`labkit.practice`) and the course tools (:mod:`labkit.course`) sit above the topics.
"""
