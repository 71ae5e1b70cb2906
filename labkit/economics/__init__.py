"""Cost and green storage (notebook 07): what memory choices cost in money, energy and carbon.

* ``grid``: carbon intensity of a few grids, data-centre PUE and an electricity price, as data
  (``datasets/grid.toml``), and kWh / kg CO2 conversions;
* ``capital``: $/GB per tier (HBM through the GPU's price), GPU-hours, cloud and owned dollars;
* ``energy``: device power x time and data movement (pJ/bit per tier and link, Han et al.'s 45 nm table),
  and the energy of one training step as a sum of named parts;
* ``traffic``: HBM bytes of a step's matrix multiplies (the roofline view); ``measured``: the same
  bytes counted as torch runs the tiny GPT;
* ``wear``: SSD bytes written against rated endurance (TBW, or DWPD x capacity x warranty);
* ``holding``: what keeping checkpoints and data sets on a tier costs over a run ($ and embodied CO2e);
* ``published``: Llama 2's reported GPU-hours and CO2e beside labkit's prediction;
* ``strategies``: all in HBM (ZeRO-3), DRAM offload (ZeRO-Offload), SSD offload (ZeRO-Infinity):
  GPU count from memory, and one step's time from FLOPs, MFU and exposed transfers;
* ``run``: a whole run costed (time, $, kWh, kg CO2, SSD wear), the three side by side, who wins;
* ``trends``: what the notebook's text claims of its tables, each True or False, asserted there (issue 40);
* ``panel``: the design widget.
"""
