"""The MoE prefill kernels compile for sm_90 (H200) without a GPU
(``ptx_harness``): every grouped-GEMM configuration a variant launches
(schedule, gather, activation, activation and weight formats), the sort,
the scratch zeroing and the combine. No fp64, no spills, stack or local
memory (the MMA accumulators and fragments stay in registers), registers
within a budget (printed: ``-s`` shows them) and static shared memory
within an SM's. Every grouped GEMM has the fp16 ``mma.sync`` in its PTX
and ``HMMA.16816.F32`` in its SASS, as every variant's record claims
(``tc_claims.CLAIM_JOBS`` lists each variant's GEMMs); the sort, zeroing
and combine have no tensor-core instruction."""

from __future__ import annotations

from pathlib import Path

import pytest
from ptx_harness import check_ptx, check_ptxas, compiled, nvdisasm  # noqa: F401 (compiled: the fixture)
from tc_claims import claim_problems, sass_claims_test, sass_sm90a

MMA_PTX = "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"
NOT_GEMMS = ("route_sort", "zero_rows", "combine")
# The most registers a grouped GEMM's thread may use (ptxas for sm_90 gives
# the gated gate/up 128: its 16 accumulators, the B fragment and a K step's
# weight loads in flight; the FP32 CUDA-core kernel before it took 105): at
# 128 an SM still holds 16 of the one-warp blocks.
MAX_REGS = 128


def jobs():
    from numba import types

    from leverctl_kernels.moe._prefill import grouped as G
    from leverctl_kernels.moe._prefill import route as _route

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


def test_moe_prefill_kernels_compile_for_sm90_without_fp64(compiled):
    assert len(compiled["kernels"]) == 13
    check_ptx(compiled, fp64=False)


def test_ptxas_accepts_them_without_spills_or_local_memory_within_the_register_budget(compiled):
    check_ptxas(compiled)  # no stack frame, spills or local memory
    regs = {name: rec["regs"] for name, rec in compiled["kernels"].items()}
    print("sm_90 registers per thread:", ", ".join(f"{n} {r}" for n, r in regs.items()))
    over = {n: r for n, r in regs.items() if n not in NOT_GEMMS and r > MAX_REGS}
    assert not over, f"over {MAX_REGS} registers: {over}"


def test_every_grouped_gemm_has_the_f16_mma_and_every_variant_claims_it(compiled):
    from leverctl_kernels.registry import get_path

    prefill = [get_path(name) for name in ("moe.prefill_grouped", "moe.prefill_sorted", "moe.shared_expert")]
    claims = {(v.tensor_cores, v.tc_dtype) for p in prefill for v in p.variants.values()}
    assert claims == {("mma.sync", "f16")}
    for name, rec in compiled["kernels"].items():
        assert "error" not in rec, f"{name} does not compile for sm_90 (see the compile test)"
        n = Path(rec["ptx"]).read_text().count(MMA_PTX)
        assert (n > 0) == (name not in NOT_GEMMS), f"{name}: {n} x {MMA_PTX}"


def test_the_sort_zeroing_and_combine_have_no_tensor_core_opcode(compiled, tmp_path):
    """(The grouped GEMMs' ``HMMA.16816.F32`` is read by the claims test
    below: every one of them is some variant's, in ``CLAIM_JOBS``.)"""
    from tc_claims import CLAIM_JOBS

    gemms = {j for (mod, jobs) in CLAIM_JOBS.values() if mod == "test_moe_prefill_ptx" for j in jobs}
    assert gemms == set(compiled["kernels"]) - set(NOT_GEMMS)
    disasm = nvdisasm()
    if not compiled["ptxas"] or not disasm:
        pytest.skip("ptxas or nvdisasm not found")
    for name in NOT_GEMMS:
        sass = sass_sm90a(compiled["kernels"][name]["ptx"], compiled["ptxas"], disasm, tmp_path)
        assert claim_problems(sass, None, None) == [], name


test_the_sass_holds_what_each_variants_records_claim = sass_claims_test("test_moe_prefill_ptx")
