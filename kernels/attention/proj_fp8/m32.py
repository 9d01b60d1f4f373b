"""``attention.proj_fp8`` variant ``m32``: Metrale's 8-bit-weight
projection GEMM with 32-row token tiles, the twin batches of more than 16
rows take when fp8_attn_m32 is on.

E4M3 weights on the 64-row side, E4M3 tokens on the 32-column side
(``y^T = W x^T``: wgmma m64n32k32 e4m3, f32 accumulators), the channel's and
the token's scales in the epilogue, float32 out. Same stages and K order
as the other tiling, so the two differ only where the hardware's
accumulation order does: both on the asynchronous mainloop
(``common/gemm/wgmma_async.py``), four stages of 128 bytes of K copied by
TMA into 128-byte-swizzled tiles in dynamic shared memory.
"""

from __future__ import annotations

from ...common.gemm import wgmma_async as G

NAME = "m32"
SUMMARY = "32-row token tiles: wgmma m64n32k32 e4m3 (weights x tokens), per-channel and per-token scales"
TILE = dict(dtype="e4m3", wgs=1, bn=32, stages=4, swap=True)


build = G.token_tile_build(NAME, TILE)
