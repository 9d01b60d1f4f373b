"""The mma.sync kernels of the ``w4a16.gemm`` variants (``small_m`` at each
of its row counts, ``default_tiles``) compile for sm_90 without a GPU
(``ptx_harness``): no fp64; the fp16 ``mma.sync`` in the PTX, one per
MMA of the unrolled K step; ptxas with no spills, stack or local memory
(accumulators, fragments and the fp16-pair views all in registers) and
registers within what the block may have; and, where ``nvdisasm`` is
found, ``HMMA.16816.F32`` (fp16, not bf16) in the SASS, plus ``LDSM``
(``ldmatrix.x4``) where the kernel stages A in shared memory.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from ptx_harness import check_ptx, check_ptxas, compiled, nvdisasm  # noqa: F401 (compiled: the fixture)
from tc_claims import claim_problems, sass_claims_test

PTX_MMA = "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"
PTX_LDSM = "ldmatrix.sync.aligned.m8n8.x4.shared.b16"
SASS_MMA = "HMMA.16816.F32"

# name -> (MMAs per K step of one warp, ldmatrix per K step)
EXPECT = {
    "gemm_tc_tiles": (8, 4),
    "gemm_tc_small_m_wm4": (8, 0),
    "gemm_tc_small_m_wm2": (4, 0),
    "gemm_tc_small_m_wm1": (2, 0),
}
# The most registers a thread may use: none of these blocks may be kept
# from two per SM by its registers (128 threads x 2 x 128 <= 65536 / 2).
MAX_REGS = 128


def jobs():
    """(name, dispatcher, signature, threads per block), slowest first; runs
    in the compile process."""
    from numba import types

    from leverctl_kernels.w4a16.gemm import gemm_mma

    f16, u32, u64 = types.float16, types.uint32, types.uint64
    sig = (f16[:, ::1], u32[:, ::1], u64[:, ::1], f16[:, ::1])
    tiles = gemm_mma.make_gemm_tiles()
    out = [("gemm_tc_tiles", tiles, sig, tiles.threads)]
    for wm in (4, 2, 1):
        k = gemm_mma.make_gemm_small_m(wm)
        out.append((f"gemm_tc_small_m_wm{wm}", k, sig, k.threads))
    return out


def test_the_variant_kernels_compile_for_sm90_in_fp32(compiled):
    assert set(compiled["kernels"]) == set(EXPECT)
    check_ptx(compiled, fp64=False)


def test_their_ptx_has_the_fp16_mma_sync_and_ldmatrix_where_staged(compiled):
    for name, rec in compiled["kernels"].items():
        ptx = Path(rec["ptx"]).read_text()
        mmas, ldsm = EXPECT[name]
        assert ptx.count(PTX_MMA) >= mmas, f"{name}: {ptx.count(PTX_MMA)} x {PTX_MMA}"
        assert ".bf16" not in ptx, name
        assert (ptx.count(PTX_LDSM) >= ldsm) and (ldsm or PTX_LDSM not in ptx), (name, ptx.count(PTX_LDSM))


def test_ptxas_accepts_them_without_spills_and_within_the_register_budget(compiled):
    check_ptxas(compiled)
    for name, rec in compiled["kernels"].items():
        assert rec["regs"] <= MAX_REGS, f"{name}: {rec['regs']} registers"


def _sass(compiled, tmp_path) -> dict[str, str]:
    if not compiled["ptxas"]:
        pytest.skip("ptxas not found (PATH or $CUDA_HOME/bin)")
    disasm = nvdisasm()
    if not disasm:
        pytest.skip("nvdisasm not found (PATH, $CUDA_HOME/bin or the nvidia-cuda-nvdisasm wheel)")
    out = {}
    for name, rec in compiled["kernels"].items():
        cubin = tmp_path / f"{name}.cubin"
        subprocess.run(
            [compiled["ptxas"], "-arch=sm_90", "-o", str(cubin), rec["ptx"]], check=True, capture_output=True
        )
        out[name] = subprocess.run([disasm, str(cubin)], check=True, capture_output=True, text=True).stdout
    return out


def test_their_sass_has_the_fp16_hmma_and_ldsm(compiled, tmp_path):
    for name, sass in _sass(compiled, tmp_path).items():
        hmma = re.findall(r"\bHMMA\.[\w.]+", sass)
        mmas, ldsm = EXPECT[name]
        assert len(hmma) >= mmas, (name, hmma)
        assert all(h == SASS_MMA or h.startswith(SASS_MMA + ".") for h in hmma), (name, hmma)
        assert not any("BF16" in h for h in hmma), (name, hmma)
        ld = re.findall(r"\bLDSM\.[\w.]+", sass)
        if ldsm:
            assert ld and all(x.startswith("LDSM.16.M88.4") for x in ld), (name, ld)
        else:
            assert not ld, (name, ld)
        assert not re.search(r"\b(LDL|STL)\b", sass), f"{name}: local memory in the SASS"
        assert claim_problems(sass, "mma.sync", "f16") == [], name  # what the variant's launches say


test_the_sass_holds_what_each_variants_records_claim = sass_claims_test("test_w4a16_gemm_tc_ptx")
