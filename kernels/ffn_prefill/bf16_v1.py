"""BF16 tensor-core prefill GEMM v1: one warpgroup per 64 x 128 tile of
``c`` (``_wgmma_bf16``: int4 weights to bf16 in registers, bf16
activations, wgmma m64n128k16, f32 accumulators)."""
from __future__ import annotations

from . import _wgmma_bf16

WGS, BN = 1, 128


def build(shape):
    return _wgmma_bf16.build_with(shape, WGS, BN)
