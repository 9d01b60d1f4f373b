"""The mma.sync mainloop's machine code (assembled for sm_90a, the
project's GPU; the PTX has nothing sm_80 lacks): HMMA/IMMA at the form's
type, fragments by LDSM from shared memory, operands carried by 128-bit
LDGSTS (no global load through registers before the last MMA), no
async-proxy fence, no spill or local memory."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from ptx_harness import check_ptxas, compiled, nvdisasm, sm90a  # noqa: F401 (compiled, sm90a: fixtures)

FORMS = {
    # name: (dtype, wgs, bn), the SASS MMA it must issue
    "mma_sync_bf16_wg1_n128": (("bf16", 1, 128), "HMMA.16816.F32.BF16"),
    "mma_sync_f16_wg2_n64": (("f16", 2, 64), "HMMA.16816.F32"),
    "mma_sync_s8_wg1_n128": (("s8", 1, 128), "IMMA.16832.S8.S8"),
}


def jobs():
    from numba import types

    from leverctl_kernels.common.gemm import mma_sync as MS

    u32, f32 = types.uint32[:, ::1], types.float32[::1]
    sig = (types.float32[:, ::1], u32, u32, types.uint8[:, ::1], f32, f32, f32, types.uint8[:, ::1], f32)
    return [(name, MS.kernel(*geo), sig, 128 * geo[1]) for name, (geo, _) in FORMS.items()]


@pytest.mark.parametrize("name", FORMS)
def test_the_mainloop_is_async_copies_ldmatrix_and_warp_mma_without_spills(sm90a, name):
    check_ptxas({**sm90a, "kernels": {name: sm90a["kernels"][name]}})
    rec = sm90a["kernels"][name]
    assert rec["spill"] == 0 and rec["lmem"] == 0 and rec["stack"] == 0, rec["log"]
    ptx = Path(rec["ptx"]).read_text()
    assert "fence.proxy.async" not in ptx and "wgmma." not in ptx  # nothing sm_80 lacks
    disasm = nvdisasm()
    if not disasm:
        pytest.skip("nvdisasm not found")
    sass = subprocess.run([disasm, rec["cubin"]], check=True, capture_output=True, text=True).stdout
    want = FORMS[name][1]
    assert re.search(rf"\b{re.escape(want)}\b", sass), re.findall(r"\b[HI]MMA\.[\w.]+", sass)
    assert re.search(r"\bLDSM\.16\.M88\.4\b", sass)
    assert re.search(r"\bLDGSTS\.E\.BYPASS(\.\w+)*\.128\b", sass)
    first = sass.index("LDGSTS")
    last = max(m.start() for m in re.finditer(r"\b[HI]MMA\.", sass))
    assert not re.search(r"\bLDG\.E\b", sass[first:last]), "an operand staged through registers"
    assert re.search(r"\bLDG\.E\b", sass[last:])  # the check can see one: the epilogue's scales
    # the epilogue unrolled at compile time (``unroll.each_group``): each of a
    # thread's bn / 2 float32 accumulators in one 16-byte store of four, and
    # once in the element-by-element stores where the 16 bytes do not fit
    # (a loop indexing the tuple would make more and a search); the other
    # element size's and the swapped store's branches folded away
    bn = FORMS[name][0][2]
    assert len(re.findall(r"\bSTG\.E\.128\b", sass)) == bn // 8
    assert len(re.findall(r"\bSTG\.E(?![.\w])", sass)) == bn // 2
