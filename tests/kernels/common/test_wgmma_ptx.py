"""The warpgroup MMA primitive (``kernels/common/wgmma.py``) compiles for
sm_90a without a GPU: a 128-thread kernel that fills shared tiles in the
no-swizzle K-major layout, builds the two matrix descriptors, fences,
issues ``wgmma.mma_async`` (bf16 m64n8k16, or E4M3 m64n8k32), commits,
waits and stores the accumulators.

``wgmma`` is an sm_90a instruction. The kernels are compiled to PTX with
the ``ptx_harness`` like every family (numba-cuda, compute capability 9.0:
libNVVM passes inline PTX through unchecked); this module then rewrites the
PTX's ``.target sm_90`` to ``.target sm_90a`` and assembles it with
``ptxas -arch=sm_90a``. (The harness's own sm_90 assembly of these kernels
fails, as it must, and is not checked.) Where ``nvdisasm`` is found the
cubin's SASS is checked for ``HGMMA`` (bf16) and ``QGMMA`` (E4M3).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from numba import cuda  # a global: the simulator swaps it in the kernel's globals
from ptx_harness import check_ptx, check_ptxas, compiled, nvdisasm, sm90a  # noqa: F401 (compiled, sm90a: fixtures)

THREADS = 128  # one warpgroup


def _kernel(fmt: str):
    import numpy as np

    from leverctl_kernels.common import wgmma as wg
    from leverctl_kernels.gdn._layout import jit_bounded

    if fmt == "bf16":
        k_elems, esize, dtype = wg.K_BF16, 2, np.uint16
    else:
        k_elems, esize, dtype = wg.K_E4M3, 1, np.uint8
    a_len, b_len = wg.M * k_elems, wg.N * k_elems
    lbo, sbo, swz = wg.LBO, wg.SBO, wg.SWIZZLE_NONE
    align = wg.SMEM_ALIGN  # a closure constant (an attribute is not one to the typer)

    @cuda.jit(device=True, inline="always")
    def fill(S, X, rows):
        # X[row, k] (global, row-major, K contiguous) into the core-matrix tile S.
        for i in range(cuda.threadIdx.x, rows * k_elems, THREADS):
            r = i // k_elems
            k = i - r * k_elems
            S[wg.core_offset(r, k * esize, lbo, sbo) // esize] = X[r, k]

    if fmt == "bf16":

        @cuda.jit(device=True, inline="always")
        def mma(da, db, d0, d1, d2, d3):
            return wg.wgmma_m64n8k16_bf16(da, db, d0, d1, d2, d3, 1, 1, 1, 0, 0)
    else:

        @cuda.jit(device=True, inline="always")
        def mma(da, db, d0, d1, d2, d3):
            return wg.wgmma_m64n8k32_e4m3(da, db, d0, d1, d2, d3, 1, 1, 1)

    @jit_bounded(THREADS)  # plain cuda.jit in the simulator
    def k(A, Bt, C, D):
        As = cuda.shared.array(a_len, dtype, alignment=align)
        Bs = cuda.shared.array(b_len, dtype, alignment=align)
        fill(As, A, wg.M)
        fill(Bs, Bt, wg.N)
        wg.fence_proxy_async()
        cuda.syncthreads()
        da = wg.make_desc(wg.smem_addr(As), lbo, sbo, swz)
        db = wg.make_desc(wg.smem_addr(Bs), lbo, sbo, swz)
        tid = cuda.threadIdx.x
        r = 16 * (tid >> 5) + ((tid & 31) >> 2)
        c = 2 * (tid & 3)
        c0, c1, c2, c3 = C[r, c], C[r, c + 1], C[r + 8, c], C[r + 8, c + 1]
        wg.wgmma_fence()  # after the accumulators' registers are written
        d = mma(da, db, c0, c1, c2, c3)
        wg.wgmma_commit_group()
        wg.wgmma_wait_group(0)
        wg.store_d(D, 0, 0, d[0], d[1], d[2], d[3])

    return k


def _kernel_n(fmt: str, n: int, ksteps: int, sbo_delta: int = 0):
    """One warpgroup: ``D = A @ Bt^T`` over ``ksteps`` instructions of the
    general form (``wg.op(fmt, n)``), A (64 x K) and Bt (n x K) staged in
    one no-swizzle tile each, K = ``ksteps`` instructions' K; the descriptor
    start steps along K by two core matrices per instruction (LBO = 128,
    SBO = the K extent's core matrices times 128). The first instruction
    runs with scale-d 0 (D = A@B, the zero accumulators ignored), the
    rest accumulate; the store is :func:`wg.make_store`."""
    import numpy as np

    from leverctl_kernels.common import wgmma as wg
    from leverctl_kernels.gdn._layout import jit_bounded

    k_elems, esize = wg.k_of(fmt), (1 if fmt == "e4m3" else 2)
    dtype = np.uint8 if fmt == "e4m3" else np.uint16
    kt = k_elems * ksteps
    lbo = wg.LBO
    sbo = (kt * esize // wg.CORE_BYTES) * wg.LBO
    rsbo = sbo + sbo_delta  # what the descriptors say (tests break it on purpose)
    step = 2 * wg.LBO  # one instruction's K: 32 bytes, two core matrices
    a_len, b_len = wg.M * kt, n * kt
    align = wg.SMEM_ALIGN
    mma, zeros, store = wg.op(fmt, n), wg.zeros(n), wg.make_store(n)
    swz = wg.SWIZZLE_NONE
    tr = fmt != "e4m3"

    @cuda.jit(device=True, inline="always")
    def fill(S, X, rows):
        for i in range(cuda.threadIdx.x, rows * kt, THREADS):
            r = i // kt
            k = i - r * kt
            S[wg.core_offset(r, k * esize, lbo, sbo) // esize] = X[r, k]

    @cuda.jit(device=True, inline="always")
    def issue(da, db, acc, sd):
        if tr:  # a compile-time constant
            return mma(da, db, acc, sd, 1, 1, 0, 0)
        return mma(da, db, acc, sd, 1, 1)

    @jit_bounded(THREADS)
    def k(A, Bt, D):
        As = cuda.shared.array(a_len, dtype, alignment=align)
        Bs = cuda.shared.array(b_len, dtype, alignment=align)
        fill(As, A, wg.M)
        fill(Bs, Bt, n)
        wg.fence_proxy_async()
        cuda.syncthreads()
        a0 = wg.smem_addr(As)
        b0 = wg.smem_addr(Bs)
        acc = zeros()
        wg.wgmma_fence()
        for s in range(ksteps):
            da = wg.make_desc(a0 + s * step, lbo, rsbo, swz)
            db = wg.make_desc(b0 + s * step, lbo, rsbo, swz)
            acc = issue(da, db, acc, 1 if s else 0)
        wg.wgmma_commit_group()
        wg.wgmma_wait_group(0)
        store(D, D.shape[0], D.shape[1], 0, 0, acc)

    return k


GENERAL = (("bf16", 64, 3), ("f16", 128, 2), ("e4m3", 256, 2))


def jobs():
    """(name, dispatcher, signature, threads per block); runs in the compile
    process."""
    from numba import types

    H, B, F = types.uint16[:, ::1], types.uint8[:, ::1], types.float32[:, ::1]
    general = [
        (f"wgmma_{fmt}_m64n{n}_x{ks}", _kernel_n(fmt, n, ks), ((B if fmt == "e4m3" else H),) * 2 + (F,), THREADS)
        for fmt, n, ks in GENERAL
    ]
    return [
        ("wgmma_bf16_m64n8k16", _kernel("bf16"), (H, H, F, F), THREADS),
        ("wgmma_e4m3_m64n8k32", _kernel("e4m3"), (B, B, F, F), THREADS),
        *general,
    ]


PTX_INSTR = {
    "wgmma_bf16_m64n8k16": "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16",
    "wgmma_e4m3_m64n8k32": "wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3",
}
PTX_INSTR.update(
    {
        "wgmma_bf16_m64n64_x3": "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16",
        "wgmma_f16_m64n128_x2": "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16",
        "wgmma_e4m3_m64n256_x2": "wgmma.mma_async.sync.aligned.m64n256k32.f32.e4m3.e4m3",
    }
)
SASS_INSTR = {
    "wgmma_bf16_m64n8k16": "HGMMA.64x8x16.F32.BF16",
    "wgmma_e4m3_m64n8k32": "QGMMA.64x8x32.F32.E4M3.E4M3",
    "wgmma_bf16_m64n64_x3": "HGMMA.64x64x16.F32.BF16",
    "wgmma_f16_m64n128_x2": "HGMMA.64x128x16.F32",
    "wgmma_e4m3_m64n256_x2": "QGMMA.64x256x32.F32.E4M3.E4M3",
}
FENCES = (
    "wgmma.fence.sync.aligned;",
    "wgmma.commit_group.sync.aligned;",
    "wgmma.wait_group.sync.aligned 0;",
    "fence.proxy.async.shared::cta;",
    "cvta.to.shared.u64",
)


def test_wgmma_kernels_compile_to_ptx_in_fp32(compiled):
    assert set(compiled["kernels"]) == set(PTX_INSTR)
    check_ptx(compiled, fp64=False)


def test_the_ptx_has_the_wgmma_instructions(compiled):
    for name, instr in PTX_INSTR.items():
        ptx = Path(compiled["kernels"][name]["ptx"]).read_text()
        assert instr in ptx, f"{name}: no {instr} in {compiled['kernels'][name]['ptx']}"
        for f in FENCES:
            assert f in ptx, f"{name}: no {f} in its PTX"


def test_ptxas_for_sm90a_accepts_the_wgmma_kernels_without_spills(sm90a):
    check_ptxas(sm90a)
    for name, rec in sm90a["kernels"].items():
        # ptxas says so when it must add a warpgroup.arrive (accumulator
        # registers written after the fence) or serialize the wgmma.
        # Both are "(C75xx)" advisories; the kernel's name has "wgmma" in it.
        odd = re.findall(r"\(C75\d\d\)[^\n]{0,120}", rec["log"])
        assert not odd, f"{name}: {odd}"


def test_ptxas_for_sm90a_makes_gmma_sass(sm90a):
    disasm = nvdisasm()
    if not disasm:
        pytest.skip("nvdisasm not found (PATH, $CUDA_HOME/bin or the nvidia-cuda-nvdisasm wheel)")
    for name, instr in SASS_INSTR.items():
        sass = subprocess.run(
            [disasm, sm90a["kernels"][name]["cubin"]], check=True, capture_output=True, text=True
        ).stdout
        gmma = re.findall(r"\b[HQ]GMMA\.[\w.]+", sass)
        assert any(g == instr or g.startswith(instr + ".") for g in gmma), f"{name}: {gmma} in its SASS"
