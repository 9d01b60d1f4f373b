"""LoRA: a projection with a rank-r adapter, ``y = x W^T + s (x A^T) B^T``
(``s = alpha / r``), applied at every forward or merged into the weights
once at load, and swapped at run time where rotation is permitted.

=================  ================================================  ===========================
path / variant     what one call runs                                a swap (lora_rotate on)
=================  ================================================  ===========================
lora.proj (Atlas)
  per_forward      ``t = x A^T`` into fp32 ``[m, r]``, then the      pointer swap: the next call
                   base projection with ``s t B^T`` fused in         reads the new A and B
                   (2 launches)
  merged           the base projection on ``W' = W + s B A``         re-merge ``W'`` from the kept
                   (merged in fp16 once at load; 1 launch)           base weights (1 kernel)
lora.proj_pool     per_forward, as above                             pointer swap
(Metrale)
=================  ================================================  ===========================

Atlas's ``lora_eager`` picks ``merged``; off, ``per_forward``. In both
engines ``lora_rotate`` chooses no kernel: it permits a swap of the adapter
between calls (off, a swap is refused and the loaded adapter stays), bound
into the shape as ``rotate``. Each record's ``findings`` (``family.swap_check``)
swap in a second adapter, require the next call to match the reference with
the new adapter and not the old, and on a GPU time the swap (``swap_ms``).

The base weights are fp16 ``W[n, k]``, not the project's W4A16 layout: the
merged path must hold ``W + s B A`` in a float format (merged into int4 the
adapter would be requantised away), so with fp16 base weights both variants
run the same projection kernel on the same format and differ only in where
the adapter is applied; with int4 base weights the merge would go into a
dequantised fp16 copy, doubling the weight bytes the merged path reads.

Metrale's ``lora_eager`` is another lever: decode and verify run without
CUDA graphs while a LoRA pool is loaded. It belongs to the decode step's
CUDA graph, ``attention.decode_graph``, whose table already lists it (its
shapes say whether a pool is loaded), not here. Metrale applies adapters
per forward, and an installed adapter changes other paths: decode takes the
split SiLU FFN (``w4a16.ffn_decode``'s ``+split`` variants) whatever
``decode_split_silu`` says, and the NVFP4 MMQ dense-FFN prefill arm
(``ffn.prefill``'s ``nvfp4_mmq``, not built here) is not taken. Those paths'
tables model the engine with no adapter installed. ``METRALE_LORA_PEER``
also permits rotation in the engine; it is not a lever field, so only
``lora_rotate`` binds it here.
"""
