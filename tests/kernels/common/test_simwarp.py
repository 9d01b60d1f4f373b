"""Warp intrinsics: real kernels against NumPy, in the simulator (and on a GPU
with LEVERCTL_TEST_DEVICE=gpu, except the simulator-only error tests)."""

from __future__ import annotations

import time

import numpy as np
import pytest
from numba import config, cuda

from leverctl_kernels.common import simwarp

pytestmark = pytest.mark.sim
SIM = bool(config.ENABLE_CUDASIM)
sim_only = pytest.mark.skipif(not SIM, reason="simulator behaviour")
FULL = 0xFFFFFFFF


def _run(kernel, grid, block, *arrays):
    """Launch on device copies; return the host results of every array."""
    dev = [cuda.to_device(a) for a in arrays]
    kernel[grid, block](*dev)
    return [d.copy_to_host() for d in dev]


def _warp_groups(nthreads):
    return [(w * 32, min(32, nthreads - w * 32)) for w in range((nthreads + 31) // 32)]


@cuda.jit
def _sum_xor(x, out):
    i = cuda.grid(1)
    v = x[i]
    off = 16
    while off > 0:
        v += cuda.shfl_xor_sync(FULL, v, off)
        off //= 2
    out[i] = v


@pytest.mark.parametrize("block", [32, 96])
def test_warp_sum_shfl_xor(block):
    rng = np.random.default_rng(1)
    grid = 2
    x = rng.standard_normal(grid * block).astype(np.float32)
    _, out = _run(_sum_xor, grid, block, x, np.zeros_like(x))
    want = x.reshape(-1, 32).astype(np.float64).sum(axis=1).repeat(32)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)


@cuda.jit
def _sum_down_partial(x, out, amask):
    # A block whose size is not a multiple of 32: the last warp only has
    # `nl` lanes and names exactly those in its mask.
    t = cuda.threadIdx.x
    lane = t % 32
    w = t // 32
    nl = min(32, cuda.blockDim.x - w * 32)
    mask = (1 << nl) - 1
    i = cuda.blockIdx.x * cuda.blockDim.x + t
    amask[i] = cuda.activemask()
    v = x[i]
    off = 16
    while off > 0:
        got = cuda.shfl_down_sync(mask, v, off)
        if lane + off < nl:
            v += got
        off //= 2
    if lane == 0:
        out[cuda.blockIdx.x * 2 + w] = v


def test_warp_sum_shfl_down_partial_warp():
    block, grid = 48, 2
    x = np.arange(grid * block, dtype=np.int64) * 3 - 40
    _, out, amask = _run(
        _sum_down_partial,
        grid,
        block,
        x,
        np.zeros(grid * 2, np.int64),
        np.zeros(grid * block, np.uint32),
    )
    want = [x[b * block + s : b * block + s + n].sum() for b in range(grid) for s, n in _warp_groups(block)]
    np.testing.assert_array_equal(out, want)
    lanes = np.tile(np.r_[np.full(32, FULL), np.full(16, 0xFFFF)], grid)
    np.testing.assert_array_equal(amask, lanes.astype(np.uint32))


@cuda.jit
def _branch_one_warp(x, out):
    # Only warp 1 shuffles; warp 0 meets it only at the block barriers.
    sm = cuda.shared.array(64, dtype=np.float64)
    t = cuda.threadIdx.x
    sm[t] = x[t] * 2.0
    cuda.syncthreads()
    v = sm[63 - t]
    if t // 32 == 1:
        for off in (1, 2, 4, 8, 16):
            v += cuda.shfl_xor_sync(FULL, v, off)
        cuda.syncwarp(FULL)
    cuda.syncthreads()
    out[t] = v


def test_branch_only_warp1_with_syncthreads():
    x = np.linspace(-1, 1, 64)
    _, out = _run(_branch_one_warp, 1, 64, x, np.zeros(64))
    rev = (x * 2.0)[::-1]
    want = rev.copy()
    want[32:] = rev[32:].sum()
    np.testing.assert_allclose(out, want, rtol=1e-12, atol=1e-12)


@cuda.jit
def _scan_up(x, out):
    i = cuda.grid(1)
    lane = cuda.threadIdx.x % 32
    v = x[i]
    off = 1
    while off < 32:
        got = cuda.shfl_up_sync(FULL, v, off)
        if lane >= off:
            v += got
        off *= 2
    out[i] = v


def test_shfl_up_inclusive_scan():
    rng = np.random.default_rng(2)
    x = rng.integers(-50, 50, size=64).astype(np.int32)
    _, out = _run(_scan_up, 1, 64, x, np.zeros_like(x))
    np.testing.assert_array_equal(out, np.cumsum(x.reshape(-1, 32), axis=1).ravel())


@cuda.jit
def _votes(x, ballot, half, flags):
    i = cuda.grid(1)
    lane = cuda.threadIdx.x % 32
    p = x[i] > 0
    ballot[i] = cuda.ballot_sync(FULL, p)
    a = cuda.all_sync(FULL, p)
    b = cuda.any_sync(FULL, p)
    e = cuda.eq_sync(FULL, p)
    flags[i] = (1 if a else 0) + (2 if b else 0) + (4 if e else 0)
    if lane < 16:  # a mask over half the warp, called by exactly that half
        half[i] = cuda.ballot_sync(0xFFFF, p)


def test_ballot_any_all_eq():
    rng = np.random.default_rng(3)
    x = np.concatenate(
        [
            np.ones(32),
            -np.ones(32),  # all true, all false
            rng.integers(-3, 4, 32),
            np.r_[-1, np.ones(31)],  # mixed, lane 0 false
        ]
    ).astype(np.int32)
    x[64 + 31] = 5  # lane 31 true in the mixed warp (bit 31 of the ballot)
    _, ballot, half, flags = _run(
        _votes,
        1,
        128,
        x,
        np.zeros(128, np.uint32),
        np.zeros(128, np.uint32),
        np.zeros(128, np.int32),
    )
    for w in range(4):
        p = x[w * 32 : (w + 1) * 32] > 0
        bits = int(sum(1 << k for k in range(32) if p[k]))
        assert set(ballot[w * 32 : (w + 1) * 32]) == {bits}
        assert set(half[w * 32 : w * 32 + 16]) == {bits & 0xFFFF}
        want = (1 if p.all() else 0) + (2 if p.any() else 0) + (4 if p.all() or not p.any() else 0)
        assert set(flags[w * 32 : (w + 1) * 32]) == {want}, w


@cuda.jit
def _rotate_loop(out, steps):
    lane = cuda.threadIdx.x % 32
    v = lane
    s = 0
    for _ in range(steps):
        v = cuda.shfl_sync(FULL, v, lane + 1)  # src 32 wraps to lane 0
        s += v
        s = cuda.shfl_xor_sync(FULL, s, 0)  # a second op per iteration
    out[cuda.grid(1)] = s * 100 + v


def test_loop_of_50_shuffles():
    steps = 50
    dev = cuda.to_device(np.zeros(64, np.int64))
    _rotate_loop[1, 64](dev, steps)
    out = dev.copy_to_host()
    lane = np.arange(64) % 32
    s = sum((lane + k) % 32 for k in range(1, steps + 1))
    np.testing.assert_array_equal(out, s * 100 + (lane + steps) % 32)


@cuda.jit
def _match_2d(x, any_out, all_out):
    # 2-D block (16, 4): linear id x + 16 * y; warps are pairs of rows.
    t = cuda.threadIdx.x + cuda.blockDim.x * cuda.threadIdx.y
    v = x[t]
    any_out[t] = cuda.match_any_sync(FULL, v)
    m, ok = cuda.match_all_sync(FULL, v)
    all_out[t] = m if ok else 7


def test_match_sync_2d_block():
    x = (np.arange(64) % 3).astype(np.int32)
    x[32:] = 9
    _, any_out, all_out = _run(_match_2d, 1, (16, 4), x, np.zeros(64, np.uint32), np.zeros(64, np.uint32))
    for t in range(32):
        assert any_out[t] == sum(1 << k for k in range(32) if x[k] == x[t])
    assert set(any_out[32:]) == {FULL}
    assert set(all_out[:32]) == {7} and set(all_out[32:]) == {FULL}


# --- simulator behaviour: types, errors, no hangs ---------------------------


@cuda.jit
def _types(x, out):
    t = cuda.threadIdx.x
    a = cuda.shfl_down_sync(FULL, x[t], 1)
    b = cuda.shfl_sync(FULL, 2.5, 0)
    c = cuda.shfl_up_sync(FULL, t, 3)
    out[t] = (type(a) is type(x[t])) + 2 * (type(b) is float) + 4 * (type(c) is int)


@sim_only
def test_result_keeps_value_type():
    x = np.arange(32, dtype=np.float32)
    _, out = _run(_types, 1, 32, x, np.zeros(32, np.int32))
    assert set(out) == {7}


@cuda.jit
def _raise_in_lane(x, out):
    t = cuda.threadIdx.x
    v = x[t]
    if t == 37:
        v = x[10_000]  # out of bounds: the simulator raises IndexError
    v = cuda.shfl_down_sync(FULL, v, 1)
    cuda.syncthreads()
    out[t] = v


@sim_only
def test_exception_in_one_lane_is_reported_not_hung():
    x = np.zeros(64)
    t0 = time.monotonic()
    with pytest.raises(IndexError, match="tid=\\[37"):
        _run(_raise_in_lane, 1, 64, x, np.zeros(64))
    assert time.monotonic() - t0 < 10


@cuda.jit
def _early_return(out):
    t = cuda.threadIdx.x
    if t == 3:
        return
    out[t] = cuda.shfl_xor_sync(FULL, t, 1)


@sim_only
def test_lane_returning_before_full_mask_shuffle_is_an_error():
    with pytest.raises(simwarp.WarpSyncError, match="returned from the kernel"):
        _run(_early_return, 1, 32, np.zeros(32, np.int64))


_IDENTS: list = []


def _note_the_os_thread():
    import threading

    _IDENTS.append(threading.get_ident())


@cuda.jit
def _barriers_and_shuffles(x):
    t = cuda.threadIdx.x
    _note_the_os_thread()
    v = x[t]
    cuda.syncthreads()
    v += cuda.shfl_down_sync(FULL, v, 1)
    cuda.syncthreads()
    x[t] = v


@sim_only
def test_a_blocks_lanes_run_in_the_launching_os_thread_and_see_their_own_thread_index():
    """The runner switches between the lanes (greenlets) in the thread that
    launched the kernel: no OS thread is started, and each lane still reads
    its own threadIdx after every barrier and shuffle."""
    import threading

    _IDENTS.clear()
    before = threading.active_count()
    x = np.arange(96, dtype=np.int64)
    (out,) = _run(_barriers_and_shuffles, 1, 96, x)
    assert _IDENTS == [threading.get_ident()] * 96
    assert threading.active_count() == before
    nxt = np.where(np.arange(96) % 32 == 31, x, np.roll(x, -1))  # lane 31 reads its own value
    assert (out == x + nxt).all()


@cuda.jit
def _shuffle_against_a_barrier(out):
    t = cuda.threadIdx.x
    if t < 16:
        out[t] = cuda.shfl_xor_sync(FULL, t, 16)  # waits for lanes 16..31
    else:
        cuda.syncthreads()  # which wait here for lanes 0..15
        out[t] = t


@sim_only
def test_a_shuffle_waiting_on_lanes_at_a_barrier_is_a_deadlock_told_at_once():
    """On a GPU this hangs; the simulator says which lanes wait for which,
    without waiting out a time limit, and leaves no lane of the block behind."""
    t0 = time.monotonic()
    with pytest.raises(
        simwarp.WarpSyncError,
        match=r"shfl_xor_sync: tid=\[0, 0, 0\].* waits for lanes \[16, .*31\] of warp 0.*16 lanes of the block wait at",
    ):
        _run(_shuffle_against_a_barrier, 1, 32, np.zeros(32, np.int64))
    assert time.monotonic() - t0 < 5
    # The block after it runs as any other.
    _, out = _run(_sum_xor, 1, 32, np.arange(32, dtype=np.int64), np.zeros(32, np.int64))
    assert (out == np.arange(32).sum()).all()


@cuda.jit
def _not_in_mask(out):
    out[cuda.threadIdx.x] = cuda.ballot_sync(0x1, True)


@cuda.jit
def _mixed_ops(out):
    t = cuda.threadIdx.x
    if t < 16:
        out[t] = cuda.ballot_sync(FULL, True)
    else:
        out[t] = cuda.shfl_sync(FULL, t, 0)


@sim_only
def test_misuse_is_reported():
    with pytest.raises(simwarp.WarpSyncError, match="not in its mask"):
        _run(_not_in_mask, 1, 32, np.zeros(32, np.int64))
    with pytest.raises(simwarp.WarpSyncError, match="different warp intrinsics"):
        _run(_mixed_ops, 1, 32, np.zeros(32, np.int64))


@sim_only
def test_install_is_idempotent_and_off_without_simulator(monkeypatch):
    from numba.cuda.simulator import kernel, kernelapi

    run = kernel.BlockThread.run
    assert simwarp.install() is True and simwarp.install() is True
    assert kernel.BlockThread.run is run  # not wrapped twice
    assert simwarp.installed()
    for name in simwarp.INTRINSICS:
        assert callable(getattr(kernelapi.FakeCUDAModule, name))
    monkeypatch.setattr(config, "ENABLE_CUDASIM", 0)
    assert simwarp.install() is False and not simwarp.installed()


# ── what keeps the simulator quick ───────────────────────────────────────────

_ONCE_CALLS: list = []


def _warp_total(v):
    """A twin-like helper: every lane's value in, the warp's sum (made once) out."""

    def total(buf, members):
        _ONCE_CALLS.append(members)
        if any(buf[i][1] < 0 for i in simwarp._lanes(members)):
            raise ValueError("a negative deposit")
        return sum(buf[i][1] for i in simwarp._lanes(members))

    got, _, _ = simwarp._exchange("warp_total", FULL, v, once=total)
    return got


@cuda.jit
def _totals(x, out):
    t = cuda.threadIdx.x
    out[t, 0] = _warp_total(x[t])
    out[t, 1] = _warp_total(2 * x[t])


@sim_only
def test_an_exchange_with_once_computes_it_once_a_warp_instruction_for_every_lane():
    _ONCE_CALLS.clear()
    x = np.arange(64, dtype=np.int64)
    (_, out) = _run(_totals, 1, 64, x, np.zeros((64, 2), np.int64))
    assert len(_ONCE_CALLS) == 4 and set(_ONCE_CALLS) == {FULL}  # two warps, two instructions each
    want = np.repeat([x[:32].sum(), x[32:].sum()], 32)
    assert (out[:, 0] == want).all() and (out[:, 1] == 2 * want).all()


@sim_only
def test_a_once_that_raises_is_reported_by_the_warp_not_hung():
    x = np.arange(64, dtype=np.int64)
    x[40] = -1  # warp 1's deposits
    t0 = time.monotonic()
    with pytest.raises(simwarp.WarpSyncError, match="warp_total: ValueError: a negative deposit"):
        _run(_totals, 1, 64, x, np.zeros((64, 2), np.int64))
    assert time.monotonic() - t0 < 10


_SEEN: list = []


def _record_warp_module_cuda():
    from leverctl_kernels.common import warp

    _SEEN.append(type(vars(warp)["cuda"]).__name__)


@cuda.jit
def _sums_through_the_package(x, out):
    from leverctl_kernels.common import warp

    t = cuda.threadIdx.x
    v = x[t]
    for _ in range(4):
        v = warp.warp_sum(v)  # a device function of the package, called four times a lane
    out[t] = v
    if t == 0:
        _record_warp_module_cuda()


@sim_only
def test_a_block_calls_the_packages_device_functions_directly_and_restores_their_modules(monkeypatch):
    """Inside a block the package's modules see the launch's simulated
    ``cuda`` and a device call skips Numba's per-call swap; after the launch
    each module has the real one back."""
    from numba.cuda.simulator import kernel

    from leverctl_kernels.common import warp

    calls = []
    orig = kernel.swapped_cuda_module

    def counted(fn, fake):
        calls.append(getattr(fn, "__name__", "?"))
        return orig(fn, fake)

    monkeypatch.setattr(kernel, "swapped_cuda_module", counted)
    _SEEN.clear()
    x = np.ones(32, dtype=np.int64)
    (_, out) = _run(_sums_through_the_package, 1, 32, x, np.zeros(32, np.int64))
    assert out[0] == 32**4  # lane 0 holds the warp's sum, four times over
    assert _SEEN == ["FakeCUDAModule"]
    assert "warp_sum" not in calls, calls  # 128 device calls, none swapped one by one
    assert vars(warp)["cuda"] is cuda


@cuda.jit
def _unwritten_reads(f, i, u, d):
    """Each lane reads a word of static shared, local and dynamic shared
    memory that no thread wrote, and one that it wrote itself."""
    t = cuda.threadIdx.x
    sf = cuda.shared.array(64, np.float32)
    si = cuda.shared.array(64, np.int32)
    loc = cuda.local.array(2, np.uint16)
    dyn = cuda.shared.array(0, np.float32)
    sf[t] = 1.0
    si[t] = 2
    loc[0] = 3
    dyn[t] = 4.0
    cuda.syncthreads()
    f[t, 0], f[t, 1] = sf[t + 32], sf[t]
    i[t, 0], i[t, 1] = si[t + 32], si[t]
    u[t, 0], u[t, 1] = loc[1], loc[0]
    d[t, 0], d[t, 1] = dyn[t + 32], dyn[t]


@sim_only
def test_the_simulator_poisons_shared_and_local_memory_a_kernel_has_not_written():
    """A GPU leaves shared and local memory holding whatever was there; the
    simulator fills them with poison (every byte 0xFF) rather than the
    host's leftovers (``np.empty``: an earlier test's infinities) or zeros
    (the dynamic buffer), so a read before a write is the same in every run:
    NaN as a float, -1 signed, the largest value unsigned. What a thread
    wrote reads back."""
    f, i, u, d = (np.zeros((32, 2), t) for t in (np.float32, np.int32, np.uint16, np.float32))
    dev = [cuda.to_device(a) for a in (f, i, u, d)]
    _unwritten_reads[1, 32, 0, 64 * 4](*dev)
    f, i, u, d = (a.copy_to_host() for a in dev)
    assert np.isnan(f[:, 0]).all() and (f[:, 1] == 1).all()
    assert (i[:, 0] == -1).all() and (i[:, 1] == 2).all()
    assert (u[:, 0] == 0xFFFF).all() and (u[:, 1] == 3).all()
    assert np.isnan(d[:, 0]).all() and (d[:, 1] == 4).all()
    assert simwarp.POISON_BYTE == 0xFF


@sim_only
def test_a_scalar_cast_in_the_simulator_is_numbas_own():
    """The simulator's fast scalar casts (``uint32(x)`` in a kernel) give
    what Numba's ``Type.__call__`` gives: the same NumPy type and value for
    every scalar type and argument kind, and a signature where an argument
    is a type."""
    import warnings

    import numba
    from numba.core import types
    from numba.core.types import abstract

    numbas = abstract.Type.__call__  # the installed casts are on the scalar classes, not on Type
    assert types.uint32.__class__.__call__ is not numbas
    values = (0, 7, -1, 2**31 + 5, 1.75, -2.5, True, np.int64(300), np.float32(0.1), np.uint8(255), np.float16(3))
    warnings.simplefilter("ignore", RuntimeWarning)  # NumPy's overflow warnings, the same both ways
    for ty in (types.int8, types.uint8, types.int32, types.uint32, types.int64, types.uint64):
        for v in values:
            if isinstance(v, float) and v < 0 and ty.name.startswith("u"):
                continue  # a negative float to an unsigned type is undefined in C and NumPy alike
            try:
                want = numbas(ty, v)
            except (OverflowError, ValueError) as e:
                with pytest.raises(type(e)):
                    ty(v)
                continue
            got = ty(v)
            assert type(got) is type(want) and got == want, (ty, v, got, want)
    for ty in (types.float16, types.float32, types.float64, types.boolean):
        for v in values:
            want, got = numbas(ty, v), ty(v)
            assert type(got) is type(want) and got == want, (ty, v, got, want)
    assert numba.int32(types.int32[:]) == numbas(types.int32, types.int32[:])  # a signature, as before
