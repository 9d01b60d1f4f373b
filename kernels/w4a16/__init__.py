"""W4A16 kernel paths: int4 weights (8 per uint32, fp16 group-128 scales),
fp16 activations, fp32 accumulation, fp16 outputs.

Paths (``PATHS``):

==================  ==========================================  =============================
path                levers                                      variants
==================  ==========================================  =============================
w4a16.gemv          gemv_sw                                     gemv_sw, gemv_64t
w4a16.gemv_dual     gemv_sw                                     gemv_dual_sw, gemv_dual_64t
w4a16.ffn_decode    decode_ffn_via_gemm, decode_split_silu,     gemv_sw+fused, gemv_64t+fused,
                    gemv_sw                                     gemv_sw+split, gemv_64t+split,
                                                                gemm_m1
w4a16.gemm          ffn_small_m                                 small_m, default_tiles (tensor
                                                                cores), fma_tiles (k % 16 != 0)
==================  ==========================================  =============================

Each path is a folder (``gemv/``, ``gemv_dual/``, ``ffn_decode/``,
``gemm/``) with its declaration in ``spec.py`` and its variants; what the
paths share is here: ``family`` (sizes, tolerance, inputs), ``naive`` (the
float64 references of all four), the GEMV kernels' building blocks
(``_warp_rows``, ``_row_block``, ``_device``).

Weight layout: ``leverctl_kernels.common.int4``. Every output is fp16 (the
engines' activation type); the intermediates of the FFN decode (``gate``,
``up`` and, on the split and GEMM paths, ``silu(gate) * up``) are fp16 too.
References (``naive``) are float64 from the exactly dequantized weights.
"""
