"""The contiguous-batch GEMV tier's kernels (``batch4``, ``batch16``)
compile for sm_90 (H200) without a GPU (``ptx_harness``): no fp64, no
spills, stack or local memory (the per-row accumulators and the decoded
word stay in registers), registers and static shared memory within an
SM's, and no tensor-core instruction. ``per_row`` is ``w4a16.gemv_sw``,
compiled by the W4A16 tests."""

from __future__ import annotations

from ptx_harness import check_ptx, check_ptxas, compiled  # noqa: F401 (compiled: the fixture)


def jobs():
    from numba import types

    from leverctl_kernels.gdn.proj_gemv_batch import batch4 as proj_batch4
    from leverctl_kernels.gdn.proj_gemv_batch import batch16 as proj_batch16
    from leverctl_kernels.gdn.proj_gemv_batch import batch_gemv as _proj_batch

    A = lambda dt, nd: types.Array(dt, nd, "C")  # noqa: E731
    sig = (A(types.float16, 2), A(types.uint32, 2), A(types.float16, 2), A(types.float16, 2))
    nt = _proj_batch.DEFAULT_WARPS * 32
    return [
        (f"gemv_{mod.NAME}", _proj_batch.make_batch_gemv(mod.MROWS, mod.KCHUNK), sig, nt)
        for mod in (proj_batch16, proj_batch4)
    ]


def test_the_tier_kernels_compile_for_sm90_in_fp32(compiled):
    assert set(compiled["kernels"]) == {"gemv_batch4", "gemv_batch16"}
    check_ptx(compiled, fp64=False)


def test_ptxas_accepts_them_without_spills_or_local_memory(compiled):
    check_ptxas(compiled)


def test_the_weights_come_in_16_byte_loads_two_a_lane_in_flight(compiled):
    from pathlib import Path

    for name, rec in compiled["kernels"].items():
        ptx = Path(rec["ptx"]).read_text()
        assert ptx.count("ld.global.nc.v4.u32") >= 2 + 1, f"{name}: two weight groups a step and the staged x"
