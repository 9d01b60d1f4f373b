"""BF16 tensor-core prefill GEMM v1: 64 x 128 tiles of ``c`` (the M64
tiling), two warpgroups a tile, each on one column half (``_wgmma_bf16``:
int4 weights to bf16 in registers, bf16 activations, wgmma m64n64k16 on the
shared A tile, f32 accumulators)."""

from __future__ import annotations

from ...common import tc
from . import _mma_forms, _wgmma_bf16

WGS, BN, WN = 2, 128, 2  # two warpgroups, both along the 128 columns


def build(shape, form: str | None = None):
    """On wgmma (Hopper, and the simulator) or, on a GPU without it,
    ``_mma_forms``' mma.sync m16n8k16 bf16 on the same 64 x 128 tiles
    (``form``: tests pass it)."""
    if tc.check_form(form or tc.current()) == tc.MMA_SYNC:
        return _mma_forms.build_bf16(shape, WGS, BN, wn=WN)
    return _wgmma_bf16.build_with(shape, WGS, BN, wn=WN)


build.forms = tc.FORMS
