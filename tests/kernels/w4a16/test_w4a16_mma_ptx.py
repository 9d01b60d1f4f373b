"""The mma.sync form of the W4A16 tensor-core GEMM (``w4a16/gemm/gemm_tc.py``
on ``common/gemm/mma_sync.py``), at both variants' tiles, compiles for
sm_90 without a GPU (``ptx_harness``): no fp64; in the PTX the fp16
``mma.sync`` m16n8k16, ``ldmatrix.x4``, ``cp.async`` and the f16x2
conversion, and neither wgmma nor the async-proxy fence (so it assembles
for sm_86 too, which the form is for); ptxas with no spills, stack or
local memory; and, where ``nvdisasm`` is found, SASS with
``HMMA.16816.F32`` (fp16, not bf16) and no warpgroup MMA, ``LDSM`` for the
operands, the activations by 128-bit ``LDGSTS`` and the dequantised
weights by 128-bit ``STS``."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from ptx_harness import assemble, check_ptx, check_ptxas, compiled, nvdisasm  # noqa: F401 (compiled: the fixture)
from ptx_harness import sass as sass_of
from tc_claims import claim_problems, sass_claims_test

from leverctl_kernels.w4a16.gemm import gemm_tc

TILES = {"gemm_tc_mma_sync_bn128": 128, "gemm_tc_mma_sync_bn64": 64}  # slowest first
PTX_MMA = "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"
PTX_LDSM = "ldmatrix.sync.aligned.m8n8.x4.shared.b16"
SASS_MMA = "HMMA.16816.F32"


def jobs():
    from numba import types

    f16, u32, f32, u8 = types.float16, types.uint32, types.float32[::1], types.uint8[:, ::1]
    sig = (f16[:, ::1], u32[:, ::1], u32[:, ::1], f16[:, ::1], f32, f32, f32, u8, f32)  # asc, ts_a: unused
    return [(name, gemm_tc.kernel(bn, "mma.sync"), sig, gemm_tc.THREADS) for name, bn in TILES.items()]


def test_the_mma_sync_kernels_compile_for_sm90_in_fp32_with_their_instructions(compiled):
    assert set(compiled["kernels"]) == set(TILES)
    check_ptx(compiled, fp64=False)
    for name, bn in TILES.items():
        ptx = Path(compiled["kernels"][name]["ptx"]).read_text()
        # per k16 step of a warp (its warpgroup's n = BN / WN columns): n / 8 MMAs sharing one A
        # fragment, 1 + n / 16 ldmatrix.x4
        n = bn // gemm_tc.WN
        assert ptx.count(PTX_MMA) >= n // 8, (name, ptx.count(PTX_MMA))
        assert ptx.count(PTX_LDSM) >= 1 + n // 16, (name, ptx.count(PTX_LDSM))
        assert "cp.async.cg.shared.global" in ptx, name
        assert "cvt.rn.f16x2.f32" in ptx and "st.shared.v4.b32" in ptx, name  # the weights' stager
        assert ".bf16" not in ptx, name
        assert "wgmma.mma_async" not in ptx and "wgmma.fence" not in ptx and "fence.proxy.async" not in ptx, name


def test_ptxas_accepts_them_without_spills_or_local_memory(compiled):
    check_ptxas(compiled)


def test_they_assemble_for_sm86_too(compiled, tmp_path):
    """The form serves GPUs without wgmma: the same PTX, retargeted to
    sm_86, assembles there without spills."""
    if not compiled["ptxas"]:
        pytest.skip("ptxas not found (PATH or $CUDA_HOME/bin)")
    for name, rec in compiled["kernels"].items():
        src = tmp_path / f"{name}.sm86.ptx"
        text = Path(rec["ptx"]).read_text()
        src.write_text(re.sub(r"^\.target sm_90$", ".target sm_86", text, flags=re.M))
        got = assemble(compiled["ptxas"], src, "sm_86")
        assert got["rc"] == 0, (name, got["log"][-2000:])
        assert got["spill"] == 0 and got["lmem"] == 0 and got["stack"] == 0, (name, got["log"])


def _sass(compiled) -> dict[str, str]:
    return {name: sass_of(compiled, name) for name in compiled["kernels"]}


def test_their_sass_is_fp16_hmma_from_ldsm_on_async_copies(compiled):
    for name, sass in _sass(compiled).items():
        bn = TILES[name]
        hmma = re.findall(r"\bHMMA\.[\w.]+", sass)
        assert len(hmma) >= bn // gemm_tc.WN // 8, (name, hmma)
        assert all(h == SASS_MMA or h.startswith(SASS_MMA + ".") for h in hmma), (name, hmma)
        assert not any("BF16" in h for h in hmma), (name, hmma)
        assert not re.search(r"\b[HQ]GMMA\.", sass), f"{name}: warpgroup MMA in a warp kernel"
        ld = re.findall(r"\bLDSM\.[\w.]+", sass)
        assert ld and all(x.startswith("LDSM.16.M88.4") for x in ld), (name, ld)
        assert re.search(r"\bLDGSTS\.E\.BYPASS(\.\w+)*\.128\b", sass), f"{name}: activations not copied by cp.async"
        assert re.search(r"\bSTS\.128\b", sass), f"{name}: no 16-byte shared stores (the weights' stager)"
        assert not re.search(r"\b(LDL|STL)\b", sass), f"{name}: local memory in the SASS"
        assert claim_problems(sass, "mma.sync", "f16") == [], name  # what the variants' launches say


test_the_sass_holds_what_each_variants_records_claim = sass_claims_test("test_w4a16_mma_ptx")
