"""Every Mamba2 scan kernel compiles for sm_90 (H200) at Nemotron-H-8B's
shape (head dim 64, state 128, 8 groups of 16 heads, chunk 128), without a
GPU (``ptx_harness``): no fp64 arithmetic, no spills, stack or local
memory (the persistent kernel's state, the SSD accumulators: registers),
registers x threads within an SM's, static shared memory within 48 KiB;
the SSD chunk scan at the longest chunk and the largest state that fits
stays within what ``geometry.ssd_shared_bytes`` (the decision table's fit)
says, less the B tile it no longer stages. Only the SSD chunk scan has a
tensor-core instruction (its ``C.B`` blocks on ``mma.sync``, in the SASS as
``HMMA``, the rows in 8-byte loads; its read-out's partial sums folded by
butterfly shuffles). The projection GEMMs are ffn_prefill's and w4a16's kernels,
compiled by their own tests."""

from __future__ import annotations

from pathlib import Path

from ptx_harness import check_ptx, check_ptxas, compiled  # noqa: F401 (compiled: the fixture)
from tc_claims import sass_claims_test

P, N, HPG, CHUNK = 64, 128, 16, 128


def jobs():
    from numba import types

    from leverctl_kernels.mamba2.prefill_scan import persistent, sequential, ssd
    from leverctl_kernels.mamba2.prefill_scan.geometry import SSD_MAX_CHUNK, SSD_MAX_STATE

    A = lambda dt, nd: types.Array(dt, nd, "C")  # noqa: E731
    f16, f32 = types.float16, types.float32
    scan = (A(f32, 3), A(f32, 3), A(f16, 3), A(f32, 2), A(f32, 1), A(f32, 1), A(f16, 3), A(f16, 3), A(f32, 1))
    strided = tuple(types.Array(t.dtype, t.ndim, "A") for t in scan)
    nt = ssd.threads_for(P, N)
    pb = ssd.rows_per_block(P, N, nt)
    k1 = (A(f32, 2), A(f32, 2), A(f32, 4), A(f16, 3), A(f32, 2), A(f32, 1), A(f32, 1), A(f16, 3))
    k3 = (A(f32, 3), A(f16, 3), A(f16, 3), A(f16, 3), A(f32, 1), A(f32, 2), A(f32, 2), A(f32, 4))
    return [
        ("ssd_chunk_scan", ssd.make_chunk_scan(CHUNK, N, P, nt, HPG), k3, nt),
        ("ssd_chunk_scan_largest", ssd.make_chunk_scan(SSD_MAX_CHUNK, SSD_MAX_STATE, P, nt, HPG), k3, nt),
        ("ssd_chunk_state", ssd.make_chunk_state(CHUNK, N, pb, nt, HPG), k1, nt),
        ("ssd_state_pass", ssd.make_state_pass(CHUNK), (A(f32, 3), A(f32, 4), A(f32, 2)), nt),
        (
            "scan_persistent",
            persistent.make_scan(P, N, HPG, persistent.threads_for(P, N)),
            scan,
            persistent.threads_for(P, N),
        ),
        (
            "scan_persistent_wide",
            persistent.make_scan(P, N, HPG, persistent.threads_for(P, N, True), wide=True),
            scan,
            persistent.threads_for(P, N, True),
        ),
        ("scan_sequential", sequential.make_scan(HPG), scan, sequential.MAX_THREADS),
        # the element kernel, for arrays that are not C-contiguous: no 16-byte load to type
        ("scan_sequential_strided", sequential.make_scan(HPG, wide=False), strided, sequential.MAX_THREADS),
    ]


def test_every_mamba2_kernel_compiles_for_sm90_in_fp32(compiled):
    assert len(compiled["kernels"]) == 8
    check_ptx(compiled, fp64=False)
    for name, rec in compiled["kernels"].items():
        ptx = Path(rec["ptx"]).read_text()
        has = "mma.sync.aligned.m16n8k16" in ptx
        assert has == name.startswith("ssd_chunk_scan"), name
        # the C.B block's results go in as column pairs, one 8-byte store a lane (``ssd._put_m``)
        assert ("st.shared.v2.f32" in ptx) == has, name
    # at the model's state (128, a multiple of 4) the C and B fragments come in 8-byte loads, and the
    # entering state's read-out folds its rows' partial sums across lanes
    scan = Path(compiled["kernels"]["ssd_chunk_scan"]["ptx"]).read_text()
    assert "ld.global.nc.v2.u32" in scan and "shfl.sync.bfly" in scan
    # the sequential scan's row 8 states a step: the state by coherent 16-byte loads and stores,
    # the token's B and C 8 values a load
    seq = Path(compiled["kernels"]["scan_sequential"]["ptx"]).read_text()
    assert "ld.global.v4.f32" in seq and "st.global.v4.f32" in seq and "ld.global.nc.v4.u32" in seq
    # the persistent scan's 16-byte layout: the state in and out 16 bytes at a time, B and C 8 values a load
    wide = Path(compiled["kernels"]["scan_persistent_wide"]["ptx"]).read_text()
    assert "ld.global.v4.f32" in wide and "st.global.v4.f32" in wide and "ld.global.nc.v4.u32" in wide


def test_ptxas_accepts_them_without_spills_or_local_memory(compiled):
    check_ptxas(compiled)


def test_the_ssd_fit_is_the_shared_memory_the_compiled_chunk_scan_declares(compiled):
    from leverctl_kernels.mamba2.prefill_scan import ssd
    from leverctl_kernels.mamba2.prefill_scan.geometry import SSD_MAX_STATE, ssd_shared_bytes

    if not compiled["ptxas"]:
        import pytest

        pytest.skip("ptxas not found (PATH or $CUDA_HOME/bin)")
    b_tile = 4 * ssd.TILE * (SSD_MAX_STATE + 1)  # kernel 1 stages B; the scan's MMA reads it as stored
    assert compiled["kernels"]["ssd_chunk_scan_largest"]["smem"] == ssd_shared_bytes(SSD_MAX_STATE) - b_tile


test_the_sass_holds_what_each_variants_records_claim = sass_claims_test("test_mamba2_ptx")
