"""The grouped GEMM's machine code (``common/gemm/grouped.py``) on sm_90a:
the gathered fp16 mma.sync kernel on the bounded schedule, its 16-row
decode tile on the walking schedule, and the wgmma one
on the walking schedule with NVFP4 weights through the ``nvfp4_f16``
stager. Each issues its form's MMA, carries copied operands by 128-bit
LDGSTS (the gathered rows too: the row map is read as an index, the
operand never passes through registers), and spills nothing."""

from __future__ import annotations

import re
import subprocess

import pytest
from ptx_harness import check_ptxas, compiled, nvdisasm, sm90a  # noqa: F401 (compiled, sm90a: fixtures)

FORMS = {
    # name: (form, dtype, wgs, bn, stages, sched, b_kind, gather), the SASS MMA it must issue
    "grouped_mma_sync_f16_gather_bounded_n64": (
        ("mma_sync", "f16", 1, 64, 3, "bounded", "copy", True),
        "HMMA.16816.F32",
    ),
    # the 16-row decode tile (``kernel.decode()``): the warps' K slices summed in shared memory
    "grouped_mma_sync_f16_gather_walk_n64_decode": (
        ("mma_sync", "f16", 1, 64, 3, "grouped", "copy", True),
        "HMMA.16816.F32",
    ),
    "grouped_wgmma_f16_nvfp4_walk_n64": (
        ("wgmma_async", "f16", 1, 64, 4, "grouped", "nvfp4_f16", False),
        "HGMMA.64x64x16.F32",
    ),
}


def jobs():
    from numba import types

    from leverctl_kernels.common.gemm import grouped as GG
    from leverctl_kernels.common.gemm import mma_sync, wgmma_async

    forms = {"mma_sync": mma_sync, "wgmma_async": wgmma_async}
    u32, u32x3, u8x3 = types.uint32[:, ::1], types.uint32[:, :, ::1], types.uint8[:, :, ::1]
    i32, f32 = types.int32[::1], types.float32[::1]
    ep = types.Tuple((f32, types.float32[:, ::1], f32))
    sig = (types.float32[:, ::1], u32, u32x3, u8x3, types.uint8[:, ::1], i32, i32, types.int32, ep)
    out = []
    for name, ((form, dtype, wgs, bn, stages, sched, b_kind, gather), _) in FORMS.items():
        kern = GG.make_kernel(forms[form], dtype, wgs, bn, stages, sched, b_kind=b_kind, gather=gather)
        if name.endswith("_decode"):
            kern = kern.decode()
            assert kern.tile_m == GG.DECODE_M
        out.append((name, kern, sig, 128 * wgs))
    return out


@pytest.mark.parametrize("name", FORMS)
def test_the_grouped_mainloop_is_async_copies_and_tensor_core_mma_without_spills(sm90a, name):
    check_ptxas({**sm90a, "kernels": {name: sm90a["kernels"][name]}})
    rec = sm90a["kernels"][name]
    assert rec["spill"] == 0 and rec["lmem"] == 0 and rec["stack"] == 0, rec["log"]
    assert not re.findall(r"\(C75\d\d\)", rec["log"]), rec["log"]
    disasm = nvdisasm()
    if not disasm:
        pytest.skip("nvdisasm not found")
    sass = subprocess.run([disasm, rec["cubin"]], check=True, capture_output=True, text=True).stdout
    want = FORMS[name][1]
    assert re.search(rf"\b{re.escape(want)}\b", sass), re.findall(r"\b[HQ]G?MMA\.[\w.]+", sass)
    assert re.search(r"\bLDGSTS\.E\.BYPASS(\.\w+)*\.128\b", sass)
