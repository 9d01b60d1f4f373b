"""BF16 tensor-core prefill GEMM v2: the 128-row tile (``t_m128``), two
warpgroups per 128 x 64 tile of ``c`` sharing each staged weight tile
(``_wgmma_bf16``, wgmma m64n64k16)."""

from __future__ import annotations

from ...common import tc
from . import _mma_forms, _wgmma_bf16

WGS, BN = 2, 64


def build(shape, form: str | None = None):
    """On wgmma (Hopper, and the simulator) or, on a GPU without it,
    ``_mma_forms``' mma.sync m16n8k16 bf16 on the same 128 x 64 tiles
    (``form``: tests pass it)."""
    if tc.check_form(form or tc.current()) == tc.MMA_SYNC:
        return _mma_forms.build_bf16(shape, WGS, BN)
    return _wgmma_bf16.build_with(shape, WGS, BN)


build.forms = tc.FORMS
