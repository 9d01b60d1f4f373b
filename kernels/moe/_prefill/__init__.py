"""What the MoE prefill paths (Metrale) share: the routed experts of a batch of prompt tokens,
rows sorted by expert, on grouped GEMMs; Nemotron's sorted prefill; and
its shared expert.

======================  =========================================================================
path / variant          what runs
======================  =========================================================================
moe.prefill_grouped     SiLU-GLU experts (Qwen3-Next), NVFP4 weights
  grouped               gate/up and down on the single-launch grouped GEMM (every row computed)
  grouped+fp8_down      down on the FP8 grouped GEMM (E4M3 activations per row, E4M3 weights)
  grouped+bounded_down  down on the tile-bounded grouped GEMM
  bounded+fp8_down      gate/up tile-bounded, down FP8 (tile-bounded)
  bounded               both tile-bounded: the engine's route without the levers
moe.prefill_sorted      squared-ReLU experts (Nemotron-3 Nano), both GEMMs tile-bounded
  a16 / w4a4_up         the up projection on fp16 activations / on NVFP4 ones
moe.shared_expert       one squared-ReLU expert on every token
  a16, w4a4_up,         W4A4 (activations to NVFP4 per GEMM) for neither, the up, the down,
  w4a4_down, w4a4       or both projections
======================  =========================================================================

Every GEMM of them is ``grouped``'s, on the shared GEMM engine
(``common/gemm/grouped.py``: a multi-stage ``cp.async`` pipeline into
swizzled shared memory, 64-row tiles of one expert, two warpgroups a tile
side by side along its columns, each its half of the gate and of the up
columns)
on its ``mma.sync`` form: warp MMA m16n8k16 with fp16 inputs and f32
accumulators (the records say ``tensor_cores: "mma.sync"``, ``tc_dtype:
"f16"``); NVFP4 and E4M3 operands are staged into fp16 exactly (their
scales applied in the f32 epilogue), float32 ones rounded once to fp16.
What the levers trade is the grid: a
*tile-bounded* GEMM is sized on the host by a per-expert bound in
tiles of 8 rows (``bounds``; the kernel computes 64-row tiles and stops at
the bound), and rows of an expert past it are never computed. The
shapes come in two routings (``uniform``, ``skewed``: one expert is every
token's first choice), and the label says which, so a sweep shows the lever
sets that are right only under uniform load. A record's ``rows_lost`` is
the routed rows the run's bound dropped, read from the device's counts;
any is a FAIL. The scratch the GEMMs write (``launch.workspace``) is filled
with NaN by the bench before the run: a dropped row reaches the output as
NaN unless the levers zero the scratch first, and then as zeros.

The reference is the float64 layer with the NVFP4 weights decoded
exactly (``moe.naive``), so each record's error is what its arithmetic costs.
"""
