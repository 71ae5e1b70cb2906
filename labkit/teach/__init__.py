"""The teaching layer: the learner's journal, feedback, self-checks, predictions, reveals, panels and plots.

From the bottom up: ``journal`` (every answer, appended to a file beside the notebook) and
``feedback`` (what a learner reads); ``predictions`` (the registered prediction ids and their
locking rules) and ``handin`` (the journal scored and exported); ``diagnose`` (the likely mistake
in a number), ``prediction_mistakes`` and ``choice_mistakes`` (each prediction's registered likely
mistakes and how it is judged); ``checks`` and ``reveal`` on them; ``plots`` and ``widgets`` for the panels. Topics
register their exercises here; the coding exercises (:mod:`labkit.practice`) and the course tools
(:mod:`labkit.course`) sit above the topics.
"""
