"""Choosing a strategy (notebook 09): the seed's summary table, a plan search, its decision flow, a capstone.

The advisor is the one package that reads every topic package: it applies the models
notebooks 02-07 validated (ring collectives from ``labkit.predict.collectives`` and kernels from
``labkit.predict.compute``, the same models notebooks 02 and 03 price with, 8-bit states and recompute overheads from
``reduction.design``, ZeRO-Offload / ZeRO-Infinity traffic and energy from ``economics``) to
a real model on a real cluster.

* ``costing``: one layout (dp, tp, pp, ZeRO stage, recompute, offload, precision, micro-batch,
  pipeline schedule and its chunks) turned into memory per GPU, step time, cost and energy;
* ``steptime``: the step time without double counting, kernels from a roofline of the shapes
  (``labkit.predict.compute``), then the bubble, each collective once, Adam and offload traffic;
* ``machine``: GPUs in hosts of the catalogue (DRAM, NVMe drives, network) and the memory headroom;
* ``calibration``: the step time against Narayanan et al., SC 2021, Tables 1 and 2;
* ``misses``: when nothing fits, how far the nearest plans are and what would close the gap;
* ``search``: every layout whose degrees multiply to the GPU count (or the fields the caller
  fixes), the validity rules, and :func:`~labkit.advisor.search.advise`, which prices an exact
  layout and ranks the plans for a goal, near-ties marked;
* ``report``: the answer as text or JSON (``labkit advise``);
* ``summary``: the seed's table: memory, communication and extra compute of each technique;
* ``flow``: the seed's selection flow as a decision diagram, with the advisor's answer to each question;
* ``capstone``, ``exercises``: a learner's plan graded against the advisor; self-checks "09.*".
"""
