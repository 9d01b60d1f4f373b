"""The router's gate GEMM (``moe/_router.py``) in the simulator, in each of
its three precisions: rows of whole 16-byte chunks (the wide path, with and
without a lane's last unpaired chunk), rows that are not (H % 8), rows not
16-byte aligned (the kernel's fallback) and a strided weight view (the
launcher's) all give the float64 logits to float32 summation (and the
bf16 rounding of the ``bf16`` precision). A wide path that drops a lane's
last chunk fails that comparison; under the memory tracer the weights come
in 16-byte loads on whole sectors."""

from __future__ import annotations

import numpy as np
import pytest
from numba import config, cuda

from leverctl_kernels.common import bits, vload
from leverctl_kernels.moe import _router

pytestmark = pytest.mark.skipif(not config.ENABLE_CUDASIM, reason="the simulator's kernels")

PRECS = _router.PRECISIONS
EXPERTS = 20  # two blocks of 16, the second partial


def _inputs(rows: int, hidden: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, hidden), dtype=np.float32)
    wg = bits.f32_to_bf16_np(rng.standard_normal((EXPERTS, hidden), dtype=np.float32) * np.float32(0.2))
    return x, wg


def _gate(prec, x, wg, fault=""):
    xin = x if prec == "fp32_routing" else bits.f32_to_bf16_np(x)
    return _launch(prec, xin, wg, fault)


def _launch(prec, xin, wg, fault=""):
    logits = np.zeros((xin.shape[0], wg.shape[0]), np.float32)
    _router.gate(prec, xin.shape[0], wg.shape[0], xin.shape[1], fault)(logits, xin, wg)
    return logits


def _close(prec, x, wg, got) -> bool:
    xs = x if prec == "fp32_routing" else bits.bf16_to_f32_np(bits.f32_to_bf16_np(x))
    xs = np.asarray(xs, np.float64)
    w = bits.bf16_to_f32_np(np.asarray(wg)).astype(np.float64)
    ref = xs @ w.T
    bound = 4e-6 * (np.abs(xs) @ np.abs(w).T)  # float32 sums of a few hundred products
    if prec == "bf16":
        bound += np.abs(ref) * 2.0**-8  # the logits rounded to bf16
    return bool(np.all(np.abs(got - ref) <= bound + 1e-30))


@pytest.mark.parametrize("prec", PRECS)
@pytest.mark.parametrize("hidden", [48, 200, 37], ids=["chunks-in-one-step", "unpaired-last-chunks", "not-chunks"])
def test_the_gate_gives_the_float64_logits(prec, hidden):
    x, wg = _inputs(3, hidden, seed=hidden)
    assert _close(prec, x, wg, _gate(prec, x, wg))


@pytest.mark.parametrize("prec", PRECS)
def test_unaligned_rows_and_a_strided_weight_view_take_the_element_loads_and_agree(prec):
    x, wg = _inputs(3, 56, seed=5)
    flat = np.zeros(3 * 48 + 1, np.float32)
    flat[1:] = x[:, :48].reshape(-1)
    if prec != "fp32_routing":
        flat = bits.f32_to_bf16_np(flat)
    # C-contiguous, its first element 2 or 4 bytes into a device buffer (a host
    # view would be copied by the simulator into a buffer on 16 bytes)
    unaligned = cuda.to_device(flat)[1:].reshape(3, 48)
    assert not vload.aligned16(unaligned)
    assert _close(prec, x[:, :48], wg[:, :48], _launch(prec, unaligned, np.ascontiguousarray(wg[:, :48])))
    strided = cuda.to_device(wg)[:, 8:]  # a device view: a kernel argument as it is
    assert not strided.is_c_contiguous()
    xin = x[:, 8:] if prec == "fp32_routing" else bits.f32_to_bf16_np(x[:, 8:])
    assert _close(prec, x[:, 8:], wg[:, 8:], _launch(prec, np.ascontiguousarray(xin), strided))


@pytest.mark.parametrize("prec", PRECS)
def test_a_gate_that_drops_a_lanes_unpaired_last_chunk_fails(prec):
    x, wg = _inputs(3, 200, seed=7)  # 25 chunks: lanes 1-7 end on an unpaired one
    assert not _close(prec, x, wg, _gate(prec, x, wg, fault="tail_dropped"))


@pytest.mark.parametrize("prec", ["fp32_gate", "fp32_routing"])
def test_x_is_staged_once_a_block_and_every_load_is_16_bytes_on_whole_sectors(prec):
    from leverctl.profile import memtrace as mt

    rows, hidden = 2, 256
    x, wg = _inputs(rows, hidden, seed=9)
    with mt.trace() as t:
        got = _gate(prec, x, wg)
    assert _close(prec, x, wg, got)
    sites = mt.summarize(t).sites
    loads = [r for r in sites if r.space == "global" and r.kind == "load"]
    blocks = rows * -(-EXPERTS // _router.OUT_PER_BLOCK)
    x_bytes = hidden * (4 if prec == "fp32_routing" else 2)
    assert sum(r.bytes for r in loads) == rows * wg.nbytes + blocks * x_bytes  # W once a row, x once a block
    for r in loads:
        assert r.efficiency == 1.0 and r.wide_bytes == r.bytes, r.to_json()
    shared = [r for r in sites if r.space == "shared"]
    assert shared and all(r.wavefronts == r.ideal_wavefronts for r in shared), [r.to_json() for r in shared]
