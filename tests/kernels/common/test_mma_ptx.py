"""The warp MMA primitive compiles for sm_90 (H200), without a GPU
(``ptx_harness``): a kernel that loads fragments, loops the bf16 (or fp16)
MMA over k and stores D (bf16, fp16, s8) has the ``mma.sync`` instruction in its PTX, and
ptxas accepts it with no spills or local memory. Where ``nvdisasm`` is
found (PATH, $CUDA_HOME/bin, or the ``nvidia-cuda-nvdisasm`` wheel of the
``test`` extra), the cubin's SASS is checked for the tensor-core
instruction itself: ``HMMA.16816.F32.BF16``, ``HMMA.16816.F32`` (fp16), and
``IMMA.16832.S8.S8`` (s8).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from ptx_harness import check_ptx, check_ptxas, compiled, nvdisasm  # noqa: F401 (compiled: the fixture)
from ptx_harness import sass as sass_of

THREADS = 32


def _kernel(fmt: str):
    from numba import cuda

    from leverctl_kernels.common import mma

    load_a, load_b, load_c, op, step = {
        "bf16": (mma.load_a_bf16, mma.load_b_bf16, mma.load_c, mma.mma_bf16_16816, mma.K),
        "f16": (mma.load_a_f16, mma.load_b_f16, mma.load_c, mma.mma_f16_16816, mma.K),
        "s8": (mma.load_a_s8, mma.load_b_s8, mma.load_c_s32, mma.mma_s8_16832, mma.K_S8),
    }[fmt]

    @cuda.jit(launch_bounds=(THREADS,))
    def k(A, Bt, C, D):
        r0 = cuda.blockIdx.x * 16
        n0 = cuda.blockIdx.y * 8
        c = load_c(C, r0, n0)
        d0, d1, d2, d3 = c[0], c[1], c[2], c[3]
        for k0 in range(0, A.shape[1], step):
            a = load_a(A, r0, k0)
            b = load_b(Bt, n0, k0)
            d0, d1, d2, d3 = op(a[0], a[1], a[2], a[3], b[0], b[1], d0, d1, d2, d3)
        mma.store_c(D, r0, n0, d0, d1, d2, d3)

    return k


def _ldsm_kernel():
    import numpy as np
    from numba import cuda

    from leverctl_kernels.common import mma

    @cuda.jit(launch_bounds=(THREADS,))
    def k(A, Bt, C, D):
        S = cuda.shared.array((16, 16), np.uint16)
        tid = cuda.threadIdx.x
        for i in range(tid, 256, THREADS):
            S[i // 16, i % 16] = A[i // 16, i % 16]
        cuda.syncthreads()
        a = mma.load_a_ldsm(S, 0, 0)
        b = mma.load_b_bf16(Bt, 0, 0)
        c = mma.load_c(C, 0, 0)
        d = mma.mma_bf16_16816(a[0], a[1], a[2], a[3], b[0], b[1], c[0], c[1], c[2], c[3])
        mma.store_c(D, 0, 0, d[0], d[1], d[2], d[3])

    return k


def jobs():
    """(name, dispatcher, signature, threads per block); runs in the compile
    process."""
    from numba import types

    H, F = types.uint16[:, ::1], types.float32[:, ::1]
    B, I = types.uint8[:, ::1], types.int32[:, ::1]
    out = [(f"mma_{fmt}_tiled", _kernel(fmt), (H, H, F, F), THREADS) for fmt in ("bf16", "f16")]
    return out + [
        ("mma_s8_tiled", _kernel("s8"), (B, B, I, I), THREADS),
        ("mma_bf16_ldsm", _ldsm_kernel(), (H, H, F, F), THREADS),
    ]


PTX_INSTR = {
    "mma_bf16_tiled": "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32",
    "mma_f16_tiled": "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32",
    "mma_s8_tiled": "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32",
    "mma_bf16_ldsm": "ldmatrix.sync.aligned.m8n8.x4.shared.b16",
}
SASS_INSTR = {
    "mma_bf16_tiled": "HMMA.16816.F32.BF16",
    "mma_f16_tiled": "HMMA.16816.F32",
    "mma_s8_tiled": "IMMA.16832.S8.S8",
    "mma_bf16_ldsm": "HMMA.16816.F32.BF16",
}


def test_mma_kernels_compile_for_sm90_in_fp32(compiled):
    assert set(compiled["kernels"]) == set(PTX_INSTR)
    check_ptx(compiled, fp64=False)


def test_the_ptx_has_the_mma_sync_instruction(compiled):
    for name, instr in PTX_INSTR.items():
        ptx = Path(compiled["kernels"][name]["ptx"]).read_text()
        assert instr in ptx, f"{name}: no {instr} in {compiled['kernels'][name]['ptx']}"


def test_ptxas_accepts_the_mma_kernels_without_spills(compiled):
    check_ptxas(compiled)


def test_ptxas_makes_tensor_core_sass_of_the_mma(compiled):
    if not compiled["ptxas"]:
        pytest.skip("ptxas not found (PATH or $CUDA_HOME/bin)")
    disasm = nvdisasm()
    if not disasm:
        pytest.skip("nvdisasm not found (PATH, $CUDA_HOME/bin or the nvidia-cuda-nvdisasm wheel)")
    for name, instr in SASS_INSTR.items():
        sass = sass_of(compiled, name)
        hmma = re.findall(r"\b[HI]MMA\.[\w.]+", sass)
        if name == "mma_bf16_ldsm":
            assert re.search(r"\bLDSM\.16\.M88\.4\b", sass), f"{name}: no LDSM.16.M88.4 in its SASS"
        assert any(h == instr or h.startswith(instr + ".") for h in hmma) and (
            name != "mma_f16_tiled" or not any("BF16" in h for h in hmma)
        ), f"{name}: {hmma} in its SASS"
