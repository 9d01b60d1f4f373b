"""Warp intrinsics for Numba's CUDA simulator.

The simulator (``NUMBA_ENABLE_CUDASIM=1``) runs the kernel's Python once per
thread of a block and swaps a ``FakeCUDAModule`` into the kernel's globals,
but that module has no ``shfl_*_sync``, vote, ``syncwarp`` or ``activemask``.
:func:`install` adds them, so one kernel source runs unchanged on a GPU and in
the simulator. It is idempotent and does nothing when the simulator is off.

It also replaces the simulator's block runner (:func:`_run_block`): Numba's
starts one OS thread per simulated thread; here each is a greenlet, a call
stack of its own that the runner switches to until it waits (a barrier, a
warp intrinsic), in one OS thread. :func:`current_lane` is the running one,
what ``threading.current_thread()`` was to Numba's simulator, and what its
API module now asks.

Model
-----
* warp = linear thread id // 32, lane = linear thread id % 32, with the
  linear id ``x + bx * (y + by * z)`` as in CUDA (the simulator's
  ``BlockThread.thread_id``).
* The lanes taking part in a call are ``mask`` restricted to the lanes the
  block has (the last warp of a 48-thread block has lanes 0..15). The
  caller's own lane must be in ``mask``.
* Each simulated block (one ``BlockManager``) keeps, per (warp, effective
  mask), an exchange: one slot per lane in each of two buffers and a
  generation counter; a lane that is not the last to arrive yields to the
  block's runner until the generation moves on. Generation ``g`` writes and
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
A waiting lane raises when the simulator aborts the block (another lane
raised: the block reports that first exception), when a lane named in the
mask has returned from the kernel without arriving (``WarpSyncError``), or
when lanes of one barrier called different intrinsics; and the runner
raises ``WarpSyncError`` as soon as a round of the lanes brings no arrival
anywhere (lanes waiting in a warp intrinsic for lanes that wait at a
barrier or in another): a deadlock, told at once rather than after a time.
"""

from __future__ import annotations

import contextlib
import sys
import threading

import numpy as np

WARP_SIZE = 32
FULL_MASK = 0xFFFFFFFF

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
_RUNNER_ATTR = "_leverctl_simwarp_runner"  # per-BlockManager: the greenlet that runs its lanes
_PROGRESS_ATTR = "_leverctl_simwarp_progress"  # per-BlockManager: arrivals so far (a round without one: deadlock)
_WAITING_ATTR = "_leverctl_simwarp_waiting"  # on a lane: (intrinsic, warp, lanes missing) while it waits in one
_SPIN_ATTR = "_leverctl_simwarp_spinning"  # on a lane: what it polls for (``spin``)
_MARK_ATTR = "_leverctl_simwarp_installed"  # on FakeCUDAModule
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

    __slots__ = ("members", "gen", "arrived", "bufs", "errors", "results")

    def __init__(self, members: int):
        self.members = members
        self.gen = 0
        self.arrived = 0  # bitmask of lanes arrived in the current generation
        self.bufs = ([None] * WARP_SIZE, [None] * WARP_SIZE)
        self.errors = [None, None]  # per buffer: lanes disagreed on the op
        self.results = [None, None]  # per buffer: what ``once`` made of it


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


_running = threading.local()  # .lane: the lane the calling OS thread's block runner has switched to


def current_lane():
    """The simulated thread (Numba's ``BlockThread``) running now, or, outside
    a simulated block, the calling OS thread: what ``threading.current_thread``
    answered when every lane was a thread of its own."""
    lane = getattr(_running, "lane", None)
    return lane if lane is not None else threading.current_thread()


def _current():
    t = current_lane()
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
    gen = ex.gen
    slot = gen & 1
    buf = ex.bufs[slot]
    buf[lane] = (kind, value)
    ex.arrived |= 1 << lane
    _progress(t)
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
    else:
        while ex.gen == gen:
            if t.abort:
                raise RuntimeError("abort flag set while waiting in %s" % kind)
            gone = st.exited.get(warp, 0) & members & ~ex.arrived
            if gone:
                raise WarpSyncError(
                    "%s: %s waits for lanes %s of warp %d that returned from "
                    "the kernel without reaching it (mask %#x)" % (kind, _where(t), list(_lanes(gone)), warp, members)
                )
            t.__dict__[_WAITING_ATTR] = (kind, warp, members & ~ex.arrived)
            _yield(t)
        t.__dict__[_WAITING_ATTR] = None
    if ex.errors[slot] is not None:
        raise WarpSyncError(ex.errors[slot])
    return (buf if once is None else ex.results[slot]), members, lane


def _lane_exited(thread) -> None:
    """A lane returned normally: the lanes that wait for it in a warp
    intrinsic see it gone and report it."""
    st = _block_state(thread)
    warp, lane = divmod(thread.thread_id, WARP_SIZE)
    st.exited[warp] = st.exited.get(warp, 0) | (1 << lane)
    _progress(thread)


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


def _progress(thread) -> None:
    """A lane of ``thread``'s block arrived somewhere (a barrier, a warp
    intrinsic, the kernel's end): the block is not deadlocked."""
    d = thread._manager.__dict__
    d[_PROGRESS_ATTR] = d.get(_PROGRESS_ATTR, 0) + 1


def _yield(thread) -> None:
    """Hand the interpreter back to ``thread``'s block runner; it switches back
    to this lane when the lane may go on (a barrier opened) or should look
    again (a warp intrinsic's other lanes)."""
    thread._manager.__dict__[_RUNNER_ATTR].switch()


def spin(what: str = "an mbarrier phase") -> None:
    """A lane polling for something other lanes (or the copies they issued)
    will make true, such as an mbarrier's phase: hand the interpreter to
    the block's other lanes; the runner comes back to this one in its next
    round. A round in which every live lane only polled is a deadlock,
    reported with ``what`` this lane waited for."""
    t = _current()
    if t.abort:
        raise RuntimeError("abort flag set while polling")
    t.__dict__[_SPIN_ATTR] = what
    try:
        _yield(t)
    finally:
        t.__dict__.pop(_SPIN_ATTR, None)


def _run_block(manager, grid_point, *args):
    """The simulator's block runner (``BlockManager.run``). Numba's starts an
    OS thread per lane and polls them; here every lane is a greenlet (a
    Python call stack of its own, switched to and from in this thread), and
    the runner takes the live lanes in turn, each until it waits: at a
    barrier, which opens once every live lane is at it, or in a warp
    intrinsic whose other lanes have not all arrived. Lanes of one block
    never ran in parallel (they shared the interpreter's lock), but each
    barrier and each warp instruction woke every waiting lane through the
    OS: most of a small kernel's time. What a block does is Numba's: the
    lanes run the kernel, a lane's exception aborts the block and is raised.
    A round in which no lane arrived anywhere is a deadlock (lanes waiting
    in a warp intrinsic for lanes that wait at a barrier or in another),
    reported at once as a :class:`WarpSyncError`."""
    from greenlet import getcurrent, greenlet
    from numba.cuda.simulator import kernel as simkernel

    def target():
        manager._f(*args)

    lanes = [
        simkernel.BlockThread(target, manager, grid_point, block_point, manager._debug)
        for block_point in np.ndindex(*manager._block_dim)
    ]
    d = manager.__dict__
    d[_RUNNER_ATTR] = runner = getcurrent()
    d[_PROGRESS_ATTR] = 0
    live = [(t, greenlet(t.run, runner)) for t in lanes]
    outer = getattr(_running, "lane", None)  # a launch from inside a lane (the simulator has none on a GPU)
    failed = None
    try:
        while live:
            before = d[_PROGRESS_ATTR]
            for t, g in live:
                if t.syncthreads_blocked:
                    continue
                _running.lane = t
                g.switch()
                _running.lane = outer
                if t.exception:
                    failed = t
                    break
            if failed is not None:
                break
            live = [(t, g) for t, g in live if not g.dead]
            if live and all(t.syncthreads_blocked for t, _ in live):
                for t, _ in live:
                    t.syncthreads_blocked = False
            elif live and d[_PROGRESS_ATTR] == before:
                raise WarpSyncError(_deadlock([t for t, _ in live]))
    finally:
        _running.lane = outer
        if any(not g.dead for _, g in live):
            # Abort the lanes still waiting: unwound now (their ``finally``
            # blocks run), not whenever the collector finds them.
            for t, _ in live:
                t.abort = True
            for t, g in live:
                if not g.dead:
                    _running.lane = t
                    g.throw()
            _running.lane = outer
    if failed is not None:
        raise failed.exception[0].with_traceback(failed.exception[1])


def _deadlock(live) -> str:
    """What a block none of whose lanes can go on waits for."""
    at_barrier = [t.thread_id for t in live if t.syncthreads_blocked]
    where = "%d lanes of the block wait at a barrier%s" % (
        len(at_barrier),
        ", threads %s" % at_barrier[:8] if at_barrier else "",
    )
    for t in live:
        polled = None if t.syncthreads_blocked else t.__dict__.get(_SPIN_ATTR)
        if polled is not None:
            return "%s polls %s, which no lane can complete (%s)" % (_where(t), polled, where)
    for t in live:
        waiting = None if t.syncthreads_blocked else t.__dict__.get(_WAITING_ATTR)
        if waiting is not None:
            kind, warp, missing = waiting
            return "%s: %s waits for lanes %s of warp %d, which never arrive (%s)" % (
                kind,
                _where(t),
                list(_lanes(missing)),
                warp,
                where,
            )
    return "the block's lanes wait and none can go on (%s)" % where


def _syncthreads(thread):
    """Numba's ``BlockThread.syncthreads`` for lanes run by :func:`_run_block`:
    the lane waits at the barrier until every live lane of its block is there."""
    if thread.abort:
        raise RuntimeError("abort flag set on syncthreads call")
    thread.syncthreads_blocked = True
    _progress(thread)
    _yield(thread)
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


_CAST_ATTR = "_leverctl_simwarp_cast"  # on a numba scalar type: the numpy constructor its cast calls


def _fast_scalar_call(orig):
    """Numba's ``Type.__call__`` for its scalar types, as a kernel calls them
    on a value (``uint32(k * 8 + j)``, ``float32(x)``): numba's imports its
    signature helper, asks the ABC machinery whether the argument is a type,
    then looks the numpy constructor up by name, on every call; a GEMM's inner
    loop makes millions of them in the simulator. Here the constructor is
    found once a type and the plain-value check once an argument class, and
    the result is the same numpy scalar (``cast_python_value``'s). Anything
    else (a signature ``int32(int32[:])``, a type whose cast is its own) is
    numba's call."""
    from numba.core.types import abstract, scalars

    standard = {
        scalars.Integer.cast_python_value,
        scalars.Float.cast_python_value,
        scalars.Boolean.cast_python_value,
    }
    plain: dict[type, bool] = {}  # argument class -> not a numba type

    def __call__(self, *args):
        if len(args) == 1:
            cls = args[0].__class__
            ok = plain.get(cls)
            if ok is None:
                ok = plain[cls] = not issubclass(cls, abstract.Type)
            if ok:
                ctor = self.__dict__.get(_CAST_ATTR)
                if ctor is None:
                    ctor = False
                    if type(self).cast_python_value in standard:
                        ctor = bool if isinstance(self, scalars.Boolean) else getattr(np, self.name)
                    self.__dict__[_CAST_ATTR] = ctor
                if ctor is not False:
                    return ctor(args[0])
        return orig(self, *args)

    return __call__


class _SimulatorThreading:
    """``threading`` as the simulator's API module sees it: the same module,
    but ``current_thread()`` is the running lane (:func:`current_lane`)."""

    current_thread = staticmethod(current_lane)

    def __getattr__(self, name):
        return getattr(threading, name)


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
        block_thread.syncthreads = _syncthreads
        # The simulator's API finds the calling lane (its threadIdx, its
        # barrier) as ``threading.current_thread()``; the lanes are greenlets
        # of one thread now (_run_block).
        kernelapi.threading = _SimulatorThreading()
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

        from numba.core.types import abstract, scalars

        fast = _fast_scalar_call(abstract.Type.__call__)
        for cls in (scalars.Integer, scalars.Float, scalars.Boolean):
            cls.__call__ = fast
        setattr(fake, _MARK_ATTR, True)
    return True
