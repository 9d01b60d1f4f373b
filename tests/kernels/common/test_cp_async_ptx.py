"""The asynchronous-copy primitives (``common/cp_async.py``), the 128-byte
swizzle (``common/swizzle.py``, and wgmma reading swizzled tiles) and the
accumulator-tied wgmma wait compile
to the machine code they stand for: ``LDGSTS.E.BYPASS.128`` with its
``LDGDEPBAR``/``DEPBAR`` (sm_90a, and sm_80 for the mma.sync family), and a
``WARPGROUP.DEPBAR`` wait that ptxas accepts without an advisory."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from ptx_harness import assemble, check_ptxas, compiled, nvdisasm, sm90a  # noqa: F401 (compiled, sm90a: fixtures)

STAGES = 3


def jobs():
    """(name, dispatcher, signature, threads per block); runs in the compile process."""
    import numpy as np
    from numba import cuda, types

    from leverctl_kernels.common import cp_async as ca
    from leverctl_kernels.common import swizzle as sw
    from leverctl_kernels.common import wgmma as wg

    words = STAGES * 8 * 64  # closure constants: the shared array's size, the groups left in flight
    in_flight = STAGES - 1

    @cuda.jit(launch_bounds=(128,))
    def staged_sum(out, x, nrows):
        """Rows of 64 uint32 (256 bytes) staged STAGES deep through a swizzled
        tile with cp.async, then summed."""
        s = cuda.shared.array(words, np.uint32)
        t = cuda.threadIdx.x
        r, c = t >> 4, t & 15  # 8 rows x 16 chunks of 16 bytes per stage
        acc = np.uint32(0)
        for st in range(STAGES - 1):
            row = st * 8 + r
            ok = row < nrows
            ca.cp_async_16(
                s,
                st * 2048 + sw.sw128(r * 128 + (c & 7) * 16) + (c >> 3) * 1024,
                x,
                (row if ok else 0) * 64 + c * 4,
                16 if ok else 0,
            )
            ca.cp_async_commit()
        for st in range(nrows // 8):
            nxt = st + STAGES - 1
            row = nxt * 8 + r
            ok = row < nrows
            ca.cp_async_16(
                s,
                (nxt % STAGES) * 2048 + sw.sw128(r * 128 + (c & 7) * 16) + (c >> 3) * 1024,
                x,
                (row if ok else 0) * 64 + c * 4,
                16 if ok else 0,
            )
            ca.cp_async_commit()
            ca.cp_async_wait(in_flight)
            cuda.syncthreads()
            acc += s[(st % STAGES) * 512 + t]
            cuda.syncthreads()
        ca.cp_async_wait_all()
        out[cuda.grid(1)] = acc

    MMA, ZERO = wg.op("bf16", 64), wg.zeros(64)
    store = wg.make_store(64)

    @cuda.jit(launch_bounds=(128,))
    def wgmma_tied_wait(y, a_desc, b_desc):
        acc = ZERO()
        wg.wgmma_fence()
        acc = MMA(a_desc, b_desc, acc, 1, 1, 1, 0, 0)
        wg.wgmma_commit_group()
        acc = wg.wait_acc(0, acc)
        store(y, 64, 64, 0, 0, acc)

    from test_swizzle import _sw_kernel

    u32 = types.uint32
    u16_2d = types.uint16[:, ::1]
    return [
        ("wgmma_sw128", _sw_kernel(64, True), (u16_2d, u16_2d, types.float32[:, ::1]), 128),
        ("cp_async_staged_sum", staged_sum, (u32[::1], u32[::1], types.int32), 128),
        ("wgmma_tied_wait", wgmma_tied_wait, (types.float32[:, ::1], types.uint64, types.uint64), 128),
    ]


def _sass(rec: dict) -> str:
    disasm = nvdisasm()
    if not disasm:
        pytest.skip("nvdisasm not found (PATH, $CUDA_HOME/bin or the nvidia-cuda-nvdisasm wheel)")
    return subprocess.run([disasm, rec["cubin"]], check=True, capture_output=True, text=True).stdout


def test_cp_async_is_ldgsts_with_its_group_barriers_on_sm90a(sm90a):
    check_ptxas(sm90a)
    ptx = Path(sm90a["kernels"]["cp_async_staged_sum"]["ptx"]).read_text()
    assert re.search(r"cp\.async\.cg\.shared\.global \[%r\d+\], \[%rd\d+\], 16, %r\d+;", ptx)
    assert "cp.async.commit_group;" in ptx and f"cp.async.wait_group {STAGES - 1};" in ptx
    sass = _sass(sm90a["kernels"]["cp_async_staged_sum"])
    assert re.search(r"\bLDGSTS\.E\.BYPASS(\.\w+)*\.128\b", sass), "no 128-bit LDGSTS"
    assert "LDGDEPBAR" in sass and re.search(r"\bDEPBAR\.LE SB0, 0x[0-9a-f]+", sass)
    assert not re.search(r"\bLDG\.E\b", sass)  # nothing staged through registers


def test_cp_async_assembles_for_sm80(compiled, tmp_path):
    if not compiled["ptxas"]:
        pytest.skip("ptxas not found")
    rec = compiled["kernels"]["cp_async_staged_sum"]
    ptx = tmp_path / "k.ptx"
    ptx.write_text(re.sub(r"^\.target sm_90$", ".target sm_80", Path(rec["ptx"]).read_text(), flags=re.M))
    got = assemble(compiled["ptxas"], ptx, "sm_80", tmp_path / "k.cubin")
    assert got["rc"] == 0 and got["spill"] == 0 and got["lmem"] == 0, got["log"]
    assert re.search(r"\bLDGSTS\.E\.BYPASS(\.\w+)*\.128\b", _sass({"cubin": str(tmp_path / "k.cubin")}))


def test_wgmma_on_swizzled_tiles_assembles_clean_for_sm90a(sm90a):
    rec = sm90a["kernels"]["wgmma_sw128"]
    assert rec["rc"] == 0 and rec["spill"] == 0 and rec["lmem"] == 0, rec["log"]
    assert not re.findall(r"\(C75\d\d\)", rec["log"]), rec["log"]
    assert re.search(r"\bHGMMA\.64x64x16\.F32\.BF16\b", _sass(rec))


def test_the_tied_wait_is_a_warpgroup_depbar_ptxas_takes_without_advisory(sm90a):
    rec = sm90a["kernels"]["wgmma_tied_wait"]
    assert rec["rc"] == 0 and rec["spill"] == 0, rec["log"]
    assert not re.findall(r"\(C75\d\d\)", rec["log"]), rec["log"]
    sass = _sass(rec)
    assert re.search(r"\bHGMMA\.64x64x16\.F32\.BF16\b", sass) and "WARPGROUP.DEPBAR.LE gsb0, 0x0" in sass
