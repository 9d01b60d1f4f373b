"""The attention projection kernels compile for sm_90a without a GPU: their
PTX (compiled by the ``ptx_harness`` for sm_90, retargeted to sm_90a as
``test_wgmma_ptx`` does) is free of fp64 and has the wgmma of its type and
tile width; ptxas for sm_90a accepts every kernel with no spills, no local
memory, registers for the block within budget and no advisory that it
serialised the wgmma; and, where ``nvdisasm`` is found, the SASS holds what
each variant's records claim (``tc_claims.CLAIM_JOBS``): HGMMA .BF16 for
the BF16 variants, QGMMA .E4M3 for the FP8 ones, HMMA .BF16 for the BF16
variants' mma.sync form (compiled here too: no wgmma or async fence in it,
so it assembles for sm_80 as well). The activations' crush and bf16 to
fp16 conversion have wide forms: 16-byte loads, a lane's codes (8 bytes)
or converted values (16) one store."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from ptx_harness import check_ptx, check_ptxas, compiled, nvdisasm, sm90a, with_maps  # noqa: F401 (compiled, sm90a: fixtures)
from tc_claims import check_claims

# job -> (variant module whose TILE it is, under leverctl_kernels.attention; the wgmma instruction its PTX must hold)
GEMMS = {
    "proj_bf16_tc": ("proj_bf16_tc.bf16_tc", "m64n64k16.f32.bf16.bf16"),  # 64 x 128 tiles, two warpgroups
    "proj_fp8_e4m3": ("proj_bf16_tc.fp8_e4m3", "m64n64k32.f32.e4m3.e4m3"),
    "proj_bf16_n128": ("proj_bf16_tc_w4a16.bf16_n128", "m64n128k16.f32.bf16.bf16"),
    "proj_fp8_m16": ("proj_fp8.m16", "m64n16k32.f32.e4m3.e4m3"),
    "proj_fp8_m32": ("proj_fp8.m32", "m64n32k32.f32.e4m3.e4m3"),
}
# B as it is (TMA fills both tiles); the others stage B through registers (st.shared.v4)
PLAIN_B = {"proj_fp8_m16", "proj_fp8_m32"}
NVFP4_B = {"proj_bf16_tc", "proj_fp8_e4m3"}  # B staged from NVFP4
# the BF16 variants' form without wgmma: mma.sync on the same staged tiles
MMA_SYNC = {"proj_bf16_tc_mma": "proj_bf16_tc.bf16_tc", "proj_bf16_n128_mma": "proj_bf16_tc_w4a16.bf16_n128"}


def jobs():
    import importlib

    from numba import types

    from leverctl_kernels.attention import _proj_prep
    from leverctl_kernels.common.gemm import wgmma_async as G

    A = lambda dt, nd: types.Array(dt, nd, "C")  # noqa: E731
    u8, u16, u32, f16, f32 = types.uint8, types.uint16, types.uint32, types.float16, types.float32
    bsc = {"nvfp4_bf16": A(u8, 2), "nvfp4_e4m3": A(u8, 2), "int4_bf16": A(f16, 2), "copy": A(f32, 1)}
    out = []
    for name, mod, form in [(n, m, "wgmma") for n, (m, _i) in GEMMS.items()] + [
        (n, m, "mma.sync") for n, m in MMA_SYNC.items()
    ]:
        variant = importlib.import_module(f"leverctl_kernels.attention.{mod}")
        tile = variant.TILE
        b_kind = tile.get("b_kind", "copy")
        y = A(f16, 2) if b_kind == "int4_bf16" else A(f32, 2)
        sig = (y, A(u32, 2), A(u32, 2), bsc[b_kind], A(f32, 1), A(f32, 1), A(f32, 1), A(u8, 2), A(f32, 1))
        # the wgmma mainloop copies A (and a plain B) by TMA, the mma.sync one by cp.async
        kern = G.kernel(**tile) if "stages" in tile else G.kernel_for(tile, variant.STAGES, form)
        out.append((name, kern, with_maps(kern, sig), 128 * tile["wgs"]))
    out.append(
        ("proj_quant_e4m3", _proj_prep.quant_kernel(), (A(u16, 2), A(f32, 1), A(u16, 2)), _proj_prep.QUANT_THREADS)
    )
    out.append(("proj_bf16_to_f16", _proj_prep.bf16_to_f16, (A(u32, 2), A(u32, 2)), _proj_prep.CONVERT_THREADS))
    wide = (A(types.uint64, 2), A(f32, 1), A(u16, 2))  # a lane's eight codes one uint64
    out.append(("proj_quant_e4m3_wide", _proj_prep.quant_kernel(True), wide, _proj_prep.QUANT_THREADS))
    out.append(
        ("proj_bf16_to_f16_wide", _proj_prep.bf16_to_f16_wide, (A(u32, 2), A(u32, 2)), _proj_prep.CONVERT_THREADS)
    )
    return out


def test_proj_kernels_compile_to_ptx_in_fp32_with_their_instructions(compiled):
    prep = {"proj_quant_e4m3", "proj_bf16_to_f16", "proj_quant_e4m3_wide", "proj_bf16_to_f16_wide"}
    assert set(compiled["kernels"]) == {*GEMMS, *MMA_SYNC, *prep}
    check_ptx(compiled, fp64=False)
    for name, (_mod, instr) in GEMMS.items():
        ptx = Path(compiled["kernels"][name]["ptx"]).read_text()
        assert f"wgmma.mma_async.sync.aligned.{instr}" in ptx, name
        # every wgmma GEMM is on the asynchronous mainloop (common/gemm/wgmma_async.py), its copies by TMA
        assert "cp.async.bulk.tensor.2d" in ptx and "cp.async.cg.shared.global" not in ptx, name
        assert ("st.shared.v4.b32" in ptx) == (name not in PLAIN_B), name
        if name in NVFP4_B:  # the NVFP4 weights along K: 32 values a lane's 16-byte load
            assert "ld.global.nc.v4.u32" in ptx, name
    for name in MMA_SYNC:  # the warp form: no wgmma, no async-proxy fence (sm_80 has neither)
        ptx = Path(compiled["kernels"][name]["ptx"]).read_text()
        assert "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32" in ptx, name
        assert "ldmatrix.sync.aligned.m8n8.x4.shared.b16" in ptx, name
        assert "cp.async.cg.shared.global" in ptx, name
        assert "wgmma.mma_async" not in ptx and "fence.proxy.async" not in ptx, name
    quant = Path(compiled["kernels"]["proj_quant_e4m3"]["ptx"]).read_text()
    assert "cvt.rn.satfinite.e4m3x2.f32" in quant
    wide = Path(compiled["kernels"]["proj_quant_e4m3_wide"]["ptx"]).read_text()  # 16 bytes a lane, 8 codes a store
    assert "cvt.rn.satfinite.e4m3x2.f32" in wide and "ld.global.nc.v4.u32" in wide and "st.global.u64" in wide
    conv = Path(compiled["kernels"]["proj_bf16_to_f16_wide"]["ptx"]).read_text()  # 16 bytes a thread, both ways
    assert "ld.global.nc.v4.u32" in conv and "st.global.v4.b32" in conv


def test_ptxas_for_sm90a_accepts_them_without_spills_or_serialisation(sm90a):
    check_ptxas(sm90a)
    for name, rec in sm90a["kernels"].items():
        odd = re.findall(r"\(C75\d\d\)[^\n]{0,160}", rec["log"])
        assert not odd, f"{name}: {odd}"


def test_the_sass_holds_what_each_variants_records_claim(compiled):
    """``tc_claims.CLAIM_JOBS``'s kernels of this module, assembled for
    sm_90a, hold the opcode of their variant's (form, tc_dtype) claim."""
    disasm = nvdisasm()
    if not compiled["ptxas"] or not disasm:
        pytest.skip("ptxas or nvdisasm not found")
    assert check_claims("test_projections_ptx", compiled) == len(GEMMS) + len(MMA_SYNC)
