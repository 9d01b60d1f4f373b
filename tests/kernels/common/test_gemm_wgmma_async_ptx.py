"""The asynchronous wgmma mainloop's machine code on sm_90a: HGMMA/QGMMA at
the tile's N, operands carried by 128-bit LDGSTS (no global load through
registers), no spill or local memory, and ptxas's wgmma advisories absent
(no serialised or re-armed warpgroup). The only global loads through
registers are the epilogue's scales, after the last MMA; unswapped, its
stores are 128-bit (`STG.E.128`). With TMA copies the operands come by
`UTMALDG.2D` on mbarriers (`SYNCS`), with no `LDGSTS` at all."""

from __future__ import annotations

import re
import subprocess

import pytest
from ptx_harness import check_ptxas, compiled, nvdisasm, sm90a  # noqa: F401 (compiled, sm90a: fixtures)

FORMS = {
    # name: (dtype, wgs, bn, stages, swap), the SASS MMA it must issue
    "async_bf16_wg2_n128_s4": (("bf16", 2, 128, 4, False), "HGMMA.64x128x16.F32.BF16"),
    "async_e4m3_wg1_n16_s3_swap": (("e4m3", 1, 16, 3, True), "QGMMA.64x16x32.F32.E4M3.E4M3"),
    "async_e4m3_wg1_n32_s4_swap": (("e4m3", 1, 32, 4, True), "QGMMA.64x32x32.F32.E4M3.E4M3"),
}


# the same mainloop with its copied operands brought by TMA
TMA_FORMS = {
    "tma_bf16_wg2_n128_s4": (("bf16", 2, 128, 4, False), "HGMMA.64x128x16.F32.BF16"),
    "tma_e4m3_wg1_n32_s4_swap": (("e4m3", 1, 32, 4, True), "QGMMA.64x32x32.F32.E4M3.E4M3"),
}


def jobs():
    from numba import types

    from leverctl_kernels.common.gemm import wgmma_async as G

    u32, f32 = types.uint32[:, ::1], types.float32[::1]
    sig = (types.float32[:, ::1], u32, u32, types.uint8[:, ::1], f32, f32, f32, types.uint8[:, ::1], f32)
    tma_sig = (*sig, types.uint64[:, ::1])
    return [(name, G.kernel(*geo, copy="cp.async"), sig, 128 * geo[1]) for name, (geo, _) in FORMS.items()] + [
        (name, G.kernel(*geo), tma_sig, 128 * geo[1])
        for name, (geo, _) in TMA_FORMS.items()  # TMA: the default
    ]


def _sass(sm90a, name: str, want: str) -> str:
    """The kernel's SASS, once ptxas's record is clean (no spill, local
    memory or wgmma advisory) and its MMA is ``want``."""
    check_ptxas({**sm90a, "kernels": {name: sm90a["kernels"][name]}})
    rec = sm90a["kernels"][name]
    assert rec["spill"] == 0 and rec["lmem"] == 0 and rec["stack"] == 0, rec["log"]
    assert not re.findall(r"\(C75\d\d\)", rec["log"]), rec["log"]
    disasm = nvdisasm()
    if not disasm:
        pytest.skip("nvdisasm not found")
    sass = subprocess.run([disasm, rec["cubin"]], check=True, capture_output=True, text=True).stdout
    assert re.search(rf"\b{re.escape(want)}\b", sass), re.findall(r"\b[HQ]GMMA\.[\w.]+", sass)
    return sass


def _no_register_staging(sass: str, first_copy: str) -> int:
    """Between the first asynchronous copy and the last MMA (the mainloop)
    no global load through registers; the last MMA's place."""
    first = sass.index(first_copy)
    last = max(m.start() for m in re.finditer(r"\b[HQ]GMMA\.", sass))
    assert not re.search(r"\bLDG\.E\b", sass[first:last]), "an operand staged through registers"
    return last


@pytest.mark.parametrize("name", FORMS)
def test_the_mainloop_is_async_copies_and_warpgroup_mma_without_spills(sm90a, name):
    sass = _sass(sm90a, name, FORMS[name][1])
    assert re.search(r"\bLDGSTS\.E\.BYPASS(\.\w+)*\.128\b", sass)
    last = _no_register_staging(sass, "LDGSTS")
    assert re.search(r"\bLDG\.E\b", sass[last:])  # the check can see one: the epilogue's scales
    if not FORMS[name][0][4]:  # unswapped: the epilogue's rows leave 16 bytes a lane
        assert re.search(r"\bSTG\.E\.128\b", sass[last:]), "no 16-byte store in the epilogue"


@pytest.mark.parametrize("name", TMA_FORMS)
def test_the_tma_mainloop_copies_by_utmaldg_on_mbarriers_without_spills(sm90a, name):
    sass = _sass(sm90a, name, TMA_FORMS[name][1])
    assert re.search(r"\bUTMALDG\.2D\b", sass), "no TMA load"
    assert "LDGSTS" not in sass, "a cp.async copy beside the TMA loads"
    assert re.search(r"\bSYNCS\.EXCH\.64\b", sass), "no mbarrier initialised"
    assert re.search(r"\bSYNCS\.(PHASECHK|ARRIVE)", sass), "no mbarrier arrive or phase check"
    _no_register_staging(sass, "UTMALDG")
