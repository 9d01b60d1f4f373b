"""The wgmma form of the W4A16 tensor-core GEMM (``w4a16/gemm/gemm_tc.py``
on the asynchronous mainloop, ``common/gemm/wgmma_async.py``) in the CUDA
simulator, against ``naive.py``'s float64 reference at tiny odd shapes (m
and n not tile multiples, a K that ends mid-stage, fewer K stages than the
pipeline is deep; K 400 carries a row's window of group scales, loaded
eight groups at a time by its pair of lanes, from stage to stage: the
next window's load, at 1,024, is the stager test's, tests/kernels/common/
test_wide_stager.py, which fetches stages in the mainloop's order), with
the family's tolerance; broken variants (a wrong
scale group, a dropped K sub-step, a stage read before its copies landed)
must fail the same check. The twin reads the staged tiles through the same
descriptors the tensor cores would, and lands each copy only at the wait
that covers it. The helpers are ``test_w4a16_mma.py``'s (the mma.sync
form's)."""

from __future__ import annotations

import pytest
from test_w4a16 import _check_test_local
from test_w4a16_mma import _run, _tolerance

FORM = "wgmma"


@pytest.mark.sim
@pytest.mark.parametrize(
    "m,n,k,bn",
    [(5, 37, 160, 64), (67, 40, 96, 64), (3, 136, 48, 128), (70, 24, 400, 64)],
    ids=["m5-n37-k160-bn64", "m67-n40-k96-bn64", "m3-n136-k48-bn128", "m70-n24-k400-bn64"],
)
def test_gemm_wgmma_matches_the_float64_reference(m, n, k, bn):
    from leverctl_kernels.w4a16.gemm import gemm_tc

    got, ref = _run(m, n, k, gemm_tc.kernel(bn, FORM), seed=m + n)
    ok, why = _check_test_local(got, ref, _tolerance())
    assert ok, why


def test_gemm_wgmma_refuses_k_not_multiple_of_16_and_sizes_its_stages():
    from leverctl_kernels.w4a16.gemm import gemm_tc

    with pytest.raises(ValueError, match="multiple of 16"):
        gemm_tc.make_launch(5, 11, 136, gemm_tc.kernel(64, FORM))
    assert gemm_tc.supports(5, 11, 256) == ""
    # four stages of 128 bytes of K for 64 rows of A and 128 of B, 1 KiB to align: past 48 KiB (opt-in)
    assert gemm_tc.shared_bytes(128, FORM) == 4 * (64 + 128) * 128 + 1024
    with pytest.raises(ValueError, match="multiple of 8 from 8 to 256"):
        gemm_tc.make_kernel(100, FORM)


def _wrong_group():
    # groups of 256: k 128..255 scaled with the first group's scale
    from leverctl_kernels.w4a16.gemm import gemm_tc

    return gemm_tc.make_kernel(64, FORM, group_shift=8)


def _dropped_k_substep():
    # one of the four wgmma per stage left out: k 16..31 of every stage never reach D
    from leverctl_kernels.w4a16.gemm import gemm_tc

    return gemm_tc.make_kernel(64, FORM, fault="short_k")


def _no_wait():
    # a stage read one commit group early: the twin has not landed its copies
    from leverctl_kernels.w4a16.gemm import gemm_tc

    return gemm_tc.make_kernel(64, FORM, fault="no_wait")


@pytest.mark.sim
@pytest.mark.parametrize(
    "make", [_wrong_group, _dropped_k_substep, _no_wait], ids=["wrong-scale-group", "dropped-k-substep", "no-wait"]
)
def test_a_broken_gemm_wgmma_fails_the_check(make):
    from numba import config

    if make is _no_wait and not config.ENABLE_CUDASIM:
        pytest.skip("on a GPU a missing wait races and may read right by luck")
    got, ref = _run(5, 11, 256, make(), seed=3)
    ok, why = _check_test_local(got, ref, _tolerance())
    assert not ok, f"the broken variant passed: {why}"
