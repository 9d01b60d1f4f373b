"""The wgmma form of the W4A16 tensor-core GEMM (``w4a16/gemm/gemm_tc.py``, on
the asynchronous mainloop) compiles for sm_90a without a GPU: its PTX
(compiled by the ``ptx_harness`` for sm_90, then retargeted to sm_90a by
the harness's ``sm90a`` fixture) has the f16
``wgmma.mma_async`` of its tile width and the f16x2 conversion; ptxas for
sm_90a accepts it with no spills, no local memory, registers for the
128-thread block within budget, no advisory that it serialised the wgmma,
and where ``nvdisasm`` is found the SASS holds ``HGMMA.64xNx16.F32`` (fp16:
no ``BF16`` suffix) and no ``HMMA``: a warpgroup path, not a warp one;
the activations arrive by TMA (``UTMALDG.2D``, no ``LDGSTS``), the
dequantised weights by 128-bit ``STS``."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from ptx_harness import check_ptx, check_ptxas, compiled, nvdisasm, sm90a, with_maps  # noqa: F401 (compiled, sm90a: fixtures)
from tc_claims import claim_problems, sass_claims_test

from leverctl_kernels.w4a16.gemm import gemm_tc

TILES = {"gemm_wgmma_bn64": 64, "gemm_wgmma_bn128": 128}


def jobs():
    from numba import types

    f16, u32, f32, u8 = types.float16, types.uint32, types.float32[::1], types.uint8[:, ::1]
    sig = (f16[:, ::1], u32[:, ::1], u32[:, ::1], f16[:, ::1], f32, f32, f32, u8, f32)  # asc, ts_a: unused
    kernels = {name: gemm_tc.kernel(bn, "wgmma") for name, bn in TILES.items()}
    return [(name, k, with_maps(k, sig), gemm_tc.THREADS) for name, k in kernels.items()]


def test_gemm_wgmma_compiles_to_ptx_in_fp32_with_its_instructions(compiled):
    assert set(compiled["kernels"]) == set(TILES)
    check_ptx(compiled, fp64=False)
    for name, bn in TILES.items():
        ptx = Path(compiled["kernels"][name]["ptx"]).read_text()
        n = bn // gemm_tc.WN  # a warpgroup's columns of the tile
        assert f"wgmma.mma_async.sync.aligned.m64n{n}k16.f32.f16.f16" in ptx, name
        assert "cvt.rn.f16x2.f32" in ptx, name
        assert "st.shared.v4.b32" in ptx, name  # 16-byte staging stores


def test_ptxas_for_sm90a_accepts_gemm_wgmma_without_spills_or_serialisation(sm90a):
    check_ptxas(sm90a)
    for name, rec in sm90a["kernels"].items():
        odd = re.findall(r"\(C75\d\d\)[^\n]{0,160}", rec["log"])
        assert not odd, f"{name}: {odd}"


def _sass(sm90a, name: str) -> str:
    disasm = nvdisasm()
    if not disasm:
        pytest.skip("nvdisasm not found (PATH, $CUDA_HOME/bin or the nvidia-cuda-nvdisasm wheel)")
    return subprocess.run([disasm, sm90a["kernels"][name]["cubin"]], check=True, capture_output=True, text=True).stdout


def test_gemm_wgmma_sass_is_hgmma_f16(sm90a):
    for name, bn in TILES.items():
        sass = _sass(sm90a, name)
        gmma = re.findall(r"\bHGMMA\.[\w.]+", sass)
        want = f"HGMMA.64x{bn // gemm_tc.WN}x16.F32"
        assert gmma and all(g == want or g.startswith(want + ".") for g in gmma), (name, gmma)
        assert not any("BF16" in g for g in gmma), (name, gmma)
        assert claim_problems(sass, "wgmma", "f16") == [], name  # what the variant's records say
        assert not re.search(r"\bHMMA\.", sass), f"{name}: warp MMA in a warpgroup kernel"
        assert re.search(r"\bSTS\.128\b", sass), f"{name}: no 16-byte shared stores (the weights' stager)"
        assert re.search(r"\bUTMALDG\.2D\b", sass), f"{name}: activations not copied by TMA"
        assert "LDGSTS" not in sass, f"{name}: a cp.async copy beside the TMA loads"


test_the_sass_holds_what_each_variants_records_claim = sass_claims_test("test_w4a16_wgmma_ptx")


def _loads_after_the_mma(sass: str) -> list[str]:
    """The global loads (``LDG``, not ``LDGSTS``) the mainloop issues from its
    first ``HGMMA`` to its wait for them (``WARPGROUP.DEPBAR``): what the
    loop loads while the tensor cores work."""
    loads, seen = [], False
    for op in re.findall(r"^\s+/\*[0-9a-f]+\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]+)", sass, re.M):
        seen = seen or op.startswith("HGMMA")
        if not seen:
            continue
        if op.startswith("WARPGROUP.DEPBAR"):
            break
        if op.startswith("LDG") and not op.startswith(("LDGSTS", "LDGDEPBAR")):
            loads.append(op)
    return loads


def test_a_stage_of_weights_is_loaded_16_bytes_a_lane_an_iteration_before_it_is_stored(sm90a):
    """The stager deals a stage's weights along K (``wgmma_gemm``'s wide
    form): a lane's 16-byte load brings 32 values of one row, four staged
    chunks, and the loads of the stage after next issue in the mainloop
    while the tensor cores work, before the wait for them, not one chunk's
    load, conversion and store in turn (the loop this replaced waited a
    round trip to memory per chunk, ~3 µs a stage on the H200 at every N)."""
    for name, bn in TILES.items():
        loads = _loads_after_the_mma(_sass(sm90a, name))
        slots = -(-bn * 2 // gemm_tc.THREADS)  # a row's stage is two 16-byte loads
        assert sum(op.startswith("LDG.E.128") for op in loads) >= slots, (name, loads)
