"""The MoE prefill kernels compile for sm_90 (H200) without a GPU
(``ptx_harness``): every grouped-GEMM configuration a variant launches
(schedule, gather, activation, activation and weight formats), the sort,
the scratch zeroing and the combine. No fp64, no spills, stack or local
memory (the micro-tiles' accumulators stay in registers), registers and
static shared memory within an SM's. None of them claims tensor cores, and
where ``nvdisasm`` is found their SASS holds no tensor-core opcode
(``tc_claims``: a null claim)."""
from __future__ import annotations

import pytest
from ptx_harness import check_ptx, check_ptxas, compiled, nvdisasm  # noqa: F401 (compiled: the fixture)
from tc_claims import claim_problems, sass_sm90a


def jobs():
    from numba import types

    from leverctl_kernels.moe_prefill import _grouped as G, _route

    f16, f32, i32, u8 = types.float16, types.float32, types.int32, types.uint8
    idx = (i32[::1], i32[::1], types.int32)
    nvfp4_w = (u8[:, :, ::1], u8[:, :, ::1], f32[::1])
    e4m3_w = (u8[:, :, ::1], f32[:, ::1], f32[::1])
    a_f16 = (f16[:, ::1], f32[::1], f32[::1])
    a_f32 = (f32[:, ::1], f32[::1], f32[::1])
    a_e4m3 = (u8[:, ::1], f32[::1], f32[::1])
    a_nvfp4 = (u8[:, ::1], u8[:, ::1], f32[::1])
    configs = {
        # name: (SCHED, GATHER, ACT, AFMT, WFMT), activation operand, weight operand
        "gateup_grouped": ((G.GROUPED, True, G.SILU_GLU, G.FLOAT, G.NVFP4), a_f16, nvfp4_w),
        "gateup_bounded": ((G.BOUNDED, True, G.SILU_GLU, G.FLOAT, G.NVFP4), a_f16, nvfp4_w),
        "down_grouped": ((G.GROUPED, False, G.NONE, G.FLOAT, G.NVFP4), a_f32, nvfp4_w),
        "down_bounded": ((G.BOUNDED, False, G.NONE, G.FLOAT, G.NVFP4), a_f32, nvfp4_w),
        "down_fp8_bounded": ((G.BOUNDED, False, G.NONE, G.E4M3, G.E4M3), a_e4m3, e4m3_w),
        "sorted_up": ((G.BOUNDED, True, G.RELU2, G.FLOAT, G.NVFP4), a_f16, nvfp4_w),
        "sorted_up_w4a4": ((G.BOUNDED, True, G.RELU2, G.NVFP4, G.NVFP4), a_nvfp4, nvfp4_w),
        "shared_up": ((G.GROUPED, False, G.RELU2, G.FLOAT, G.NVFP4), a_f16, nvfp4_w),
        "shared_up_w4a4": ((G.GROUPED, False, G.RELU2, G.NVFP4, G.NVFP4), a_nvfp4, nvfp4_w),
        "shared_down_w4a4": ((G.GROUPED, False, G.NONE, G.NVFP4, G.NVFP4), a_nvfp4, nvfp4_w),
    }
    out = []
    for name, (key, a, w) in configs.items():
        sig = (f32[:, ::1], *a, i32[::1], *w, *idx)
        out.append((name, G.make_grouped(*key), sig, G.THREADS))
    out.append(("route_sort", _route.make_route_sort(), (i32[::1],) * 5 + (i32[:, ::1],), _route.SORT_THREADS))
    out.append(("zero_rows", _route.make_zero_rows(), (f32[:, ::1],), _route.THREADS))
    out.append(("combine", _route.make_combine(), (f16[:, ::1], f32[:, ::1], f32[:, ::1], i32[::1]), _route.THREADS))
    return out


def test_moe_prefill_kernels_compile_for_sm90_in_fp32(compiled):
    assert len(compiled["kernels"]) == 13
    check_ptx(compiled, fp64=False)


def test_ptxas_accepts_them_without_spills_or_local_memory(compiled):
    check_ptxas(compiled)


def test_their_sass_has_no_tensor_core_opcode_as_their_records_say(compiled, tmp_path):
    disasm = nvdisasm()
    if not compiled["ptxas"] or not disasm:
        pytest.skip("ptxas or nvdisasm not found")
    from leverctl_kernels.moe_prefill import PATHS

    assert all(v.tensor_cores is None for p in PATHS for v in p.variants.values())
    for name, rec in compiled["kernels"].items():
        sass = sass_sm90a(rec["ptx"], compiled["ptxas"], disasm, tmp_path)
        assert claim_problems(sass, None, None) == [], name
        assert "FFMA" in sass or name in ("route_sort", "zero_rows"), name  # the GEMMs' FP32 FMAs
