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

Memory a kernel has not written
-------------------------------
:func:`install` also makes the simulator's shared (static and dynamic) and
local arrays :func:`poisoned`: every byte ``0xFF`` (NaN, -1), as the bench
poisons outputs, rather than the host allocator's leftovers or zeros.

Errors instead of hangs
-----------------------
Waits poll every ``POLL_S`` and raise when the simulator aborts the block
(another thread raised: the simulator reports that first exception), when a
lane named in the mask has returned from the kernel without arriving
(``WarpSyncError``), when lanes of one barrier called different intrinsics,
or when no lane arrived for ``STALL_S`` seconds.
"""

from __future__ import annotations

import contextlib
import sys
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

_PACKAGE = __name__.split(".")[0] + "."  # the kernels package, whose modules a block holds swapped
_STATE_ATTR = "_leverctl_simwarp"  # per-BlockManager state
_DONE_ATTR = "_leverctl_simwarp_done"  # on a lane (BlockThread) that has returned or raised
_WAKE_ATTR = "_leverctl_simwarp_wake"  # per-BlockManager: (condition, [woken]) its runner waits on
_MARK_ATTR = "_leverctl_simwarp_installed"  # on FakeCUDAModule
BLOCK_POLL_S = 0.05  # the longest the block's runner waits between looks (a lane wakes it sooner)
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

    __slots__ = ("cond", "members", "gen", "arrived", "bufs", "errors", "results", "last_arrival")

    def __init__(self, members: int):
        self.cond = threading.Condition(threading.Lock())
        self.members = members
        self.gen = 0
        self.arrived = 0  # bitmask of lanes arrived in the current generation
        self.bufs = ([None] * WARP_SIZE, [None] * WARP_SIZE)
        self.errors = [None, None]  # per buffer: lanes disagreed on the op
        self.results = [None, None]  # per buffer: what ``once`` made of it
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


def _exchange(kind: str, mask, value, once=None):
    """Deposit ``value``, wait for every lane of the effective mask, and
    return (slots, members, lane). Slots are stable until the caller's next
    call on the same mask (double buffering). With ``once``, the last lane
    in computes ``once(slots, members)`` for the whole warp before the
    others go on, and every lane gets that instead of the slots: a warp
    instruction whose result is one function of all lanes' operands (an
    MMA) is computed once, not by each of the 32 lanes."""
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
            if once is not None and ex.errors[slot] is None:
                try:
                    ex.results[slot] = once(buf, members)
                except Exception as e:  # every lane reports it
                    ex.errors[slot] = "%s: %s: %s" % (kind, type(e).__name__, e)
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
    return (buf if once is None else ex.results[slot]), members, lane


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
    """The simulator's block runner (``BlockManager.run``), woken by its
    lanes. Numba's polls them in a busy loop: the lanes are Python threads,
    so that loop held the interpreter a switch interval at a time while the
    lanes waited to compute, and every barrier waited for it to come round.
    This one waits on a condition each lane signals when it reaches a
    barrier or returns (``BLOCK_POLL_S`` at the most), so the interpreter is
    the lanes' and a barrier opens as its last lane arrives (sleeping a
    millisecond between looks, as it did before, held every barrier and
    every block's end to the next look: most of a small block's time). What
    it does is Numba's: start a thread per lane, open a barrier once every
    live lane is blocked at it, abort the block on a lane's exception and
    raise it."""
    from numba.cuda.simulator import kernel as simkernel

    wake, woken = threading.Condition(threading.Lock()), [False]
    setattr(manager, _WAKE_ATTR, (wake, woken))
    threads = []
    for block_point in np.ndindex(*manager._block_dim):

        def target():
            manager._f(*args)

        t = simkernel.BlockThread(target, manager, grid_point, block_point, manager._debug)
        t.start()
        threads.append(t)
    live = list(threads)
    while live:
        with wake:
            if not woken[0]:
                wake.wait(BLOCK_POLL_S)
            woken[0] = False
        for t in live:
            if t.exception:
                for other in threads:  # abort the others; no join, as Numba's
                    other.abort = True
                    other.syncthreads_blocked = False
                    other.syncthreads_event.set()
                raise t.exception[0].with_traceback(t.exception[1])
        live = [t for t in live if t.is_alive() and not t.__dict__.get(_DONE_ATTR)]
        if live and all(t.syncthreads_blocked for t in live):
            for t in live:
                t.syncthreads_blocked = False
                t.syncthreads_event.set()
    for t in threads:
        if t.exception:
            raise t.exception[0].with_traceback(t.exception[1])


def _wake(manager) -> None:
    """A lane of ``manager``'s block has reached a barrier or returned: its
    runner looks at the lanes now, not at its next timeout."""
    got = getattr(manager, _WAKE_ATTR, None)
    if got is not None:
        wake, woken = got
        with wake:
            woken[0] = True
            wake.notify()


def _syncthreads(thread):
    """Numba's ``BlockThread.syncthreads``, telling the block's runner it
    has arrived: the barrier opens when the last lane reaches it rather than
    at the runner's next look."""
    if thread.abort:
        raise RuntimeError("abort flag set on syncthreads call")
    thread.syncthreads_blocked = True
    _wake(thread._manager)
    thread.syncthreads_event.wait()
    thread.syncthreads_event.clear()
    if thread.abort:
        raise RuntimeError("abort flag set on syncthreads clear")


_shared_lock = threading.Lock()


def shared_allocation(shared, shape, dtype, alignment, caller) -> tuple:
    """``(array, key)`` for a ``cuda.shared.array(shape, dtype)`` call made
    from frame ``caller`` in a block whose ``FakeCUDAShared`` is ``shared``:
    as Numba's, one array per calling line of the block (``key``, its file
    and line), but found by the caller's frame rather than by a traceback of
    the whole stack (which read each frame's source line, for every lane at
    every call), and made under a lock (two lanes could each make one). The
    dynamic array (``shape`` 0) is the block's one buffer, ``key`` None.
    The memory tracer's shared arrays are these, behind its proxies."""
    from numba.cuda.simulator import kernelapi

    if alignment is not None:
        raise RuntimeError("Array alignment is not supported in cudasim")
    if isinstance(dtype, kernelapi.types.Type):
        dtype = kernelapi.numpy_support.as_dtype(dtype)
    if shape == 0:  # dynamic shared memory: every call shares one buffer
        dt = np.dtype(dtype)
        return np.frombuffer(shared._dynshared.data, dtype=dt, count=shared._dynshared_size // dt.itemsize), None
    key = (caller.f_code.co_filename, caller.f_lineno)
    with _shared_lock:
        res = shared._allocations.get(key)
        if res is None:
            res = shared._allocations[key] = poisoned(shape, dtype)
    return res, key


POISON_BYTE = 0xFF  # every float a NaN, every signed integer -1, every unsigned one its maximum


def poisoned(shape, dtype) -> np.ndarray:
    """A new array every byte of which is :data:`POISON_BYTE`: the simulator's
    shared and local memory, which a GPU leaves holding whatever was there.
    Numba's simulator made them with ``np.empty`` (the dynamic buffer with
    ``np.zeros``), so a kernel that read a word before writing it read
    whatever the host's allocator returned: zeros that hid the read in one
    run, an infinity left by an earlier test in another. Poisoned, such a
    read is the same in every run, and a NaN that reaches an output fails
    the check."""
    res = np.empty(shape, dtype)
    res.view(np.uint8).fill(POISON_BYTE)
    return res


def _shared_array(self, shape, dtype, alignment=None):
    """Numba's ``FakeCUDAShared.array``, by :func:`shared_allocation`."""
    return shared_allocation(self, shape, dtype, alignment, sys._getframe(1))[0]


def _local_array(self, shape, dtype, alignment=None):
    """Numba's ``FakeCUDALocal.array``, poisoned (:func:`poisoned`)."""
    from numba.cuda.simulator import kernelapi

    if alignment is not None:
        raise RuntimeError("Array alignment is not supported in cudasim")
    if isinstance(dtype, kernelapi.types.Type):
        dtype = kernelapi.numpy_support.as_dtype(dtype)
    return poisoned(shape, dtype)


def _poisoned_shared_init(init):
    """``FakeCUDAShared.__init__`` with the block's dynamic buffer poisoned
    (:func:`poisoned`) rather than zeroed."""

    def __init__(self, dynshared_size):
        init(self, dynshared_size)
        self._dynshared.view(np.uint8).fill(POISON_BYTE)

    return __init__


class _Globals:
    """What Numba's ``swapped_cuda_module`` reads of a function: its globals."""

    __slots__ = ("__globals__",)

    def __init__(self, g: dict):
        self.__globals__ = g


def _swapped_for_the_launch(push):
    """Numba's kernel-context manager (``_push_kernel_context``), which also
    holds every loaded module of the package swapped to the launch's
    simulated ``cuda`` until the launch ends. Numba swaps a device
    function's module globals to it around every call (a lock, a refcount
    and, whenever no other lane is inside that module, a scan of its
    globals on the way in and a restore on the way out): a GEMM's fragment
    and epilogue helpers are called thousands of times a block. Held for the
    launch, the swap is Numba's own (its refcount), and a device function of
    a swapped module is called directly (``_device_call`` in
    :func:`install`)."""
    from numba.cuda.simulator import kernelapi

    @contextlib.contextmanager
    def pushed(fake):
        with push(fake), contextlib.ExitStack() as stack:
            for name, mod in list(sys.modules.items()):
                if name.startswith(_PACKAGE) and mod is not None:
                    stack.enter_context(kernelapi.swapped_cuda_module(_Globals(vars(mod)), fake))
            yield

    return pushed


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
                thread.__dict__[_DONE_ATTR] = True  # nothing left to run: the runner need not wait for its end
                _wake(thread._manager)

        block_thread.run = run
        block_thread.syncthreads = _syncthreads
        kernelapi.FakeCUDAShared.array = _shared_array
        kernelapi.FakeCUDAShared.__init__ = _poisoned_shared_init(kernelapi.FakeCUDAShared.__init__)
        kernelapi.FakeCUDALocal.array = _local_array

        simkernel.BlockManager.run = _run_block

        # A device function called in a launch that holds its module swapped
        # (_swapped_for_the_launch) runs directly; any other call is Numba's
        # (its own swap around the call).
        simkernel._push_kernel_context = _swapped_for_the_launch(simkernel._push_kernel_context)
        orig_call = simkernel.FakeCUDAKernel.__call__
        swapped = kernelapi._swap_refcount

        def _device_call(kernel, *args):
            if kernel._device and swapped.get(id(kernel.fn.__globals__), 0):
                return kernel.fn(*args)
            return orig_call(kernel, *args)

        simkernel.FakeCUDAKernel.__call__ = _device_call
        setattr(fake, _MARK_ATTR, True)
    return True
