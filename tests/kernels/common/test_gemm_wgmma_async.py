"""The asynchronous multi-stage wgmma mainloop (``common/gemm/wgmma_async.py``)
against a float64 matmul of the same bf16 / E4M3 inputs, in the simulator
(and on a GPU with LEVERCTL_TEST_DEVICE=gpu): odd M and N, K that is not a
multiple of a stage (zero-filled), one and two warpgroups, 2-4 stages, the
swapped store, the copies by TMA (the form's own) and by ``cp.async``; and
the check fails on a missing wait, an unswizzled staging (with TMA: maps
without the swizzle the reads assume) and a wrong stage order, either way."""

from __future__ import annotations

import gemm_cases
import pytest
from numba import config

from leverctl_kernels.common.gemm import pipeline as PL
from leverctl_kernels.common.gemm import wgmma_async as G

SIM = bool(config.ENABLE_CUDASIM)


def _run(*args, **kw):
    return gemm_cases.run(G, *args, **kw)


_err = gemm_cases.err


CASES = [
    # dtype, m, n, k, wgs (or (wgs, along BN)), bn, stages, swap
    ("bf16", 70, 24, 208, 1, 32, 3, False),  # k: 3 stages of 64 and a quarter; rows past 64
    ("bf16", 129, 24, 48, 2, 24, 2, False),  # k below one stage; two warpgroups, rows past 128
    ("bf16", 64, 72, 320, (2, 2), 128, 4, False),  # two warpgroups on one 64-row tile's column halves, n past 64
    ("e4m3", 37, 19, 272, 1, 16, 3, True),  # the FP8 projection's m16 token tile, swapped
    ("e4m3", 100, 33, 48, 1, 32, 4, True),  # k = 48: below one instruction's 32 twice over
]


@pytest.mark.sim
@pytest.mark.parametrize("copy", PL.COPIES)
@pytest.mark.parametrize("dtype, m, n, k, wgs, bn, stages, swap", CASES)
def test_the_pipelined_gemm_is_a_float64_matmul_of_its_inputs(dtype, m, n, k, wgs, bn, stages, swap, copy):
    got, ref = _run(dtype, m, n, k, wgs, bn, stages, swap, copy=copy)
    # FP8 wgmma keeps fewer accumulator bits than FP32 on the hardware (test_mma.FP8_RTOL)
    assert _err(got, ref) <= (2e-3 if dtype == "e4m3" and not SIM else 1e-5)


@pytest.mark.sim
@pytest.mark.skipif(not SIM, reason="on a GPU a missing wait races and may read right by luck")
@pytest.mark.parametrize("copy", PL.COPIES)
@pytest.mark.parametrize("fault", G.FAULTS)
def test_a_missing_wait_an_unswizzled_stage_a_wrong_stage_order_or_a_dropped_k_step_fails_the_check(fault, copy):
    got, ref = _run("bf16", 20, 16, 192, 1, 16, 3, fault=fault, copy=copy)
    assert _err(got, ref) > 1e-2


def test_the_form_copies_by_tma_unless_told_and_only_what_tma_can_carry():
    assert G.kernel("bf16", 1, 64, 3).copy == "tma"
    assert G.kernel("bf16", 1, 64, 3, copy="cp.async").copy == "cp.async"
    # a tile whose operands are both staged from registers has nothing to copy
    assert G.copy_for("nvfp4", "nvfp4_bf16") == "cp.async"
    G.use_copy("cp.async")
    try:
        assert G.kernel("bf16", 1, 64, 3).copy == "cp.async"  # built anew, not the cached TMA kernel
    finally:
        G.use_copy(G.COPY)
    assert G.kernel("bf16", 1, 64, 3).copy == "tma"
    with pytest.raises(ValueError, match="one of cp.async, tma"):
        G.use_copy("bulk")
    # gathered rows (the grouped GEMMs' row map) are copied by cp.async: TMA's 2-D tile is contiguous rows
    with pytest.raises(ValueError, match="not of gathered rows"):
        PL.make_mainloop(G.Form, "bf16", 1, 64, 3, "copy", "", None, None, gather=True, copy="tma")
    # a TMA kernel's shared memory holds its stages' barriers past the stages
    kern = G.kernel("bf16", 2, 128, 4)
    assert kern.bar_bytes == 5 * 8 and kern.boxes == ("bf16", (128, 128), 64, 3)


def test_shapes_the_loop_cannot_take_are_refused():
    # rows start on 16 bytes: bf16 copied on both sides takes a K of 8k, a staged B one of 16k
    with pytest.raises(ValueError, match="not a positive multiple of 8"):
        G.make_launch(64, 64, 36, G.kernel("bf16", 1, 64, 3))
    with pytest.raises(ValueError, match="not a positive multiple of 16"):
        G.make_launch(64, 64, 40, G.kernel("bf16", 1, 64, 3, False, b_kind="int4_bf16"))
    with pytest.raises(ValueError, match="at least 2"):
        G.kernel("bf16", 1, 64, 1)
    with pytest.raises(ValueError, match="exceed"):
        G.make_launch(64, 256, 64, G.kernel("bf16", 2, 256, 8))
    assert G.shared_bytes(2, 128, 4) == 4 * 256 * 128 + 1024  # 129 KiB: past 48, within 227
