"""Heterogeneous storage (notebook 04): a budgeted device, the access trace, and offload to DRAM and SSD.

* ``budget``, ``trace``: a simulated device capacity, and the first iteration's saved-tensor trace;
* ``vdnn``: activations offloaded in forward and prefetched in backward (Rhu et al., MICRO 2016);
* ``zero_offload``, ``zero_infinity``: optimizer on the CPU side; states streamed from NVMe files;
* ``swapadvisor``, ``flashneuron``, ``mobius``: planning and whole-system comparisons in ``labkit.sim``.
"""
