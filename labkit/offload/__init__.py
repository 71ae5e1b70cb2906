"""Heterogeneous storage (notebook 04): a budgeted device, the access trace, and offload to DRAM and SSD.

* ``budget``, ``trace``: a simulated device capacity, and the first iteration's saved-tensor trace;
* ``vdnn``: activations offloaded in forward and prefetched in backward (Rhu et al., MICRO 2016);
* ``calibrate``, ``overhead``: the vDNN micro-run replayed in the simulator of this machine, and the
  offloader's own software cost measured with copies that move no bytes;
* ``zero_offload``, ``zero_infinity``, ``infinity_scale``: optimizer on the CPU side; states streamed
  from NVMe files; what fits a node; their bytes per parameter come from ``labkit.predict.offload_model``;
* ``swapadvisor``, ``swap_sweep``, ``flashneuron``, ``mobius``: planning and whole-system comparisons in
  ``labkit.sim`` (a genetic search beside greedy and vDNN rules over oversubscription, FlashNeuron's rule
  and where it stops).
"""
