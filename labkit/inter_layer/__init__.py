"""Inter-layer parallelism (notebook 02): ZeRO data parallelism, GPipe and 1F1B pipelines, PipeDream.

* ``zero``: DDP and ZeRO stages 1-3 on real process groups, bytes per rank and per collective;
* ``pipeline``: torch.distributed.pipelining schedules, their measured timelines and activations;
* ``pipedream``: asynchronous 1F1B with weight stashing (written here: torch does not ship it).
"""
