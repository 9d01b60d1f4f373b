"""The MoE prefill kernels compile for sm_90 (H200) without a GPU
(``ptx_harness``): every grouped-GEMM configuration a variant launches
(schedule, gather, activation, activation and weight formats: the engine's
kernels, ``common/gemm/grouped.py`` on the mma.sync form), the sort, the
scratch zeroing and the combine. No fp64, no spills, stack or local memory
(the accumulators stay in registers), registers within a budget (printed:
``-s`` shows them) and static shared memory within an SM's. Every grouped
GEMM has the fp16 ``mma.sync`` in its PTX and ``HMMA.16816.F32`` in its
SASS, as every variant's record claims (``tc_claims.CLAIM_JOBS`` lists
each variant's GEMMs); the sort, zeroing and combine have no tensor-core
instruction."""

from __future__ import annotations

from pathlib import Path

import pytest
from ptx_harness import check_ptx, check_ptxas, compiled, nvdisasm  # noqa: F401 (compiled: the fixture)
from ptx_harness import sass as sass_of
from tc_claims import claim_problems, sass_claims_test

MMA_PTX = "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"
NOT_GEMMS = ("route_sort", "zero_rows", "combine")
# The most registers a grouped GEMM's thread may use (one 128-thread
# warpgroup a block; ptxas for sm_90 gives the gated gate/up, 32
# accumulators and the SiLU-GLU epilogue, the most: 144; the down
# projections 62 to 95): at 168 an SM still holds three of the blocks.
MAX_REGS = 168


def jobs():
    from numba import types

    from leverctl_kernels.moe._prefill import grouped as G
    from leverctl_kernels.moe._prefill import route as _route

    f16, f32, i32, u8, u32 = types.float16, types.float32, types.int32, types.uint8, types.uint32
    rows_u32, rows_u8 = u32[:, ::1], u8[:, ::1]
    ep = types.Tuple((f32[::1], f32[:, ::1], f32[::1], f32[::1], f32[::1], i32[::1]))
    a_of = {  # the activation operand and its scales (a placeholder where none)
        G.FLOAT: (rows_u32, rows_u8),
        G.E4M3: (rows_u32, rows_u8),
        G.NVFP4: (rows_u32, rows_u8),
    }
    configs = {
        # name: (SCHED, GATHER, ACT, AFMT, WFMT, A's bytes per element)
        "gateup_grouped": (G.GROUPED, True, G.SILU_GLU, G.FLOAT, G.NVFP4, 2),
        "gateup_bounded": (G.BOUNDED, True, G.SILU_GLU, G.FLOAT, G.NVFP4, 2),
        "down_grouped": (G.GROUPED, False, G.NONE, G.FLOAT, G.NVFP4, 4),
        "down_bounded": (G.BOUNDED, False, G.NONE, G.FLOAT, G.NVFP4, 4),
        "down_fp8_bounded": (G.BOUNDED, False, G.NONE, G.E4M3, G.E4M3, 1),
        "sorted_up": (G.BOUNDED, True, G.RELU2, G.FLOAT, G.NVFP4, 2),
        "sorted_up_w4a4": (G.BOUNDED, True, G.RELU2, G.NVFP4, G.NVFP4, 1),
        "shared_up": (G.GROUPED, False, G.RELU2, G.FLOAT, G.NVFP4, 2),
        "shared_up_w4a4": (G.GROUPED, False, G.RELU2, G.NVFP4, G.NVFP4, 1),
        "shared_down_w4a4": (G.GROUPED, False, G.NONE, G.NVFP4, G.NVFP4, 1),
    }
    out = []
    for name, (sched, gather, act, afmt, wfmt, size) in configs.items():
        a, asc = a_of[afmt]
        if afmt == G.FLOAT and size == 4:
            a = f32[:, ::1]
        if afmt == G.NVFP4 and gather:
            asc = types.Tuple((rows_u8, i32[::1]))  # the scales and the row map (nvfp4_f16_rows)
        sig = (f32[:, ::1], a, u32[:, :, ::1], u8[:, :, ::1], asc, i32[::1], i32[::1], types.int32, ep)
        out.append((name, G.make_grouped(sched, gather, act, afmt, wfmt, size), sig, 128))
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


def test_the_sort_zeroing_and_combine_have_no_tensor_core_opcode(compiled):
    """(The grouped GEMMs' ``HMMA.16816.F32`` is read by the claims test
    below: every one of them is some variant's, in ``CLAIM_JOBS``.)"""
    from tc_claims import CLAIM_JOBS

    gemms = {j for (mod, jobs) in CLAIM_JOBS.values() if mod == "test_moe_prefill_ptx" for j in jobs}
    assert gemms == set(compiled["kernels"]) - set(NOT_GEMMS)
    disasm = nvdisasm()
    if not compiled["ptxas"] or not disasm:
        pytest.skip("ptxas or nvdisasm not found")
    for name in NOT_GEMMS:
        sass = sass_of(compiled, name, "sm_90a")
        assert claim_problems(sass, None, None) == [], name


test_the_sass_holds_what_each_variants_records_claim = sass_claims_test("test_moe_prefill_ptx")


WINDOWED = ("ld.global.nc.v4.u32", "ld.global.nc.v2.u32", "ld.global.nc.u32")  # 16-byte codes, the scale windows


def test_the_nvfp4_weights_come_16_bytes_a_lane_and_their_scales_a_window_at_a_time(compiled):
    """Every grouped GEMM on NVFP4 weights but the gated ones stages them
    along K, 32 values a lane's ``ld.global.nc.v4.u32`` (the FP8 down
    projection its E4M3 codes, 16 a load), and loads a window
    of four stages' scale bytes at once: 8 bytes a lane (``v2``) where a
    row's scales are whole 8-byte units, two words (``ld.global.nc.u32``)
    where they are whole words (Nemotron's expert width 1856: rows of 116
    bytes). The gated gate/up tile (gate and up rows spread over two
    warpgroups) keeps the word-a-chunk form: two parts' loads carried
    across an iteration took it past its 128-register bound (16-36 bytes
    spilled)."""
    for name, rec in compiled["kernels"].items():
        if name in NOT_GEMMS or name in ("gateup_grouped", "gateup_bounded"):
            continue
        ptx = Path(rec["ptx"]).read_text()
        # (the FP8 down projection's E4M3 weights: 16 codes a load, their scales the epilogue's)
        for load in ("ld.global.nc.v4.u32",) if name == "down_fp8_bounded" else WINDOWED:
            assert load in ptx, (name, load)
