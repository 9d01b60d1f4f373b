"""The mma.sync form of the W4A16 tensor-core GEMM (``w4a16/gemm/gemm_tc.py``
on ``common/gemm/mma_sync.py``: ``ldmatrix`` from the swizzled stages,
three in flight) in the CUDA simulator, against ``naive.py``'s float64
reference at tiny odd shapes (m and n not tile multiples, k = 160 ending
mid-stage with a partial scale group, k = 48 and 80 not multiples of a
stage), at both variants' tiles, with the family's tolerance (the one the
FMA GEMM is held to); broken variants (a wrong scale group, a dropped K
sub-step) must fail the same check. The comparator is ``test_w4a16.py``'s;
``test_w4a16_wgmma.py`` runs the wgmma form through the same helpers."""

from __future__ import annotations

import numpy as np
import pytest
from test_w4a16 import _check_test_local

from leverctl_kernels.common import int4

FORM = "mma.sync"


def _case(m, n, k, seed):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((m, k), dtype=np.float32).astype(np.float16)
    qweight, scales = int4.random_w4(rng, n, k)
    return a, qweight, scales


def _tolerance():
    from leverctl_kernels.w4a16 import family

    return family.TOLERANCE


def _run(m, n, k, kern, seed=0):
    """``kern`` (``gemm_tc``'s, either form) on fresh inputs and a
    NaN-poisoned ``c``; returns (got, reference)."""
    from numba import cuda

    from leverctl_kernels.w4a16 import naive
    from leverctl_kernels.w4a16.gemm import gemm_tc

    a, qweight, scales = _case(m, n, k, seed)
    ref = naive.naive_gemm(a, qweight, scales)
    c = cuda.to_device(np.full((m, n), np.nan, dtype=np.float16))  # unwritten -> fails
    gemm_tc.make_launch(m, n, k, kern)(c, cuda.to_device(a), cuda.to_device(qweight), cuda.to_device(scales))
    return c.copy_to_host(), ref


@pytest.mark.sim
@pytest.mark.parametrize(
    "m,n,k,bn",
    [(5, 37, 160, 64), (70, 40, 80, 64), (3, 136, 48, 128)],
    ids=["m5-n37-k160-bn64", "m70-n40-k80-bn64-two-row-blocks", "m3-n136-k48-bn128-two-column-blocks"],
)
def test_gemm_on_mma_sync_matches_the_float64_reference(m, n, k, bn):
    from leverctl_kernels.w4a16.gemm import gemm_tc

    kern = gemm_tc.kernel(bn, FORM)
    assert (kern.form, kern.async_stages) == (FORM, 3)
    got, ref = _run(m, n, k, kern, seed=m + n)
    ok, why = _check_test_local(got, ref, _tolerance())
    assert ok, why


def test_the_mma_sync_tiles_fit_and_k_not_multiple_of_16_is_refused():
    from leverctl_kernels.common.gemm import mma_sync
    from leverctl_kernels.w4a16.gemm import gemm_tc

    # three stages of 128 bytes of K for 64 rows of A and BN of B, 1 KiB to align
    assert gemm_tc.shared_bytes(64, FORM) == 3 * (64 + 64) * 128 + 1024  # 49 KiB: past 48 KiB (opt-in)
    assert gemm_tc.shared_bytes(128, FORM) == 3 * (64 + 128) * 128 + 1024  # 73 KiB
    assert gemm_tc.shared_bytes(128, FORM) <= mma_sync.MAX_SHARED
    with pytest.raises(ValueError, match="multiple of 16"):
        gemm_tc.make_launch(5, 11, 136, gemm_tc.kernel(64, FORM))
    with pytest.raises(ValueError, match="multiple of 16"):
        gemm_tc.make_kernel(80, FORM)  # a warpgroup's 40 columns: one B ldmatrix.x4 covers 16


def _wrong_group():
    # groups of 256: k 128..255 scaled with the first group's scale (a shift
    # below 7 would index past the scales' k / 128 columns instead)
    from leverctl_kernels.w4a16.gemm import gemm_tc

    return gemm_tc.make_kernel(64, FORM, group_shift=8)


def _dropped_k_substep():
    # one of the four k16 steps of every stage left out: k 16..31 of each stage never reach D
    from leverctl_kernels.w4a16.gemm import gemm_tc

    return gemm_tc.make_kernel(64, FORM, fault="short_k")


@pytest.mark.sim
@pytest.mark.parametrize("make", [_wrong_group, _dropped_k_substep], ids=["wrong-scale-group", "dropped-k-substep"])
def test_a_broken_gemm_on_mma_sync_fails_the_check(make):
    kern = make()
    assert kern.form == FORM
    got, ref = _run(5, 11, 256, kern, seed=3)
    ok, why = _check_test_local(got, ref, _tolerance())
    assert not ok, f"the broken variant passed: {why}"
