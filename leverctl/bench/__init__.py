"""The bench: plan, run, check and time kernel paths; records per docs/records.md.

    device.py    GPU or Numba's CUDA simulator, decided before numba.cuda loads
    plan.py      paths an engine (and the recipe's model) has x the variant its levers choose x shapes
    axes.py      the preset's shapes refined by --axis NAME=V1,V2 (nvbench's axes)
    run.py       one item -> one record (run_item); records streamed as they finish; the bench document
    smoke.py     the one-thread first kernel of a GPU run, and the CUDA versions it finds
    faults.py    which CUDA errors lose the context (the run stops) and which fail one record
    campaign.py  the GPU run: every recipe in one process, records appended to JSONL
    preflight.py the Python version and every import, checked before a GPU run
    check.py     poisoned outputs against the float64 reference
    timing.py    stopping rule, statistics, roofline, the GPU rig
    weights.py   a GGUF file's FFN matrix, on which every dense-FFN prefill arm is run (bench --weights)
    report.py    a bench document as a table, JSON, Markdown or CSV
    records/     the records: schema, rules, decoding, columns, reading, writing, merging (its own map)
    sweep.py     every combination of the levers that steer each path; shards; the results directory
    slurm.py     the shard from a scheduler's environment; Slurm array scripts and their state
    rank.py      rankings, lever effects and the winning recipe, from records
    arms.py      a path's arms side by side, error beside time (report show's arm view)
    plot.py      lever effects as terminal bars and an SVG chart
    compare.py   two runs record by record against their noise: the CI gate

Rules the records rely on:

* Inputs are drawn per (seed, kernel, shape), so every variant and lever set
  of a kernel is checked on the same data; the GPU recheck after timing draws
  a fresh set.
* In the simulator there are no timings (``timing``, ``roofline``,
  ``achieved``, ``reference_lib`` and ``speedup_vs_against`` are null) and
  model shapes are refused unless forced: at about a millisecond per
  simulated thread they take hours.
* ``noise`` is the relative standard error of the median; sampling stops
  once it is <= 0.5 % after at least two batches, else at the time cap
  (``stopped_by``). Times exclude the host's launch cost; where the levers
  change the number of launches, ``with_host_us`` includes it.
* The roofline floor is launches x launch latency + max(bytes / copy
  bandwidth, FLOPs / the rate of the instruction the variant ran on: FP32,
  or the BF16 or FP8 tensor-core peak), all measured once per run on the
  device; cuBLAS's BF16 GEMM rate sits beside the peaks as a reference.

Hooks a kernel path may declare in ``KernelPath.extra``:

* ``"gemm_mnk"``: ``fn(shape) -> (m, n, k)``, the fp16 matrix product doing
  the same work; on a GPU with torch importable the record gains
  ``reference_lib`` (cuBLAS time and our time over it). Never a dependency.
* ``"model_sections"``: the ``[model.*]`` tables a recipe's model needs at
  least one of to have the path (``("gdn",)``); a recipe whose ``[model]``
  has none of them does not plan it (a dense model has no GDN layer).
* ``"decode"``: ``{output: fn(array) -> float64 array}`` for outputs stored
  encoded (bf16 as raw uint16 bits, say); the others compare as float64.
* ``"profile_shape"``: ``fn(model shape) -> Shape``, where ``leverctl
  profile`` traces the variant's memory accesses: the model's row lengths,
  strides and alignment, few rows (simulated in seconds).
* ``"profile_blocks"``: n, for a path whose launches' blocks are
  independent and alike (no block reads what another wrote): the trace
  runs n blocks of each launch, spread over its grid, and scales their
  counts to the whole grid, so the profile shape can keep every row length
  (an FFN's gate/up rows are its down rows' count).
* ``"types_shape"``: ``fn(model shape) -> Shape``, the smoke shape whose
  buffers ``leverctl profile`` launches the variant on to learn its
  kernels' argument types, where the smoke shapes are of different kinds
  (default: the smallest smoke shape).
* ``"align"``: ``fn(shape, inputs, got, ref) -> (got, ref)``, the arrays
  compared, made from the outputs and the reference where they cannot be
  compared element by element (``moe.router``'s top-k: near-tied experts).
* ``"weights"``: a ``leverctl_kernels.common.model_weights.WeightUse``, the
  role groups of a model file's tensors the path runs on and how
  (``bench --weights``: :mod:`leverctl.bench.weights`).
"""
