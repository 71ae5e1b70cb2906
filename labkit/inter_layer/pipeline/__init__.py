"""Pipeline parallelism on real ranks: torch's GPipe, 1F1B and interleaved 1F1B, timed and weighed.

The tiny GPT is cut into p*v stages of consecutive blocks (embedding with the first;
final norm, head and loss with the last); rank r holds stages r, r+p, ... and
``torch.distributed.pipelining`` runs them. No schedule is written here: this module
watches torch's, to check two claims against a real run:

* the bubble, (p-1)/(m+p-1) of a step (Huang et al., "GPipe", NeurIPS 2019), or
  (p-1)/(v*m+p-1) with v chunks per rank (Narayanan et al., "Efficient Large-Scale
  Language Model Training on GPU Clusters Using Megatron-LM", SC 2021);
* activations held at once: GPipe keeps all m micro-batches, 1F1B (Narayanan et al.,
  "PipeDream", SOSP 2019) at most p, and p - r on rank r.

Timing: each stage's ``forward_one_chunk`` / ``backward_one_chunk`` is wrapped on the
instance, so one event is one compute action the schedule chose (torch's shape
inference runs the submodules outside them and is not counted); the loss is timed
as the end of the last stage's forward. Times are ``time.perf_counter`` minus rank 0's
value, broadcast after a barrier at each step: perf_counter reads CLOCK_MONOTONIC,
one clock for all processes of a machine (across machines the clock offsets would add).
Memory: saved tensors seen through ``saved_tensors_hooks``; a storage counts from
its first pack until autograd releases its last packed handle (backward frees them
as it goes); parameters, buffers and the batch are left out.

``TinyGPT`` ties the head to the embedding; they live on different ranks here, so the
head gets its own copy of the weight (untied), and the reference run does the same.
"""

from labkit.inter_layer.pipeline.runs import (
    PipelineConfig,
    PipelineRun,
    measured_bubble,
    predicted_peak_bytes,
    run_pipeline,
    run_pipelines,
    single_process_losses,
    timeline_of,
)
from labkit.inter_layer.pipeline.stages import (
    DEFAULT_MODEL,
    LR,
    StageModule,
    build_model,
    check_pipeline,
    lm_loss,
    model_config,
    split_stages,
)
from labkit.inter_layer.pipeline.worker import train_pipeline, train_pipelines

__all__ = [
    "DEFAULT_MODEL",
    "LR",
    "PipelineConfig",
    "PipelineRun",
    "StageModule",
    "build_model",
    "check_pipeline",
    "lm_loss",
    "measured_bubble",
    "model_config",
    "predicted_peak_bytes",
    "run_pipeline",
    "run_pipelines",
    "single_process_losses",
    "split_stages",
    "timeline_of",
    "train_pipeline",
    "train_pipelines",
]
