# %% [markdown]
# # Course guide: memory and storage in large-model training
#
# This lab has nine notebooks. Each one trains a tiny GPT **for real** on your CPU, measures what
# the training holds in memory, moves over links and writes to disk, puts that measurement beside
# the analytic model the literature uses, and then applies the same model to real models on real
# GPUs. This page is for learners and instructors: what each notebook teaches, what it assumes,
# how long it takes, the symbols used throughout, and how answers are checked and collected.
#
# **How to open the lab.** `make lab` opens *your own copies* of the notebooks (in `my-labs/`,
# outputs cleared, made once and never overwritten), so nothing is answered on screen before you
# run it. `make instructor` opens the solved notebooks in `labs/`, with every output stored.

# %% [markdown]
# ## The notebooks
#
# | notebook | you will be able to | needs | suggested time |
# |---|---|---|---|
# | 01 storage challenges | split a training step's memory into parameters, gradients, optimizer states and activations; predict each from the shape; say when activations dominate | Python, basic PyTorch | 60 min |
# | 02 inter-layer parallelism | predict the bytes per rank of DDP and ZeRO stages 1-3 and their traffic; explain the pipeline bubble of GPipe, 1F1B and interleaved schedules; say what PipeDream's weight stashing buys | 01 | 75 min |
# | 03 intra-layer parallelism | count the collectives of Megatron's tensor parallelism; compare 1D, 2D, 2.5D and 3D layouts by memory and traffic; place a tensor-parallel group on the right link | 01, 02 | 60 min |
# | 04 heterogeneous offload | explain vDNN, SwapAdvisor, ZeRO-Offload, ZeRO-Infinity, FlashNeuron and Mobius by what they move, where, and when it hides behind compute | 01, 02 | 75 min |
# | 05 data reduction | trade memory for compute with recompute plans; predict mixed precision's bytes and failure modes; say why generic compression fails on model data | 01 | 60 min |
# | 06 fault tolerance | size a checkpoint and its interval (Young, Daly) from a failure rate; resume bit-identically after a kill; weigh redundant computation | 01, 02 | 60 min |
# | 07 cost and green storage | price a run in dollars, kWh and CO2 on HBM, DRAM or SSD; predict SSD wear | 01, 04 | 45 min |
# | 08 the future | replay a step's trace on a memory hierarchy; judge near-data and analog compute by bytes moved and error | 01, 04 | 45 min |
# | 09 choosing a strategy | pick dp, tp, pp, ZeRO, recompute, offload and precision for a model and cluster, and defend the choice | all | 75 min |
#
# The notebooks follow one arc, each taking the steps its topic has, in its own order (04 breaks it
# first; 08 has no break-it step): why it matters, **predict** (commit a guess before the data),
# **measure** (a real run), **explain** (the model beside the measurement, with an `assert` that they
# agree), **scale** (real models, real GPUs), **break it**, **design** (a widget panel), **check yourself**.

# %% [markdown]
# ## Symbols used across the lab
#
# | symbol | meaning | where it first matters |
# |---|---|---|
# | $s$ | sequence length (tokens per sample) | 01 |
# | $b$ | micro-batch size (samples per forward pass on one GPU) | 01 |
# | $h$ | hidden size (width of the residual stream) | 01 |
# | $a$ | attention heads | 01 |
# | $L$ | transformer layers | 01 |
# | $V$ | vocabulary size | 01 |
# | $\Psi$ | parameter count (ZeRO's notation) | 01 |
# | $N_d$ | data-parallel degree (ZeRO's notation; $d$ elsewhere) | 01, 02 |
# | $t$ | tensor-parallel degree | 03 |
# | $p$ | pipeline stages | 02 |
# | $d$ | data-parallel degree (in 03, the depth of 2.5D's grid, which 03 defines) | 02 |
# | $m$ | micro-batches per step (per pipeline) | 02 |
# | $v$ | model chunks per pipeline stage (interleaved schedule) | 02 |
#
# Units: bytes (B) and seconds inside the code; GB = 1e9 bytes and GiB = 2**30 bytes are named
# wherever a figure is shown. "bn" is a count (billions of parameters), never bytes.

# %% [markdown]
# ## Answering, checking and grading
#
# * A **prediction** is a variable you set before a reveal cell runs (`predicted_... = None`); the reveal
#   says right or wrong and by how much. Counts are judged exactly, other quantities within a stated
#   tolerance, and so is a published count nothing in the lab lets you derive (01's Llama 3
#   interruptions, judged within a band). The guess in force when its reveal first runs is the one
#   scored: a reveal run with no guess (as "Run All" does) shows no answer and records "no guess", and
#   a guess changed after its reveal is shown and recorded as "after reveal". To skip one, run
#   `checks.predict(id, checks.PASS)`.
# * A **self-check** (`checks.check("01.zero_stage", answer)`) compares your number with labkit's own
#   model. A wrong answer is diagnosed (a unit slip such as bytes for GB, percent for fraction, bits for
#   bytes, GiB for GB; or the exercise's own likely mistakes, such as a forgotten term) and gets one more
#   hint step per try, the last being the worked answer.
# * A **coding exercise** (`practice.check_code("08.code.evict", evict)`) runs real tests on your
#   function. A failure names the test that failed and shows one hint step for that test per failed try
#   (a question, then a direction); the worked answer, in words, comes only on the third.
# * A **build-it exercise** (02 to 06: `build.open_stub(key)`, then `build.check_build(key, path)`)
#   has you write a real component (ZeRO stages 1 and 2, a 1F1B executor, tensor-parallel layers, a
#   sequence-parallel block, activation offload, selective recompute, a sharded checkpoint) in a module
#   beside the notebook; it runs in real processes (local process groups where the component is
#   distributed) beside torch's own engine or the plain computation, names the typical bug when a test
#   fails, and hints the same way.
# * **Collecting answers.** Every check and reveal is appended as it happens to `labkit-journal.jsonl`
#   beside the notebook (a kernel restart loses nothing). Each line carries a digest of the line before
#   it, so a line deleted, moved or edited before export shows in the hand-in and in `collect`. At the
#   end of a notebook a student runs
#   `checks.export_answers("answers-01.json", student="name", notebook="01")`, which writes each try in
#   order with its verdict and diagnosis, plus a summary scored by the committed guesses and by "ever
#   right" and tries. An instructor gathers a class's files with `python -m labkit.course collect DIR`.
#
# The exercises each notebook registers, counted from the lab itself (look-up self-checks, exercises
# that need two results put together, and coding exercises, the build-it ones included), and its
# registered predictions:

# %%
from labkit.course import guide

print(guide.exercise_table())
