"""The future (notebook 08): multi-level storage, data orchestration, compute in and near memory.

* ``hierarchy``: the real training trace of the tiny GPT (every saved tensor's creation and use,
  every weight read, FLOPs per op) replayed on an HBM / DRAM / SSD hierarchy with LRU or a
  trace-aware schedule (Belady's MIN eviction plus prefetch, and each half alone), in the event simulator;
* ``near_data``: the optimizer step run where the optimizer states live (host DRAM or a
  computational SSD) beside the standard path that moves them to the GPU: bytes, time, energy;
* ``crossbar``: an analog crossbar (quantized conductances, read noise, ADC bits) running the
  trained tiny GPT's linear layers; ``crossbar_study``: the trained layer the panel runs and sweeps
  over several noise seeds;
* ``pim``: processing-in-memory headline results (HBM-PIM, UPMEM, PRIME, ISAAC) as data with sources, and
  the energy of a crossbar product beside fp32 and int8 digital baselines;
* ``panel``: the design widget for the crossbar;
* ``trends``: what the notebook's text claims of its tables, each True or False, asserted there (issue 40);
* ``exercises``: the notebook's self-check exercises.
"""
