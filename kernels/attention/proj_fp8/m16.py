"""``attention.proj_fp8`` variant ``m16``: Metrale's 8-bit-weight
projection GEMM with 16-row token tiles (the seed gives no tile for the kernel
batches take without fp8_attn_m32: 16 rows is this project's assumption).

E4M3 weights on the 64-row side, E4M3 tokens on the 16-column side
(``y^T = W x^T``: wgmma m64n16k32 e4m3, f32 accumulators), the channel's and
the token's scales in the epilogue, float32 out. Same stages and K order
as the other tiling, so the two differ only where the hardware's
accumulation order does: both on the asynchronous mainloop
(``common/gemm/wgmma_async.py``), four stages of 128 bytes of K copied by
TMA into 128-byte-swizzled tiles in dynamic shared memory.
"""

from __future__ import annotations

from ...common.gemm import wgmma_async as G

NAME = "m16"
SUMMARY = "16-row token tiles: wgmma m64n16k32 e4m3 (weights x tokens), per-channel and per-token scales"
TILE = dict(dtype="e4m3", wgs=1, bn=16, stages=4, swap=True)


build = G.token_tile_build(NAME, TILE)
