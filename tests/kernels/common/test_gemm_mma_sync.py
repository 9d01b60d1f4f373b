"""The mma.sync mainloop (``common/gemm/mma_sync.py``: ``ldmatrix`` from the
swizzled stages ``cp.async`` fills, several in flight) against a float64
matmul of the same bf16 / fp16 / s8 inputs, in the simulator (and on a GPU
with LEVERCTL_TEST_DEVICE=gpu): odd M and N, K that is not a multiple of a
stage or of one instruction's step (zero-filled), one and two warpgroups,
2-4 stages, the swapped store; and the check fails on a missing wait, an
unswizzled staging, a wrong stage order and a dropped K step."""

from __future__ import annotations

import gemm_cases
import pytest
from numba import config

from leverctl_kernels.common.gemm import mma_sync as MS

SIM = bool(config.ENABLE_CUDASIM)


def _run(*args, **kw):
    return gemm_cases.run(MS, *args, **kw)


_err = gemm_cases.err


CASES = [
    # dtype, m, n, k, wgs (or (wgs, along BN)), bn, stages, swap
    ("bf16", 70, 24, 208, 1, 32, 3, False),  # k: 3 stages of 64 and a quarter; rows past 64
    ("f16", 129, 19, 48, 2, 16, 2, True),  # k below one stage; two warpgroups, rows past 128, swapped
    ("s8", 37, 40, 272, 1, 48, 4, False),  # k = 272: two stages of 128 and a half-instruction of 16
    ("bf16", 40, 70, 80, (2, 2), 64, 2, False),  # two warpgroups on one 64-row tile's column halves
]


@pytest.mark.sim
@pytest.mark.parametrize("dtype, m, n, k, wgs, bn, stages, swap", CASES)
def test_the_mma_sync_gemm_is_a_float64_matmul_of_its_inputs(dtype, m, n, k, wgs, bn, stages, swap):
    got, ref = _run(dtype, m, n, k, wgs, bn, stages, swap)
    assert _err(got, ref) <= 1e-5


@pytest.mark.sim
@pytest.mark.skipif(not SIM, reason="on a GPU a missing wait races and may read right by luck")
@pytest.mark.parametrize("fault", MS.PL.FAULTS)
def test_a_missing_wait_an_unswizzled_stage_a_wrong_stage_order_or_a_dropped_k_step_fails_the_check(fault):
    got, ref = _run("bf16", 20, 16, 192, 1, 16, 3, fault=fault)
    assert _err(got, ref) > 1e-2


def test_shapes_the_loop_cannot_take_are_refused():
    # rows start on 16 bytes: bf16 copied on both sides takes a K of 8k, a staged B one of 16k
    with pytest.raises(ValueError, match="not a positive multiple of 8"):
        MS.make_launch(64, 64, 36, MS.kernel("bf16", 1, 64))
    with pytest.raises(ValueError, match="not a positive multiple of 16"):
        MS.make_launch(64, 64, 40, MS.kernel("bf16", 1, 64, 3, False, b_kind="int4_bf16"))
    with pytest.raises(ValueError, match="multiple of 16"):
        MS.kernel("bf16", 1, 24)
    with pytest.raises(ValueError, match="one of bf16, f16, s8"):
        MS.kernel("e4m3", 1, 64)
    with pytest.raises(ValueError, match="exceed"):
        MS.kernel("bf16", 2, 256, 3)
    assert MS.PL.shared_bytes(2, 128, 3) <= MS.MAX_SHARED  # the widest tile used, three stages: 97 KiB


@pytest.mark.sim
@pytest.mark.skipif(not SIM, reason="the memory tracer runs in the simulator")
def test_the_swizzle_keeps_ldmatrix_and_the_copies_free_of_bank_conflicts_and_the_tracer_sees_it_missing():
    """Traced in the simulator: every shared access of the mainloop (the
    copies landing, the ``ldmatrix`` rows) takes its ideal wavefronts; the
    same loop with both sides unswizzled gives the same numbers and an
    8-way conflict on every ``ldmatrix`` phase (eight rows at one K chunk in
    one bank group), which the tracer reports."""
    from leverctl.profile import memtrace

    def shared(fault):
        box = []
        trace = memtrace.run_traced(lambda: box.append(_run("bf16", 64, 32, 128, 1, 32, 3, fault=fault)))
        (got, ref), rows = box[0], memtrace.summarize(trace).sites
        return _err(got, ref), [r for r in rows if r.space != memtrace.GLOBAL]

    err, rows = shared("")
    assert err <= 1e-5 and rows
    assert all(r.extra_wavefronts == 0 and r.ways == 1 for r in rows), rows
    err, rows = shared(MS.PL.UNSWIZZLED)
    assert err <= 1e-5
    assert max(r.ways for r in rows if r.kind == "load") == 8, rows
