"""MoE decode-side kernel paths: the router, the routed experts' FFN in the
weight formats the holo levers choose, the FP8 grouped decode, the
multi-sequence decode, decode through the prefill path, and the expert-union
statistics.

================================  ============================  ==========================================
path                              variants                      what one call does
================================  ============================  ==========================================
moe.router (Metrale)              bf16, fp32_gate,              gate GEMM, softmax, top-k, renormalised
                                  fp32_routing                  weights (2 launches)
moe.gateup_fp4                    int4, nvfp4                   gate/up of every routed row and the SiLU
                                                                product: per row at decode shapes, rows of
                                                                an expert together at prefill shapes
moe.down_fp4                      int4, nvfp4                   down projection, weighted sum of each
                                                                row's experts
moe.decode_fp8_grouped (Metrale)  grouped, per_row              the routed FFN with FP8 weights (128 x 128
                                                                block scales)
moe.decode_multi_seq (Metrale)    token_major, per_token        the routed FFN (int4) of a decode batch
moe.decode_via_prefill (Metrale)  decode, prefill               one row's routed FFN (int4); the shape
                                                                says whether the layer is a DFlash
                                                                capture layer
moe.union_stats                   off, on                       top-k of given logits; ``on`` counts the
                                                                distinct experts (bound: outputs grow)
================================  ============================  ==========================================

Sizes come from a recipe's ``[model]`` (``hidden``) and ``[model.moe]``
(``experts``, ``top_k``, ``expert_intermediate``) with ``[model.bench]``'s
``decode_batches`` and ``prefill_tokens``; Qwen3-Next-80B-A3B's where
absent. Routing of the expert paths is drawn (k distinct experts a row,
softmax weights of normal logits), so each path measures its own kernels.

On a model file (``leverctl bench --weights``) every weight-bearing path,
the prefill ones too, declares the expert roles it reads (``WeightUse``)
and runs on the file's experts, all of them kept and only the routed ones
encoded; ``file_weights`` reads NVFP4 and 128 x 128-block FP8 as stored
where an arm reads that format and makes every other format from the
decoded values, as for drawn weights.

Every kernel runs on FP32 CUDA cores (the records' ``tensor_cores`` null)
but the grouped expert GEMMs: the expert stages at prefill shapes
(``moe.gateup_fp4``, ``moe.down_fp4``) and the grouped variants of
``moe.decode_fp8_grouped`` and ``moe.decode_via_prefill``, which run on the
grouped GEMM engine's warp MMA (``mma.sync`` fp16, ``_experts_tc``; their
records say so, with ``tc_flops`` the products').
"""
