"""The dense-FFN prefill's warpgroup-MMA kernels compile for sm_90a without
a GPU: their PTX (compiled by the ``ptx_harness`` for sm_90, retargeted to
sm_90a by the harness's ``sm90a`` fixture) has the bf16 (BF16 arms) or E4M3 (FP8
M64) ``wgmma.mma_async`` of the tile's width and the conversion of the
weights (FP8: 16 bytes a load, and a column's group scales a window of
four at a time); ptxas for sm_90a
accepts it with no spills or local memory and no advisory that it serialised
the wgmma; and where ``nvdisasm`` is found the SASS holds what the variant's
records claim (``tc_claims``: ``wgmma`` / ``bf16`` is
``HGMMA.64xNx16.F32.BF16``; ``wgmma`` / ``e4m3`` is
``QGMMA.64xNx32.F32.E4M3.E4M3``) and no warp MMA."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from ptx_harness import check_ptx, check_ptxas, compiled, nvdisasm, sm90a, with_maps  # noqa: F401 (compiled, sm90a: fixtures)
from tc_claims import claim_problems, sass_claims_test

# kernel -> variant; the instruction's N is the variant module's BN over its warpgroups along it (WN)
KERNELS = {"bf16_v1_gemm": "bf16_v1", "bf16_v2_gemm": "bf16_v2", "w4a4_gemm": "w4a4"}
FP8 = "fp8_m64_gemm"


def jobs():
    import importlib

    from numba import types

    from leverctl_kernels.ffn.prefill import _wgmma_bf16

    f16, u32, f32v = types.float16, types.uint32, types.float32[::1]
    u8 = types.uint8
    sig = (f16[:, ::1], u32[:, ::1], u32[:, ::1], f16[:, ::1], f32v, f32v, f32v, u8[:, ::1], f32v)  # the mainloop's
    out = []
    for name, variant in KERNELS.items():
        if variant == "w4a4":
            continue
        mod = importlib.import_module(f"leverctl_kernels.ffn.prefill.{variant}")
        kern = _wgmma_bf16.kernel(mod.WGS, mod.BN, getattr(mod, "WN", 1))
        out.append((name, kern, with_maps(kern, sig), kern.threads))
    from leverctl_kernels.ffn.prefill import w4a4

    w4a4_sig = (f16[:, ::1], u32[:, ::1], u32[:, ::1], u8[:, ::1], f32v, f32v, f32v, u8[:, ::1], f32v)
    out.append(("w4a4_gemm", w4a4.kernel(), w4a4_sig, 128 * w4a4.WGS))
    from leverctl_kernels.ffn.prefill import fp8_m64

    kern = fp8_m64.kernel()
    out.append((FP8, kern, with_maps(kern, sig), fp8_m64.THREADS))  # the same mainloop signature
    return out


def _bn(name: str) -> int:
    """The N of a warpgroup's instruction: the tile's columns over the warpgroups along them."""
    import importlib

    mod = importlib.import_module(f"leverctl_kernels.ffn.prefill.{KERNELS.get(name, name)}")
    return mod.BN // getattr(mod, "WN", 1)


def test_bf16_gemms_compile_to_ptx_in_fp32_with_their_instructions(compiled):
    assert set(compiled["kernels"]) == {*KERNELS, FP8}
    check_ptx(compiled, fp64=False)
    for name in KERNELS:
        ptx = Path(compiled["kernels"][name]["ptx"]).read_text()
        assert f"wgmma.mma_async.sync.aligned.m64n{_bn(name)}k16.f32.bf16.bf16" in ptx, name
        assert "cvt.rn.bf16x2.f32" in ptx, name  # BF16: the int4 weights; W4A4: both NVFP4 operands
        assert "st.shared.v4.b32" in ptx, name
    ptx = Path(compiled["kernels"][FP8]["ptx"]).read_text()
    assert f"wgmma.mma_async.sync.aligned.m64n{_bn('fp8_m64')}k32.f32.e4m3.e4m3" in ptx
    assert "cvt.rn.satfinite.e4m3x2.f32" in ptx and "st.shared.v4.b32" in ptx
    assert "ld.global.nc.v4.u32" in ptx  # the int4 weights, 32 values a lane's load
    assert "ld.global.nc.v2.u32" in ptx  # a column's window of four group scales, 8 bytes


def test_ptxas_for_sm90a_accepts_them_without_spills_or_serialisation(sm90a):
    check_ptxas(sm90a)
    for name, rec in sm90a["kernels"].items():
        odd = re.findall(r"\(C75\d\d\)[^\n]{0,160}", rec["log"])
        assert not odd, f"{name}: {odd}"


def test_their_sass_is_what_the_records_claim(sm90a):
    disasm = nvdisasm()
    if not disasm:
        pytest.skip("nvdisasm not found (PATH, $CUDA_HOME/bin or the nvidia-cuda-nvdisasm wheel)")
    from leverctl_kernels.ffn.prefill.spec import PATH as PREFILL

    for name, variant in KERNELS.items():
        sass = subprocess.run(
            [disasm, sm90a["kernels"][name]["cubin"]], check=True, capture_output=True, text=True
        ).stdout
        claim = PREFILL.variants[variant].tensor_cores
        assert claim == "wgmma"
        assert claim_problems(sass, claim, "bf16") == [], (name, claim_problems(sass, claim, "bf16"))
        assert claim_problems(sass, claim, "f16"), f"{name}: a wrong claim (f16) would pass"
        gmma = re.findall(r"\bHGMMA\.[\w.]+", sass)
        assert all(g.startswith(f"HGMMA.64x{_bn(name)}x16.F32.BF16") for g in gmma), (name, gmma)
        assert not re.search(r"\bHMMA\.", sass), f"{name}: warp MMA in a warpgroup kernel"
        if name != "w4a4_gemm":  # bf16 v1/v2: the activations by TMA, a stage's tile a copy
            assert re.search(r"\bUTMALDG\.2D\b", sass) and "LDGSTS" not in sass, name
    sass = subprocess.run([disasm, sm90a["kernels"][FP8]["cubin"]], check=True, capture_output=True, text=True).stdout
    assert PREFILL.variants["fp8_m64"].tensor_cores == "wgmma"
    assert claim_problems(sass, "wgmma", "e4m3") == [], claim_problems(sass, "wgmma", "e4m3")
    assert claim_problems(sass, "mma.sync", "e4m3-via-f16"), "a warp-MMA claim would pass"
    qgmma = re.findall(r"\bQGMMA\.[\w.]+", sass)
    assert qgmma and all(q.startswith(f"QGMMA.64x{_bn('fp8_m64')}x32.F32.E4M3.E4M3") for q in qgmma), qgmma


test_the_sass_holds_what_each_variants_records_claim = sass_claims_test("test_ffn_prefill_wgmma_ptx")
