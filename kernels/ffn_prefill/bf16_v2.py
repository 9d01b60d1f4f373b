"""BF16 tensor-core prefill GEMM v2: the 128-row tile (``t_m128``), two
warpgroups per 128 x 64 tile of ``c`` sharing each staged weight tile
(``_wgmma_bf16``, wgmma m64n64k16)."""
from __future__ import annotations

from . import _wgmma_bf16

WGS, BN = 2, 64


def build(shape):
    return _wgmma_bf16.build_with(shape, WGS, BN)
