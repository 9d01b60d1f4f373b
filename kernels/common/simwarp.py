"""Warp intrinsics for Numba's CUDA simulator.

The simulator (``NUMBA_ENABLE_CUDASIM=1``) runs every thread of a block as a
Python thread and swaps a ``FakeCUDAModule`` into the kernel's globals, but
that module has no ``shfl_*_sync``, vote, ``syncwarp`` or ``activemask``.
:func:`install` adds them, so one kernel source runs unchanged on a GPU and in
the simulator. It is idempotent and does nothing when the simulator is off.

Model
-----
* warp = linear thread id // 32, lane = linear thread id % 32, with the
  linear id ``x + bx * (y + by * z)`` as in CUDA (the simulator's
  ``BlockThread.thread_id``).
* The lanes taking part in a call are ``mask`` restricted to the lanes the
  block has (the last warp of a 48-thread block has lanes 0..15). The
  caller's own lane must be in ``mask``.
* Each simulated block (one ``BlockManager``) keeps, per (warp, effective
  mask), an exchange: one slot per lane in each of two buffers and a reusable
  barrier (a Condition plus a generation counter). Generation ``g`` writes and
  reads buffer ``g % 2``: nobody can write that buffer again (generation
  ``g + 2``) before every lane has arrived at ``g + 1``, i.e. finished
  reading ``g``. So one barrier per call suffices, in loops too.
* Warps that never call an intrinsic never join a barrier, so a branch only
  some warps take is fine; ``cuda.syncthreads`` is untouched and a lane only
  waits here for lanes of its own mask.

Semantics (PTX ``shfl.sync`` with width 32; lane operands use their low 5 bits)
------------------------------------------------------------------------------
* ``shfl_sync(m, v, src)``: value of lane ``src & 31``.
* ``shfl_up_sync(m, v, d)``: lane ``lane - d`` if ``>= 0``, else own ``v``.
* ``shfl_down_sync(m, v, d)``: lane ``lane + d`` if ``< 32``, else own ``v``.
* ``shfl_xor_sync(m, v, x)``: lane ``lane ^ x``.
* Reading a lane outside the effective mask is undefined on a GPU; here it
  returns the caller's own value. The result has the caller's value type.
* ``ballot_sync`` returns the mask (an unsigned Python int) of lanes in the
  effective mask whose predicate is true. On a GPU the result is typed int32,
  so lane 31 makes it negative there: test bits or use ``cuda.popc`` and store
  it into uint32 arrays. ``activemask`` likewise returns the lanes the block
  has in the caller's warp (the simulator cannot see divergence).
* ``all_sync``/``any_sync``/``eq_sync`` return bools; ``match_any_sync`` and
  ``match_all_sync`` as in CUDA; ``syncwarp(mask=0xFFFFFFFF)`` is a barrier;
  ``lanemask_lt`` is ``(1 << lane) - 1``.

Errors instead of hangs
-----------------------
Waits poll every ``POLL_S`` and raise when the simulator aborts the block
(another thread raised: the simulator reports that first exception), when a
lane named in the mask has returned from the kernel without arriving
(``WarpSyncError``), when lanes of one barrier called different intrinsics,
or when no lane arrived for ``STALL_S`` seconds.
"""

from __future__ import annotations

import threading
import time

import numpy as np

WARP_SIZE = 32
FULL_MASK = 0xFFFFFFFF
POLL_S = 0.05  # how often a waiting lane checks for abort / exited peers
STALL_S = 120.0  # no arrival at a barrier for this long: report a deadlock

# The memory tracer's hook (``leverctl.profile.memtrace``), None unless a
# trace is running. A twin that emulates one wide hardware memory access
# element by element (``ldmatrix``, ``st.shared.v4``) calls
# ``arr = TRACE_HOOK(kind, arr, byte_offset, nbytes)`` when it is set
# ("load" or "store"; ``byte_offset`` from ``arr``'s first element): the
# tracer counts the one access the hardware makes, by the calling lane, and
# returns the array for the twin to read untraced.
TRACE_HOOK = None

_STATE_ATTR = "_leverctl_simwarp"  # per-BlockManager state
_MARK_ATTR = "_leverctl_simwarp_installed"  # on FakeCUDAModule
BLOCK_POLL_S = 1e-3  # how long the block's runner sleeps between its looks at the lanes
_install_lock = threading.Lock()
_state_lock = threading.Lock()
_lanes_cache: dict[int, tuple[int, ...]] = {}


class WarpSyncError(RuntimeError):
    """A warp intrinsic was used in a way that would hang or is undefined."""


def _lanes(members: int) -> tuple[int, ...]:
    lanes = _lanes_cache.get(members)
    if lanes is None:
        lanes = tuple(i for i in range(WARP_SIZE) if (members >> i) & 1)
        _lanes_cache[members] = lanes
    return lanes


class _Exchange:
    """Slots and a reusable barrier for one (warp, effective mask)."""

    __slots__ = ("cond", "members", "gen", "arrived", "bufs", "errors", "last_arrival")

    def __init__(self, members: int):
        self.cond = threading.Condition(threading.Lock())
        self.members = members
        self.gen = 0
        self.arrived = 0  # bitmask of lanes arrived in the current generation
        self.bufs = ([None] * WARP_SIZE, [None] * WARP_SIZE)
        self.errors = [None, None]  # per buffer: lanes disagreed on the op
        self.last_arrival = time.monotonic()


class _BlockWarps:
    """Warp state of one simulated block."""

    def __init__(self, block_dim):
        n = 1
        for d in block_dim:
            n *= int(d)
        self.nthreads = n
        self.exchanges: dict[tuple[int, int], _Exchange] = {}
        self.exited: dict[int, int] = {}  # warp -> mask of lanes that returned

    def present(self, warp: int) -> int:
        n = min(WARP_SIZE, self.nthreads - warp * WARP_SIZE)
        return (1 << n) - 1 if n > 0 else 0

    def exchange(self, warp: int, members: int) -> _Exchange:
        key = (warp, members)
        ex = self.exchanges.get(key)
        if ex is None:
            with _state_lock:
                ex = self.exchanges.get(key)
                if ex is None:
                    ex = self.exchanges[key] = _Exchange(members)
        return ex


def _block_state(thread) -> _BlockWarps:
    mgr = thread._manager
    st = getattr(mgr, _STATE_ATTR, None)
    if st is None:
        with _state_lock:
            st = getattr(mgr, _STATE_ATTR, None)
            if st is None:
                st = _BlockWarps(mgr._block_dim)
                setattr(mgr, _STATE_ATTR, st)
    return st


def _current():
    t = threading.current_thread()
    if not hasattr(t, "_manager") or not hasattr(t, "thread_id"):
        raise RuntimeError("warp intrinsics can only run inside a simulated kernel")
    return t


def _where(t) -> str:
    return "tid=%s ctaid=%s" % (list(t.threadIdx), list(t.blockIdx))


def _exchange(kind: str, mask, value):
    """Deposit ``value``, wait for every lane of the effective mask, and
    return (slots, members, lane). Slots are stable until the caller's next
    call on the same mask (double buffering)."""
    t = _current()
    if t.abort:
        raise RuntimeError("abort flag set on %s call" % kind)
    warp, lane = divmod(t.thread_id, WARP_SIZE)
    st = _block_state(t)
    members = int(mask) & FULL_MASK & st.present(warp)
    if not (members >> lane) & 1:
        raise WarpSyncError(
            "%s: %s (warp %d lane %d) is not in its mask %#x" % (kind, _where(t), warp, lane, int(mask) & FULL_MASK)
        )
    ex = st.exchange(warp, members)
    with ex.cond:
        gen = ex.gen
        slot = gen & 1
        buf = ex.bufs[slot]
        buf[lane] = (kind, value)
        ex.arrived |= 1 << lane
        ex.last_arrival = time.monotonic()
        if ex.arrived == members:
            # Last lane in: check all lanes did the same thing, open the barrier.
            kinds = {buf[i][0] for i in _lanes(members)}
            ex.errors[slot] = (
                None
                if len(kinds) == 1
                else "lanes of warp %d (mask %#x) called different warp "
                "intrinsics at once: %s" % (warp, members, ", ".join(sorted(kinds)))
            )
            ex.arrived = 0
            ex.gen = gen + 1
            ex.cond.notify_all()
        else:
            while ex.gen == gen:
                if t.abort:
                    raise RuntimeError("abort flag set while waiting in %s" % kind)
                gone = st.exited.get(warp, 0) & members & ~ex.arrived
                if gone:
                    raise WarpSyncError(
                        "%s: %s waits for lanes %s of warp %d that returned from "
                        "the kernel without reaching it (mask %#x)"
                        % (kind, _where(t), list(_lanes(gone)), warp, members)
                    )
                if time.monotonic() - ex.last_arrival > STALL_S:
                    missing = members & ~ex.arrived
                    raise WarpSyncError(
                        "%s: %s stalled: lanes %s of warp %d never arrived "
                        "(mask %#x)" % (kind, _where(t), list(_lanes(missing)), warp, members)
                    )
                ex.cond.wait(POLL_S)
    if ex.errors[slot] is not None:
        raise WarpSyncError(ex.errors[slot])
    return buf, members, lane


def _lane_exited(thread) -> None:
    """A lane returned normally: wake whoever waits for it so they can report."""
    st = _block_state(thread)
    warp, lane = divmod(thread.thread_id, WARP_SIZE)
    with _state_lock:
        st.exited[warp] = st.exited.get(warp, 0) | (1 << lane)
        exchanges = [ex for (w, _), ex in st.exchanges.items() if w == warp]
    for ex in exchanges:
        with ex.cond:
            ex.cond.notify_all()


def _same_type(got, like):
    # Lanes hold the same type in a well-typed kernel; cast when a lane passed,
    # say, a Python int where others passed numpy scalars.
    if type(got) is type(like):
        return got
    try:
        return type(like)(got)
    except (TypeError, ValueError):
        return got


def _read(buf, members, src, value):
    if 0 <= src < WARP_SIZE and (members >> src) & 1:
        return _same_type(buf[src][1], value)
    return value  # out of range: own value (PTX); inactive source: undefined


# --- the intrinsics (become FakeCUDAModule methods) ------------------------


def shfl_sync(self, mask, value, src_lane):
    buf, members, _ = _exchange("shfl_sync", mask, value)
    return _read(buf, members, int(src_lane) & 31, value)


def shfl_up_sync(self, mask, value, delta):
    buf, members, lane = _exchange("shfl_up_sync", mask, value)
    return _read(buf, members, lane - (int(delta) & 31), value)


def shfl_down_sync(self, mask, value, delta):
    buf, members, lane = _exchange("shfl_down_sync", mask, value)
    return _read(buf, members, lane + (int(delta) & 31), value)


def shfl_xor_sync(self, mask, value, lane_mask):
    buf, members, lane = _exchange("shfl_xor_sync", mask, value)
    return _read(buf, members, lane ^ (int(lane_mask) & 31), value)


def ballot_sync(self, mask, predicate):
    buf, members, _ = _exchange("ballot_sync", mask, bool(predicate))
    out = 0
    for i in _lanes(members):
        if buf[i][1]:
            out |= 1 << i
    return out


def all_sync(self, mask, predicate):
    buf, members, _ = _exchange("all_sync", mask, bool(predicate))
    return all(buf[i][1] for i in _lanes(members))


def any_sync(self, mask, predicate):
    buf, members, _ = _exchange("any_sync", mask, bool(predicate))
    return any(buf[i][1] for i in _lanes(members))


def eq_sync(self, mask, predicate):
    buf, members, _ = _exchange("eq_sync", mask, bool(predicate))
    return len({buf[i][1] for i in _lanes(members)}) == 1


def match_any_sync(self, mask, value):
    buf, members, _ = _exchange("match_any_sync", mask, value)
    out = 0
    for i in _lanes(members):
        if buf[i][1] == value:
            out |= 1 << i
    return out


def match_all_sync(self, mask, value):
    buf, members, _ = _exchange("match_all_sync", mask, value)
    same = all(buf[i][1] == value for i in _lanes(members))
    return (members, True) if same else (0, False)


def syncwarp(self, mask=FULL_MASK):
    _exchange("syncwarp", mask, None)


def activemask(self):
    t = _current()
    return _block_state(t).present(t.thread_id // WARP_SIZE)


def lanemask_lt(self):
    return (1 << (_current().thread_id % WARP_SIZE)) - 1


_INTRINSICS = {
    f.__name__: f
    for f in (
        shfl_sync,
        shfl_up_sync,
        shfl_down_sync,
        shfl_xor_sync,
        ballot_sync,
        all_sync,
        any_sync,
        eq_sync,
        match_any_sync,
        match_all_sync,
        syncwarp,
        activemask,
        lanemask_lt,
    )
}
INTRINSICS: tuple[str, ...] = tuple(_INTRINSICS)


def _run_block(manager, grid_point, *args):
    """The simulator's block runner (``BlockManager.run``), sleeping between
    its looks at the lanes. Numba's polls them in a busy loop: the lanes are
    Python threads, so that loop held the interpreter a switch interval at a
    time while the lanes waited to compute, and every barrier waited for it
    to come round. Sleeping hands the interpreter to the lanes; a barrier
    all lanes have reached is opened within ``BLOCK_POLL_S``. What it does is
    Numba's: start a thread per lane, open a barrier once every live lane is
    blocked at it, abort the block on a lane's exception and raise it."""
    from numba.cuda.simulator import kernel as simkernel

    threads = []
    for block_point in np.ndindex(*manager._block_dim):

        def target():
            manager._f(*args)

        t = simkernel.BlockThread(target, manager, grid_point, block_point, manager._debug)
        t.start()
        threads.append(t)
    live = list(threads)
    while live:
        time.sleep(BLOCK_POLL_S)
        for t in live:
            if t.exception:
                for other in threads:  # abort the others; no join, as Numba's
                    other.abort = True
                    other.syncthreads_blocked = False
                    other.syncthreads_event.set()
                raise t.exception[0].with_traceback(t.exception[1])
        live = [t for t in live if t.is_alive()]
        if live and all(t.syncthreads_blocked for t in live):
            for t in live:
                t.syncthreads_blocked = False
                t.syncthreads_event.set()
    for t in threads:
        if t.exception:
            raise t.exception[0].with_traceback(t.exception[1])


def installed() -> bool:
    """True when the simulator is on and :func:`install` has run."""
    from numba import config

    if not config.ENABLE_CUDASIM:
        return False
    from numba.cuda.simulator import kernelapi

    return bool(getattr(kernelapi.FakeCUDAModule, _MARK_ATTR, False))


def install() -> bool:
    """Add the warp intrinsics to the simulator. Returns True when the
    simulator is on (installed now or before), False (doing nothing) on a GPU.
    """
    from numba import config

    if not config.ENABLE_CUDASIM:
        return False
    from numba.cuda.simulator import kernel as simkernel
    from numba.cuda.simulator import kernelapi

    with _install_lock:
        fake = kernelapi.FakeCUDAModule
        if getattr(fake, _MARK_ATTR, False):
            return True
        for name, fn in _INTRINSICS.items():
            setattr(fake, name, fn)

        # Hook thread exit so a lane that returns early is known to the lanes
        # that wait for it (otherwise they would wait forever).
        block_thread = simkernel.BlockThread
        orig_run = block_thread.run

        def run(thread):
            try:
                orig_run(thread)
            finally:
                # On an exception the simulator aborts the block and reports
                # it; waiting lanes see the abort flag.
                if thread.exception is None:
                    _lane_exited(thread)

        block_thread.run = run

        simkernel.BlockManager.run = _run_block
        setattr(fake, _MARK_ATTR, True)
    return True
