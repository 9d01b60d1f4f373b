"""Attention kernel paths, one folder each:

==============================  ===========================================================
path (folder)                   what it is
==============================  ===========================================================
attention.paged_decode          paged GQA decode attention: split-K online softmax and a
                                merge (``_paged``), split count pinned or from the live batch
attention.dflash_contig         the DFlash draft block's causal attention over the target's
                                context, paged or contiguous KV
attention.mla_decode            MLA decode in the latent space (Metrale)
attention.rotation              rotated q/k/v and the FP8 KV-cache write: weights rotated at
                                load vs a run-time Hadamard (Metrale)
attention.decode_graph          one decode step (GDN + paged attention layers) as a CUDA
                                graph vs eager launches (Metrale)
attention.proj_bf16_tc          prefill q/k/v projection on NVFP4 weights (Atlas)
attention.proj_bf16_tc_w4a16    prefill q/k/v projection on int4 weights (Metrale)
attention.proj_fp8              the FP8 projection GEMM, 32-row vs 16-row tiles (Metrale)
==============================  ===========================================================

Each folder's ``spec.py`` declares the path (shapes, inputs, traffic, the
decision table ``selection.attention`` gives it) beside one module per
variant and, where the path has its own, a ``naive.py`` reference. What
several paths share is here: ``naive`` (paged decode in float64, also the
DFlash and decode-step references' base), ``_paged`` (the split and merge
kernels paged decode, DFlash, MLA and the decode step build on),
``family`` (the decode paths' tolerance), ``projections`` and
``_proj_prep`` (the three projection paths' shapes, tolerances and FP8 /
fp16 preparation kernels).

Two levers of ``attention.paged_decode`` do not choose a variant but reach
the run (``KernelPath.bind``): ``max_decode_seqs`` is the count the split
policy is given (``_paged``), and ``kv_poison`` decides what fills the
unwritten slots of each sequence's fresh tail block
(``paged_decode.spec.make_inputs``). Every record of the path carries
``batch_invariance``: each sequence decoded alone against its row of the
batch, bit for bit (``paged_decode.spec.batch_invariance``); the pinned
variants must pass it, the baseline is expected not to.

Memory-bound: at Qwen3-Next shapes (16 query heads, 2 KV heads, d = 256) a
sequence of L tokens moves 2 KiB of K and V per token, read once by the
block running its 8-head group; the partials add ``splits x 16 x 258 x 4``
bytes each way.
"""
