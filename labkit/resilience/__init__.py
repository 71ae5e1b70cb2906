"""Fault tolerance (notebook 06): checkpoints that survive crashes, and real crashes to prove it.

* ``state``: a Trainer's full state (model, optimizer, RNG, data position) as a flat dict of tensors;
* ``manifest``: atomic commit (tmp dir, checksums, fsync, rename) and a check of every field and file;
* ``index``: DCP's index as JSON, so loading never opens DCP's pickle (a folder others can write is untrusted);
* ``checkpoint``: save / async save with ``torch.distributed.checkpoint``, never through a symlink; save stall;
* ``scan``: the newest sound checkpoint of this run (step and identity compared), loaded or refused with a reason;
* ``corrupt``: flipped byte, truncation, missing file, wrong shape: each detected, the previous one used;
* ``peer``: an in-memory checkpoint held by a peer rank, restored without the disk (Gemini, SOSP 2023);
* ``worker``, ``crash``: training in a child process (or one rank of a gloo group) killed with SIGKILL
  and resumed bit-identically; ``preload`` warms the forkserver the children are forked from;
* ``interval``: how often to checkpoint: Young's and Daly's interval beside a Monte Carlo of a failing job;
* ``sweep``: that Monte Carlo over a grid of intervals and seeds: how flat goodput is near the optimum;
* ``cluster``: checkpoint cost, interval and goodput of a job on 1,000s of GPUs from a failure trace;
* ``redundancy``: Bamboo's redundant computation (Thorpe et al., NSDI 2023) simulated: step overhead,
  held activations, the step after a failover, goodput beside checkpoint-restart;
* ``failover``: the same for real: 2 gloo ranks each computing the other's stage, one SIGKILLed, the
  survivor finishing alone bit-identically (launched with ``labkit.dist.run_outcomes``);
* ``panel``: the design widget: goodput of checkpoint-restart, in-memory peer and RC on a failing cluster;
* ``trends``: what the notebook's text claims of its tables, each True or False, asserted there (issue 40);
* ``exercises``: the notebook's self-check questions, registered with ``labkit.teach.checks``.
"""
