"""The tensor-core W4A16 GEMM (``w4a16/gemm_mma.py``) compiles for sm_90
(H200) without a GPU (``ptx_harness``): no fp64, the ``mma.sync`` fp16
instruction in its PTX, ptxas with no spills or local memory (the fp16
pair view and the nibble view stay in registers), and, where ``nvdisasm``
is found, ``HMMA.16816.F32`` (fp16, not bf16) in the SASS.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from ptx_harness import check_ptx, check_ptxas, compiled, nvdisasm  # noqa: F401 (compiled: the fixture)

PTX_INSTR = "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"
SASS_INSTR = "HMMA.16816.F32"


def jobs():
    """(name, dispatcher, signature, threads per block); runs in the compile
    process."""
    from numba import types

    from leverctl_kernels.w4a16.gemm import gemm_mma

    f16, u16, u32 = types.float16, types.uint16, types.uint32
    sig = (f16[:, ::1], u16[:, ::1], u32[:, ::1], f16[:, ::1])
    return [
        ("gemm_mma_16x16", gemm_mma.kernel(2), sig, gemm_mma.THREADS),
        ("gemm_mma", gemm_mma.kernel(1), sig, gemm_mma.THREADS),
    ]


def test_gemm_mma_compiles_for_sm90_in_fp32(compiled):
    assert set(compiled["kernels"]) == {"gemm_mma", "gemm_mma_16x16"}
    check_ptx(compiled, fp64=False)


def test_gemm_mma_ptx_has_the_fp16_mma_sync(compiled):
    for name, rec in compiled["kernels"].items():
        count = Path(rec["ptx"]).read_text().count(PTX_INSTR)
        assert count >= (2 if name.endswith("16x16") else 1), f"{name}: {count} x {PTX_INSTR} in {rec['ptx']}"


def test_ptxas_accepts_gemm_mma_without_spills(compiled):
    check_ptxas(compiled)


def test_gemm_mma_sass_has_the_fp16_hmma(compiled, tmp_path):
    if not compiled["ptxas"]:
        pytest.skip("ptxas not found (PATH or $CUDA_HOME/bin)")
    disasm = nvdisasm()
    if not disasm:
        pytest.skip("nvdisasm not found (PATH, $CUDA_HOME/bin or the nvidia-cuda-nvdisasm wheel)")
    for name, rec in compiled["kernels"].items():
        cubin = tmp_path / f"{name}.cubin"
        subprocess.run(
            [compiled["ptxas"], "-arch=sm_90", "-o", str(cubin), rec["ptx"]], check=True, capture_output=True
        )
        sass = subprocess.run([disasm, str(cubin)], check=True, capture_output=True, text=True).stdout
        hmma = re.findall(r"\bHMMA\.[\w.]+", sass)
        assert hmma and all(h == SASS_INSTR or h.startswith(SASS_INSTR + ".") for h in hmma), (name, hmma)
        assert not any("BF16" in h for h in hmma), (name, hmma)
