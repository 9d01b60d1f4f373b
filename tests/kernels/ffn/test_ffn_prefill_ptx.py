"""The dense-FFN prefill kernels compile for sm_90 (H200) without a GPU
(``ptx_harness``): no fp64, no spills, stack or local memory, registers and
static shared memory within an SM's. The mma.sync forms of the wgmma arms
(BF16 v1/v2, W4A4) have ``mma.sync.m16n8k16`` bf16 and no wgmma, and their
SASS ``HMMA.16816.F32.BF16``. The int8 GEMMs', the Q4_K MMQ's and the NVFP4 MMQ's PTX has the s8
``mma.sync.m16n8k32``, and where ``nvdisasm`` is found their SASS holds what
their records claim (``tc_claims``: ``mma.sync`` / ``s8`` is
``IMMA.16832.S8.S8``); the row quantisers (int8, and E4M3 through ``cvt.rn.satfinite.e4m3x2.f32``)
have no tensor-core opcode, and their wide forms (and the Q4_K arm's block
quantiser's) read the rows 16 bytes a lane and store a lane's eight codes
at once."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from ptx_harness import check_ptx, check_ptxas, compiled, nvdisasm  # noqa: F401 (compiled: the fixture)
from ptx_harness import sass as sass_of
from tc_claims import claim_problems, sass_claims_test

# name -> (tensor_cores, tc_dtype) its variant's records claim
CLAIMS = {
    "int8_faith2_gemm": ("mma.sync", "s8"),
    "int8_faith5_gemm": ("mma.sync", "s8"),
    "q4k_mmq": ("mma.sync", "s8"),
    "q8_blocks": (None, None),
    "q8_blocks_wide": (None, None),
    "nvfp4_mmq": ("mma.sync", "s8"),
    "nvfp4_row_amax": (None, None),
    "nvfp4_encode": (None, None),
    "rowquant_int8": (None, None),
    "rowquant_e4m3": (None, None),
    "rowquant_int8_wide": (None, None),
    "rowquant_e4m3_wide": (None, None),
    # the wgmma arms' form for GPUs without wgmma (``_mma_forms``)
    "bf16_v1_gemm_mma": ("mma.sync", "bf16"),
    "bf16_v2_gemm_mma": ("mma.sync", "bf16"),
    "w4a4_gemm_mma": ("mma.sync", "bf16"),
}
MMA_FORMS = {
    "bf16_v1_gemm_mma": ("bf16_v1", "int4_bf16"),
    "bf16_v2_gemm_mma": ("bf16_v2", "int4_bf16"),
    "w4a4_gemm_mma": ("w4a4", "nvfp4_bf16"),
}


def jobs():
    from numba import types

    from leverctl_kernels.common import nvfp4_act
    from leverctl_kernels.common import rowquant as _rowquant
    from leverctl_kernels.ffn.prefill import int8_faith2, int8_faith5, nvfp4_mmq, q4k_mmq, q8_blocks

    f16, f32, i8 = types.float16, types.float32, types.int8
    out = []
    u8_, u32_ = types.uint8, types.uint32
    for name, mod in (("int8_faith2_gemm", int8_faith2), ("int8_faith5_gemm", int8_faith5)):
        sig = (f16[:, ::1], u32_[:, ::1], u32_[:, ::1], i8[:, ::1], f32[::1], f32[::1], f32[::1], u8_[:, ::1], f32[::1])
        out.append((name, int8_faith2.kernel(mod.WGS, mod.BN, wn=getattr(mod, "WN", 1)), sig, 128 * mod.WGS))
    out.append(
        ("rowquant_int8", _rowquant.make_rowquant("int8"), (i8[:, ::1], f32[::1], f16[:, ::1]), _rowquant.THREADS)
    )
    out.append(
        (
            "rowquant_e4m3",
            _rowquant.make_rowquant("e4m3"),
            (types.uint8[:, ::1], f32[::1], f16[:, ::1]),
            _rowquant.THREADS,
        )
    )
    for fmt in ("int8", "e4m3"):  # fp16 rows of whole 16-byte units: a lane's 8 codes one uint64
        sig = (types.uint64[:, ::1], f32[::1], f16[:, ::1])
        out.append((f"rowquant_{fmt}_wide", _rowquant.make_rowquant(fmt, 2), sig, _rowquant.THREADS))
    u8 = types.uint8
    out.append(
        (
            "q4k_mmq",
            q4k_mmq.kernel(),
            (f16[:, ::1], u32_[:, ::1], u32_[:, ::1], u32_[:, ::1], *(f32[::1],) * 3, types.uint64[:, ::1], f32[::1]),
            q4k_mmq.THREADS,
        )
    )
    out.append(
        (
            "q8_blocks",
            q8_blocks.make_q8_blocks(),
            (i8[:, ::1], types.uint64[:, ::1], f16[:, ::1]),
            q8_blocks.THREADS,
        )
    )
    q8_sig = (types.uint64[:, ::1], types.uint64[:, ::1], f16[:, ::1])  # fp16 rows: a lane's 8 codes one uint64
    out.append(("q8_blocks_wide", q8_blocks.make_q8_blocks(2), q8_sig, q8_blocks.THREADS))
    out.append(("nvfp4_row_amax", nvfp4_act.make_row_amax(), (f32[::1], f16[:, ::1]), nvfp4_act.THREADS))
    out.append(
        (
            "nvfp4_encode",
            nvfp4_act.make_encode(),
            (u32_[:, ::1], u8[:, ::1], f32[::1], f16[:, ::1], f32[::1]),
            nvfp4_act.THREADS,
        )
    )
    import importlib

    from leverctl_kernels.ffn.prefill import _mma_forms, w4a4

    u32 = types.uint32
    for name, (variant, b_kind) in MMA_FORMS.items():
        mod = importlib.import_module(f"leverctl_kernels.ffn.prefill.{variant}")
        wgs, bn = (getattr(mod, "WGS", 1), mod.BN)
        bsc = f16[:, ::1] if b_kind == "int4_bf16" else u8[:, ::1]
        wn = getattr(mod, "WN", 1)
        kern = w4a4.kernel("mma.sync") if variant == "w4a4" else _mma_forms.kernel(b_kind, wgs, bn, wn)
        sig = (f16[:, ::1], u32[:, ::1], u32[:, ::1], bsc, f32[::1], f32[::1], f32[::1], u8[:, ::1], f32[::1])
        out.append((name, kern, sig, 128 * wgs))
    out.append(
        (
            "nvfp4_mmq",
            nvfp4_mmq.kernel(),
            (f16[:, ::1], u32[:, ::1], u32[:, ::1], u8[:, ::1], f32[::1], f32[::1], f32[::1], u8[:, ::1], f32[::1]),
            nvfp4_mmq.THREADS,
        )
    )
    return out


def test_ffn_prefill_kernels_compile_for_sm90_in_fp32(compiled):
    assert set(compiled["kernels"]) == set(CLAIMS)
    check_ptx(compiled, fp64=False)
    for name in ("int8_faith2_gemm", "int8_faith5_gemm", "q4k_mmq", "nvfp4_mmq"):
        ptx = Path(compiled["kernels"][name]["ptx"]).read_text()
        assert "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32" in ptx, name
    for name in MMA_FORMS:  # no wgmma and no async-proxy fence: it assembles for sm_80 too
        ptx = Path(compiled["kernels"][name]["ptx"]).read_text()
        assert "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32" in ptx, name
        assert "wgmma.mma_async" not in ptx and "fence.proxy.async" not in ptx, name
    assert "cvt.rn.satfinite.e4m3x2.f32" in Path(compiled["kernels"]["rowquant_e4m3"]["ptx"]).read_text()
    wide = ("rowquant_int8_wide", "rowquant_e4m3_wide", "q8_blocks_wide")
    # q4k_mmq: a Q4_K stage's 4-bit values and each super-block's 16-byte header (d, dmin, the
    # 12 scale bytes) 16 bytes a load, where the byte loads of the header were seven; nvfp4_mmq:
    # the weights' stage 32 codes a lane's 16-byte load, where a chunk was two 32-bit loads
    for name in ("nvfp4_row_amax", "nvfp4_encode", "q4k_mmq", "nvfp4_mmq", *wide):
        assert "ld.global.nc.v4.u32" in Path(compiled["kernels"][name]["ptx"]).read_text(), name  # 16 bytes a lane
    for name in wide:  # and a lane's eight codes one 8-byte store
        assert "st.global.u64" in Path(compiled["kernels"][name]["ptx"]).read_text(), name


def test_ptxas_accepts_them_without_spills(compiled):
    check_ptxas(compiled)


def test_their_sass_holds_what_the_records_claim(compiled):
    if not compiled["ptxas"]:
        pytest.skip("ptxas not found (PATH or $CUDA_HOME/bin)")
    disasm = nvdisasm()
    if not disasm:
        pytest.skip("nvdisasm not found (PATH, $CUDA_HOME/bin or the nvidia-cuda-nvdisasm wheel)")
    from leverctl_kernels.ffn.prefill.spec import PATH as PREFILL

    assert PREFILL.variants["int8_faith2"].tensor_cores == CLAIMS["int8_faith2_gemm"][0]
    assert PREFILL.variants["q4k_mmq"].tensor_cores == CLAIMS["q4k_mmq"][0]
    assert PREFILL.variants["nvfp4_mmq"].tensor_cores == CLAIMS["nvfp4_mmq"][0]
    for name, (form, dtype) in CLAIMS.items():
        sass = sass_of(compiled, name)
        assert claim_problems(sass, form, dtype) == [], (name, claim_problems(sass, form, dtype))
        if dtype == "s8":
            assert claim_problems(sass, "mma.sync", "bf16"), f"{name}: a wrong claim (bf16) would pass"
            imma = re.findall(r"\bIMMA\.16832\.S8\.S8\b", sass)
            assert len(imma) >= 2, (name, imma)  # two n8 MMAs per k32 step


test_the_sass_holds_what_each_variants_records_claim = sass_claims_test("test_ffn_prefill_ptx")
