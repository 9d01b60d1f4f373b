"""Every global and shared access of a simulated launch, per warp instruction.

``leverctl profile`` reads a kernel variant's memory behaviour without a GPU:
it runs the variant once in Numba's CUDA simulator at a small shape and
watches every element the kernel reads or writes. What a GPU's memory system
does with an access depends on the whole warp's addresses at once, so the
accesses are regrouped into warp instructions and scored as the hardware
would serve them:

* global memory: a warp instruction's lanes' bytes are served in 32-byte
  sectors. *Sector efficiency* is the bytes used (distinct bytes the lanes
  asked for) over the bytes of the sectors touched: a float32 load with a
  stride of 8 elements uses 4 bytes of each 32-byte sector, 12.5 %. *Ideal
  sectors* are the fewest sectors that could carry the used bytes; a
  broadcast (every lane reads one word) has efficiency 12.5 % but no excess
  sector, so the sites are ranked by excess sectors, not by efficiency.
* shared memory: 32 banks of 4 bytes. A warp instruction is served in
  *wavefronts*: per phase, as many as the largest number of distinct 4-byte
  words any one bank is asked for (lanes reading the same word share it).
  Accesses of 4 bytes or less are one phase of 32 lanes, 8-byte accesses two
  phases of 16 lanes, 16-byte accesses four phases of 8 lanes (so four
  wavefronts is the conflict-free minimum there, not a conflict).
  ``ldmatrix.x4`` is eight 16-byte rows per matrix, one row per lane: four
  phases, as a 16-byte access. The *ideal* is one wavefront per phase that
  has a lane in it; *n-way* is a site's largest wavefront count in one phase.
* bytes requested: the sum of the access sizes of global loads and stores
  (and atomics), to set against the bytes a variant declares it must move.

How the accesses are seen (:func:`trace`): while a trace is active the
simulator is patched so that every array argument of a kernel and every
``cuda.shared.array`` is a :class:`TracedArray`, a proxy over the NumPy
array the simulator would have used. Indexing one element records an access
(warp and lane of the calling simulator thread in its block; the site, the
caller's code position; byte offset and size; load or store) and forwards to
the real array, so results are unchanged. Indexing that gives a sub-array (``W[row]``)
is pointer arithmetic in CUDA, not an access: it gives another proxy over
the view. Addresses are byte offsets from the start of the allocation (a
``cudaMalloc`` is 256-byte aligned, so sectors are counted as on a GPU); a
shared array's banks likewise from its start.

The accesses of one thread at one code position, reached from one call
site (a device function called from two lines is two instructions) in one
call (each device call the thread is inside, counted per site: a lane that
skips an access in one call of a helper pairs its next call's with the
others'), are numbered as they occur, afresh after each ``syncthreads`` (every thread of
the block passes the same barriers, so they are points where the lanes
agree again); the k-th access of each lane of a warp there between the
same two barriers is one warp instruction. Grouping happens block by block, when a block's threads have
all finished, and only per-site tallies are kept, so memory stays bounded.

A simulator twin of a wide hardware instruction that emulates it element by
element (``ldmatrix``, ``st.shared.v4``) reports the one access the hardware
makes through ``simwarp.TRACE_HOOK`` and then reads the array untraced.

Not seen: local arrays (``cuda.local.array``, registers or local memory),
constant memory and module-level arrays a kernel closes over, the operand
reads of the wgmma twin (the tensor cores read shared memory through matrix
descriptors, not per lane), a failed compare-and-swap (the simulator's
atomics are counted by their store), and whole-array assignments by advanced
(integer-array or boolean) indexing. The warp grouping assumes the lanes of a
warp run the same sequence of accesses at a position and call site, as
converged code does; where a lane skips an access there (a predicated-off
load inside a loop, not a call), its later ones in that call until the
next barrier pair with other lanes' earlier ones.

Pure Python and NumPy; numba is imported only when a trace starts, which
needs the simulator (``NUMBA_ENABLE_CUDASIM=1`` before ``numba.cuda`` is
first imported).
"""

from __future__ import annotations

import functools
import gc
import itertools
import operator
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np

WARP = 32
SECTOR = 32  # bytes: the unit global memory is served in
LINE = 128  # bytes: an L1/L2 cache line (four sectors)
WIDE = 16  # bytes: a 128-bit access, the widest a thread issues (``ld.global.v4.u32``)
BANKS = 32
WORD = 4  # bytes per bank word
WAVEFRONT_BYTES = BANKS * WORD  # what one shared wavefront can move (128 bytes)

GLOBAL, SHARED = "global", "shared"
LOAD, STORE, ATOMIC = "load", "store", "atomic"

_ROOT = Path(__file__).resolve().parents[2]  # the project: sites are shown relative to it
_GROUPS = "_leverctl_memtrace_groups"  # attribute on a BlockManager: its block's accesses, by warp instruction
_EPOCH = "_leverctl_memtrace_epoch"  # attribute on a simulator thread: the barriers it has passed
_PROXIES = "_leverctl_memtrace_proxies"  # attribute on a FakeCUDAShared: its arrays' proxies

_index = operator.index
_current_thread = None  # simwarp.current_lane, set when a trace starts: the lane running now
_getframe = sys._getframe


# ── the proxy ────────────────────────────────────────────────────────────────


def _data_ptr(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


def _root_of(a: np.ndarray) -> np.ndarray:
    """The array that owns ``a``'s memory (the end of its ``base`` chain)."""
    while isinstance(a.base, np.ndarray):
        a = a.base
    return a


class TracedArray:
    """A kernel's view of a global or shared array while a trace runs.

    It behaves as the NumPy array it wraps for what kernels do with arrays
    (element reads and writes, ``shape``, ``dtype``, ``len``, sub-arrays,
    ``view``/``reshape``, NumPy functions on it, being passed to device
    functions) and records every element access of a simulator thread.
    ``root`` is the address of the allocation's first byte (host address,
    used only to tell allocations apart), ``off`` the byte offset of this
    view's first element in it, ``end`` the allocation's size."""

    __slots__ = ("_ary", "_space", "_root", "_end", "_off", "_strides", "_shape", "_ndim", "_itemsize")

    def __init__(self, ary: np.ndarray, space: str, root: int, end: int):
        self._ary = ary
        self._space = space
        self._root = root
        self._end = end
        self._off = _data_ptr(ary) - root
        self._strides = ary.strides
        self._shape = ary.shape
        self._ndim = ary.ndim
        self._itemsize = ary.itemsize

    # element access ------------------------------------------------------

    def _offset(self, idx) -> int | None:
        """Byte offset of the one element ``idx`` names, None if it names
        more than one (a slice, a partial index). TypeError for an index
        that is not integers."""
        if type(idx) is tuple:
            if len(idx) != self._ndim:
                return None
            off = self._off
            for i, s, n in zip(idx, self._strides, self._shape):
                i = _index(i)
                off += (i + n if i < 0 else i) * s
            return off
        if self._ndim != 1:
            return None
        i = _index(idx)
        return self._off + (i + self._shape[0] if i < 0 else i) * self._strides[0]

    def __getitem__(self, idx):
        v = self._ary[idx]
        if type(v) is np.ndarray:  # a sub-array: an address computed, nothing read
            return self._sub(v)
        f = _getframe(1)
        if f.f_code.co_filename == _SIM_API:
            return v  # an atomic's read: the atomic is counted once, by its store
        try:
            off = self._offset(idx)
        except TypeError:
            return v
        if off is not None:
            _record(f, self, off, self._itemsize, LOAD)
        return v

    def __setitem__(self, idx, value):
        if type(value) is TracedArray:
            value = value._ary
        self._ary[idx] = value
        f = _getframe(1)
        kind = STORE
        if f.f_code.co_filename == _SIM_API:  # cuda.atomic.*: counted at the kernel's line
            kind = ATOMIC
            f = f.f_back
        try:
            off = self._offset(idx)
        except TypeError:
            off = None
        if off is not None:
            _record(f, self, off, self._itemsize, kind)
            return
        region = self._ary[idx]
        if type(region) is not np.ndarray or not self._owns(region):
            return  # advanced indexing wrote a copy's worth of elements: not seen
        # A slice assignment compiles to a loop of element stores: one per element.
        base = _data_ptr(region) - self._root
        offs = np.zeros(region.shape, dtype=np.int64) + base
        for axis, stride in enumerate(region.strides):
            shape = [1] * region.ndim
            shape[axis] = region.shape[axis]
            offs = offs + (np.arange(region.shape[axis], dtype=np.int64) * stride).reshape(shape)
        for off in offs.reshape(-1).tolist():
            _record(f, self, off, self._itemsize, kind)

    # views ---------------------------------------------------------------

    def _owns(self, a: np.ndarray) -> bool:
        p = _data_ptr(a) - self._root
        return 0 <= p < self._end or (a.size == 0 and p == self._end)

    def _sub(self, a):
        """A proxy over ``a`` if it is a view into this allocation, else ``a``
        (a copy is the thread's own, not memory the kernel addresses)."""
        if type(a) is np.ndarray and self._owns(a):
            return TracedArray(a, self._space, self._root, self._end)
        return a

    def view(self, *args, **kwargs):
        return self._sub(self._ary.view(*args, **kwargs))

    def reshape(self, *args, **kwargs):
        return self._sub(self._ary.reshape(*args, **kwargs))

    def ravel(self, *args, **kwargs):
        return self._sub(self._ary.ravel(*args, **kwargs))

    def transpose(self, *axes):
        return self._sub(self._ary.transpose(*axes))

    def squeeze(self, *args, **kwargs):
        return self._sub(self._ary.squeeze(*args, **kwargs))

    def swapaxes(self, a, b):
        return self._sub(self._ary.swapaxes(a, b))

    @property
    def T(self):
        return self._sub(self._ary.T)

    # the rest behaves as the array ------------------------------------------

    @property
    def shape(self):
        return self._shape

    @property
    def ndim(self):
        return self._ndim

    @property
    def itemsize(self):
        return self._itemsize

    @property
    def strides(self):
        return self._strides

    @property
    def dtype(self):
        return self._ary.dtype

    @property
    def size(self):
        return self._ary.size

    def __len__(self):
        return len(self._ary)

    def __iter__(self):
        return iter(self._ary)

    def __array__(self, dtype=None, copy=None):
        if dtype is None and not copy:
            return self._ary
        return np.array(self._ary, dtype=dtype, copy=bool(copy))

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        inputs = tuple(x._ary if type(x) is TracedArray else x for x in inputs)
        out = kwargs.get("out")
        if out:
            kwargs["out"] = tuple(x._ary if type(x) is TracedArray else x for x in out)
        return getattr(ufunc, method)(*inputs, **kwargs)

    def __getattr__(self, name):
        return getattr(self._ary, name)

    def __repr__(self):
        return f"TracedArray({self._space}, {self._ary!r})"


def _traced(ary: np.ndarray, space: str, root: np.ndarray | None = None) -> TracedArray:
    root = _root_of(ary) if root is None else root
    return TracedArray(ary, space, _data_ptr(root), root.nbytes)


# ── recording ────────────────────────────────────────────────────────────────

_SIM_API = ""  # the simulator's kernelapi.py (its atomics index arrays): set when a trace starts
_SIM_DIR = ""  # the simulator package: frames skipped when looking for the kernel's line
_COMMON = str(Path(__file__).resolve().parents[2] / "kernels" / "common") + "/"  # set again at start
_RUNNER = ""  # simwarp's file, whose block runner (``target``) calls the kernel in every lane (set at start)
_SKIP: tuple[str, ...] = (_COMMON, __file__)  # helpers, the simulator and this module (its patches)
_CALLS: tuple[str, ...] = (__file__,)  # the frames between a call and its callee (set at start)


# A lane's recording state, kept on the lane (a simulator thread, which lives
# one block): its (groups, counts, warp, lane, epoch), its device-call counts
# since the last barrier and the id of the device calls it is inside.
_ST = "_leverctl_memtrace_st"
_CALLS_ATTR = "_leverctl_memtrace_calls"
_STACK = "_leverctl_memtrace_stack"


def _thread_state():
    """(groups, counts, warp, lane, epoch) of the calling simulator thread
    (``epoch``: the barriers it has passed), None for
    any other thread (the host's, or a block started before the trace)."""
    t = _current_thread()
    mgr = getattr(t, "_manager", None)
    groups = None if mgr is None else mgr.__dict__.get(_GROUPS)
    if groups is None:
        return None
    warp, lane = divmod(t.thread_id, WARP)
    st = (groups, {}, warp, lane, getattr(t, _EPOCH, 0))
    t.__dict__[_ST] = st
    return st


# id(code) -> (code, per 2-byte code unit the offset of the instruction it
# belongs to); ids, not code objects, as keys: a code object's hash is
# computed from its contents on every lookup.
_starts: dict = {}


def _instruction_starts(code) -> list[int]:
    """Python 3.11 specialises instructions as they run, and a frame's
    ``f_lasti`` then points into the instruction's inline cache instead of at
    the instruction: map every code unit to its instruction's offset, so
    that one access position has one key however far it is specialised."""
    raw = code.co_code  # the unspecialised bytes: inline caches are opcode 0 (CACHE)
    out = []
    cur = 0
    for i in range(0, len(raw), 2):
        if raw[i] != 0:
            cur = i
        out.append(cur)
    _starts[id(code)] = (code, out)
    return out


def _position(frame) -> int:
    """``frame``'s current position as one int, ``id(code) << 20 |
    instruction offset`` (the start of the instruction it is in), cheap to
    hash."""
    code = frame.f_code
    cid = id(code)
    known = _starts.get(cid)
    starts = _instruction_starts(code) if known is None else known[1]
    return (cid << 20) | starts[frame.f_lasti >> 1]


def _record(frame, arr: TracedArray, off: int, size: int, kind: str) -> None:
    """One access of ``size`` bytes at byte ``off`` of ``arr``'s allocation by
    the calling thread, at ``frame``'s current position (:func:`_position`)."""
    td = _current_thread().__dict__
    st = td.get(_ST)
    if st is None:
        st = _thread_state()
        if st is None:
            return
    groups, counts, warp, lane, epoch = st
    pos = _position(frame)
    # A device function's accesses are counted per call site: one called from
    # six lines is six instructions, and a lane that skips one call (its
    # access predicated off) must not pair its next with another lane's. And
    # per call: the device calls the thread is inside, each by its site and
    # how many calls that site had made before it since the last barrier
    # (``_STACK``), so a lane that skipped an access in one call of a
    # helper (a partial tile's predicated put) still pairs its next call's
    # with the other lanes' of that call.
    g = frame.f_back
    while g is not None and g.f_code.co_filename.startswith(_CALLS):
        g = g.f_back
    stack = td.get(_STACK, 0)
    key = (pos, stack, id(g.f_code), g.f_lasti) if g is not None else (pos, stack, 0, 0)
    k = counts.get(key, 0)
    counts[key] = k + 1
    # The warp instruction this access is a lane's part of: its lanes'
    # accesses are grouped here, as they come, not kept one by one until the
    # block ends (``Trace._flush``). The first lane to reach it says which
    # kernel line reached a shared helper.
    group = (warp, key, epoch, k, kind, arr._space)
    lanes = groups.get(group)
    if lanes is None:
        lanes = groups.setdefault(group, [_via(frame, g)])
    lanes.append((lane, arr._root, off, size))


def _via(frame, g):
    """Where an access in a shared helper (``frame``, its caller ``g``)
    comes from, None for an access in a family's own kernel."""
    via = None
    if frame.f_code.co_filename.startswith(_COMMON):
        # A shared helper (mma's loaders, a twin): also say which kernel line reached it: the first
        # frame of a family's kernel, or, for a kernel of the shared engine itself (its whole stack
        # in common/, the GEMM engine's), the outermost of its own frames, the kernel's line.
        outer, started = None, False
        while g is not None and g.f_code.co_filename.startswith(_SKIP):
            if g.f_code.co_filename == _RUNNER and g.f_code.co_name == "target":
                started = True  # the block runner's call of the kernel: the kernel is above, the thread below
            elif g.f_code.co_filename.startswith(_COMMON) and not started:
                outer = g
            g = g.f_back
        at = outer if started else g
        if at is not None:
            via = (at.f_code.co_filename, at.f_lineno)
    return via


_lines: dict = {}  # position -> (file, line), filled at flush

# The device calls a thread is inside, as one int: (the enclosing calls' id,
# this call's site, the calls that site made before it) -> id, 0 for none.
# Every access's key holds it, and an int hashes at once where a tuple of
# every enclosing site hashed anew on each of the four lookups an access takes.
_stacks: dict = {}
_stack_ids = itertools.count(1)


def _stack_id(outer: int, site: int, n: int) -> int:
    key = (outer, site, n)
    got = _stacks.get(key)
    return got if got is not None else _stacks.setdefault(key, next(_stack_ids))


def _site_of(pos: int) -> tuple[str, int]:
    hit = _lines.get(pos)
    if hit is None:
        code = _starts[pos >> 20][0]
        line = list(code.co_positions())[(pos & 0xFFFFF) >> 1][0]
        hit = _lines[pos] = (code.co_filename, line if line is not None else code.co_firstlineno)
    return hit


def _hook(kind: str, arr, byte_offset: int, nbytes: int):
    """``simwarp.TRACE_HOOK`` while a trace runs: a twin reports one hardware
    access of ``nbytes`` at ``byte_offset`` in ``arr`` by the calling thread
    (the site is the twin's caller) and gets the array to read untraced."""
    if type(arr) is not TracedArray:
        return arr
    _record(_getframe(2), arr, arr._off + int(byte_offset), int(nbytes), kind)
    return arr._ary


# ── per-site tallies ─────────────────────────────────────────────────────────


class _Tally:
    """What one site (file, line, via, space, kind) added up to."""

    __slots__ = (
        "instructions",
        "accesses",
        "bytes",
        "used",
        "sectors",
        "ideal_sectors",
        "lines",
        "wide",
        "wavefronts",
        "ideal_wavefronts",
        "ways",
        "conflicted",
    )

    def __init__(self):
        self.instructions = self.accesses = self.bytes = self.used = 0
        self.sectors = self.ideal_sectors = self.lines = self.wide = 0
        self.wavefronts = self.ideal_wavefronts = self.ways = self.conflicted = 0

    def add_scaled(self, other: "_Tally", weight: float) -> None:
        """Add ``other``'s counts times ``weight`` (rounded), its worst ways
        as they are."""
        for name in self.__slots__:
            if name == "ways":
                self.ways = max(self.ways, other.ways)
            else:
                setattr(self, name, getattr(self, name) + round(getattr(other, name) * weight))

    def add_global(self, accs: list) -> None:
        """One warp instruction: ``accs`` of (lane, root, off, size)."""
        sectors = set()
        lines = set()
        spans: dict[int, list] = {}
        total = wide = 0
        for _lane, root, off, size in accs:
            total += size
            if size >= WIDE:
                wide += size
            last = off + size - 1
            for s in range(off // SECTOR, last // SECTOR + 1):
                sectors.add((root, s))
            for c in range(off // LINE, last // LINE + 1):
                lines.add((root, c))
            spans.setdefault(root, []).append((off, off + size))
        used = ideal = 0
        for iv in spans.values():
            iv.sort()
            run_lo, run_hi = iv[0]
            merged = 0
            for lo, hi in iv[1:]:
                if lo > run_hi:
                    merged += run_hi - run_lo
                    run_lo, run_hi = lo, hi
                elif hi > run_hi:
                    run_hi = hi
            merged += run_hi - run_lo
            used += merged
            ideal += -(-merged // SECTOR)
        self.instructions += 1
        self.accesses += len(accs)
        self.bytes += total
        self.wide += wide
        self.used += used
        self.sectors += len(sectors)
        self.ideal_sectors += ideal
        self.lines += len(lines)

    def add_shared(self, accs: list) -> None:
        """One warp instruction: ``accs`` of (lane, root, off, size), served
        in phases of 32, 16 or 8 lanes by access size."""
        size = max(a[3] for a in accs)
        per = WARP if size <= 4 else (16 if size <= 8 else 8)
        phases: dict[int, dict[int, set]] = {}
        total = 0
        for lane, root, off, sz in accs:
            total += sz
            banks = phases.setdefault(lane // per, {})
            for w in range(off // WORD, (off + sz - 1) // WORD + 1):
                b = banks.get(w % BANKS)
                if b is None:
                    banks[w % BANKS] = {(root, w)}
                else:
                    b.add((root, w))
        waves = ideal = ways = 0
        for banks in phases.values():
            n = max(len(words) for words in banks.values())
            words = sum(len(ws) for ws in banks.values())
            waves += n
            ideal += max(1, -(-words // BANKS))
            ways = max(ways, n)
        self.instructions += 1
        self.accesses += len(accs)
        self.bytes += total
        self.wavefronts += waves
        self.ideal_wavefronts += ideal
        self.ways = max(self.ways, ways)
        self.conflicted += waves > ideal


class Trace:
    """What a traced run saw: per-site tallies of the warp instructions, and
    the launches, blocks and thread accesses behind them. Filled while
    :func:`trace` is active; read it with :func:`summarize`.

    ``sample`` = n runs at most n blocks of each launch (:meth:`runs`);
    :attr:`sites` then scales each launch's tallies by its grid's blocks
    over the blocks run, so every figure is the whole grids' estimate."""

    def __init__(self, sample: int | None = None):
        self._tallies: dict[tuple, _Tally] = {}  # (site..., launch) -> tally
        self.launches = 0
        self.blocks = 0
        self.accesses = 0
        self.kernels: list[str] = []
        self.seconds = 0.0
        self.sample = sample
        self.grids: list[list[int]] = []  # per launch: [blocks in its grid, blocks run]
        self._lock = threading.Lock()

    def runs(self, grid_dim: tuple, grid_point: tuple) -> bool:
        """Whether the block at ``grid_point`` is run: every block, or with
        ``sample`` = n at most n of each launch's, spread evenly over the
        grid in launch order (its first and last among them)."""
        total = int(np.prod(grid_dim))
        self.grids[-1][0] = total  # (the patched __call__ opened the launch's record)
        if not self.sample or total <= self.sample:
            return True
        return int(np.ravel_multi_index(grid_point, grid_dim)) in _spread(total, self.sample)

    @property
    def grid_blocks(self) -> int:
        """The blocks of every launch's grid, run or not."""
        return sum(g[0] for g in self.grids)

    @property
    def sites(self) -> dict[tuple, _Tally]:
        """Per site (file, line, via, space, kind), its tally over every
        launch, each launch's counts times its grid over its blocks run."""
        out: dict[tuple, _Tally] = {}
        for key, t in self._tallies.items():
            total, ran = self.grids[key[-1]]
            m = out.get(key[:-1])
            if m is None:
                m = out[key[:-1]] = _Tally()
            m.add_scaled(t, total / ran)  # (a launch with a tally ran a block)
        return out

    def _flush(self, groups: dict) -> None:
        """Add one finished block's warp instructions (``_record`` grouped
        its lanes' accesses: ``(warp, site key, epoch, k, kind, space) ->
        [via, (lane, allocation, byte offset, size), ...]``) each to its
        site's tally."""
        with self._lock:
            self.blocks += 1
            self.grids[-1][1] += 1
            launch = len(self.grids) - 1
            for (_warp, at, _epoch, _k, kind, space), lanes in groups.items():
                self.accesses += len(lanes) - 1
                site = (*_site_of(at[0]), lanes[0], space, kind, launch)
                tally = self._tallies.get(site)
                if tally is None:
                    tally = self._tallies[site] = _Tally()
                if space == GLOBAL:
                    tally.add_global(lanes[1:])
                else:
                    tally.add_shared(lanes[1:])


# ── patching the simulator ───────────────────────────────────────────────────

_active_lock = threading.Lock()
_active: list[Trace] = []  # the running trace (at most one)


def _patches(tr: Trace):
    """(object, attribute, replacement) for every patch a trace makes."""
    from numba.cuda.simulator import kernel as simkernel
    from numba.cuda.simulator import kernelapi

    from leverctl_kernels.common import simwarp

    plain_wrapper = simkernel.FakeWithinKernelCUDAArray
    orig_run = simkernel.BlockManager.run
    orig_call = simkernel.FakeCUDAKernel.__call__
    orig_sync = simkernel.BlockThread.syncthreads
    alloc_lock = threading.Lock()

    def wrap_arg(fake):
        # The simulator wraps each array argument (a FakeCUDAArray) for the kernel.
        ary = fake._ary
        if ary.ndim == 0 or ary.dtype.fields is not None:
            return plain_wrapper(fake)
        return _traced(ary, GLOBAL)

    def shared_array(self, shape, dtype, alignment=None):
        # As the simulator's (simwarp.shared_allocation), with the array behind a proxy.
        res, key = simwarp.shared_allocation(self, shape, dtype, alignment, _getframe(1))
        if key is None:  # dynamic shared memory: every call shares one buffer
            return _traced(res, SHARED, root=self._dynshared)
        # One proxy per array, so that twins keyed by identity (wgmma's
        # smem_addr) see one object.
        with alloc_lock:
            proxies = self.__dict__.setdefault(_PROXIES, {})
            proxy = proxies.get(key)
            if proxy is None or proxy._ary is not res:
                proxy = proxies[key] = _traced(res, SHARED)
        return proxy

    def run(mgr, grid_point, *args):
        if not tr.runs(tuple(mgr._grid_dim), tuple(grid_point)):
            return None
        groups: dict = {}
        setattr(mgr, _GROUPS, groups)
        try:
            return orig_run(mgr, grid_point, *args)
        finally:
            tr._flush(dict(groups))  # (a copy: an aborted block's lanes may still be running)

    def syncthreads(thread):
        # A barrier: the thread's accesses are numbered afresh after it.
        epoch = getattr(thread, _EPOCH, 0) + 1
        setattr(thread, _EPOCH, epoch)
        td = thread.__dict__
        st = td.get(_ST)
        if st is not None:
            td[_ST] = (st[0], {}, st[2], st[3], epoch)
        td[_CALLS_ATTR] = {}
        return orig_sync(thread)

    def call(kernel, *args):
        if kernel._device:
            # A device call: onto the thread's stack, by its site and the
            # calls that site made before within the enclosing call (the
            # same in every lane of converged code, whatever accesses a lane
            # skipped inside them, and wherever a lane skipped a call).
            f = _getframe(1)
            while f is not None and f.f_code.co_filename.startswith(_CALLS):
                f = f.f_back
            if f is None:
                return orig_call(kernel, *args)
            td = _current_thread().__dict__
            calls = td.get(_CALLS_ATTR)
            if calls is None:
                calls = td[_CALLS_ATTR] = {}
            site = _position(f)
            outer = td.get(_STACK, 0)
            n = calls.get((outer, site), 0)  # counted within the enclosing call
            calls[(outer, site)] = n + 1
            td[_STACK] = _stack_id(outer, site, n)
            try:
                return orig_call(kernel, *args)
            finally:
                td[_STACK] = outer
        if not simkernel._kernel_context:
            tr.launches += 1
            tr.grids.append([0, 0])
            tr.kernels.append(getattr(kernel.fn, "__qualname__", getattr(kernel.fn, "__name__", "?")))
        return orig_call(kernel, *args)

    return [
        (simkernel, "FakeWithinKernelCUDAArray", wrap_arg),
        (kernelapi.FakeCUDAShared, "array", shared_array),
        (simkernel.BlockManager, "run", run),
        (simkernel.FakeCUDAKernel, "__call__", call),
        (simkernel.BlockThread, "syncthreads", syncthreads),
        (simwarp, "TRACE_HOOK", _hook),
    ]


def patched_names() -> dict[str, Any]:
    """What a trace replaces, by name, as it is now: the tests check that
    nothing of a trace is left behind after it."""
    from numba.cuda.simulator import kernel as simkernel
    from numba.cuda.simulator import kernelapi

    from leverctl_kernels.common import simwarp

    return {
        "kernel.FakeWithinKernelCUDAArray": simkernel.FakeWithinKernelCUDAArray,
        "kernelapi.FakeCUDAShared.array": kernelapi.FakeCUDAShared.__dict__["array"],
        "kernel.BlockManager.run": simkernel.BlockManager.__dict__["run"],
        "kernel.FakeCUDAKernel.__call__": simkernel.FakeCUDAKernel.__dict__["__call__"],
        "kernel.BlockThread.syncthreads": simkernel.BlockThread.__dict__["syncthreads"],
        "simwarp.TRACE_HOOK": simwarp.TRACE_HOOK,
    }


@functools.lru_cache(maxsize=64)
def _spread(total: int, n: int) -> frozenset[int]:
    """``n`` block indices spread evenly over ``0 .. total - 1``, both ends
    included."""
    return frozenset(int(i) for i in np.linspace(0, total - 1, n).round())


@contextmanager
def trace(sample: int | None = None) -> Iterator[Trace]:
    """Trace every simulated launch made inside the ``with`` block::

        with trace() as t:
            kernel[grid, block](out, x)
        profile = summarize(t)

    ``sample`` = n runs at most n blocks of each launch, spread evenly over
    its grid (the first and the last among them) and skips the rest, for
    kernels whose blocks do the same work on other rows: the model's row
    lengths at the cost of a few rows. A skipped block writes nothing, so
    only launches whose addresses do not depend on another block's results
    may be sampled, and their outputs are not the kernel's.

    Needs the CUDA simulator. Everything patched is put back on exit, also
    when the block raises; traces do not nest."""
    global _SIM_API, _SIM_DIR, _COMMON, _RUNNER, _SKIP, _CALLS, _current_thread
    from numba import config

    if not config.ENABLE_CUDASIM:
        raise RuntimeError("memtrace runs kernels in the CUDA simulator: set NUMBA_ENABLE_CUDASIM=1 before numba loads")
    from numba.cuda.simulator import kernelapi

    from leverctl_kernels.common import simwarp

    with _active_lock:
        if _active:
            raise RuntimeError("a memory trace is already running")
        tr = Trace(sample)
        _active.append(tr)
    _SIM_API = kernelapi.__file__
    _SIM_DIR = str(Path(kernelapi.__file__).parent) + "/"
    _COMMON = str(Path(simwarp.__file__).parent) + "/"
    _RUNNER = simwarp.__file__
    _current_thread = simwarp.current_lane
    _SKIP = (_COMMON, _SIM_DIR, __file__)
    _CALLS = (_SIM_DIR, __file__)  # the simulator's and the tracer's frames between a call and its callee
    saved = []
    t0 = time.perf_counter()
    # No cyclic garbage collection while the trace runs: a block's accesses
    # are up to millions of small tuples kept until its end, and every
    # collection walked them again (15 s of collections in 50 s of two traced
    # GEMM tests); the simulator's own cycles are collected once it ends.
    collecting = gc.isenabled()
    gc.disable()
    try:
        for obj, name, new in _patches(tr):
            saved.append((obj, name, obj.__dict__[name]))
            setattr(obj, name, new)
        yield tr
    finally:
        for obj, name, old in reversed(saved):
            setattr(obj, name, old)
        if collecting:
            gc.enable()
        tr.seconds += time.perf_counter() - t0
        _starts.clear()
        _lines.clear()
        _stacks.clear()
        with _active_lock:
            _active.clear()


def run_traced(fn: Callable[[], Any]) -> Trace:
    """``fn()`` under :func:`trace`; its trace."""
    with trace() as t:
        fn()
    return t


# ── the summary ──────────────────────────────────────────────────────────────


@dataclass(frozen=True)
class SiteRow:
    """One access site: a line of a kernel (``site``), and where a shared
    helper is the line, the kernel line that called it (``via``); its space
    and kind, and what its warp instructions added up to.

    Global rows carry ``sectors``, ``ideal_sectors``, ``used_bytes``,
    ``efficiency`` (used bytes over sector bytes) and ``wide_bytes`` (the
    bytes its 128-bit accesses moved); shared rows carry
    ``wavefronts``, ``ideal_wavefronts``, ``ways`` (the worst n-way in one
    phase) and ``conflicted`` (instructions that needed more than the
    ideal). ``waste_bytes`` ranks the rows: the excess sectors' bytes, or
    128 bytes per extra wavefront (what one wavefront could have moved)."""

    site: str
    via: str | None
    space: str
    kind: str
    instructions: int
    accesses: int
    bytes: int
    sectors: int | None = None
    ideal_sectors: int | None = None
    used_bytes: int | None = None
    lines: int | None = None
    efficiency: float | None = None
    wide_bytes: int | None = None
    wavefronts: int | None = None
    ideal_wavefronts: int | None = None
    ways: int | None = None
    conflicted: int | None = None

    @property
    def extra_wavefronts(self) -> int:
        return (self.wavefronts or 0) - (self.ideal_wavefronts or 0)

    @property
    def excess_sectors(self) -> int:
        return (self.sectors or 0) - (self.ideal_sectors or 0)

    @property
    def waste_bytes(self) -> int:
        if self.space == GLOBAL:
            return self.excess_sectors * SECTOR
        return self.extra_wavefronts * WAVEFRONT_BYTES

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "site": self.site,
            "via": self.via,
            "space": self.space,
            "kind": self.kind,
            "instructions": self.instructions,
            "accesses": self.accesses,
            "bytes": self.bytes,
        }
        if self.space == GLOBAL:
            out.update(
                sectors=self.sectors,
                ideal_sectors=self.ideal_sectors,
                used_bytes=self.used_bytes,
                lines=self.lines,
                efficiency=self.efficiency,
                wide_bytes=self.wide_bytes,
            )
        else:
            out.update(
                wavefronts=self.wavefronts,
                ideal_wavefronts=self.ideal_wavefronts,
                extra_wavefronts=self.extra_wavefronts,
                ways=self.ways,
                conflicted=self.conflicted,
            )
        out["waste_bytes"] = self.waste_bytes
        return out


@dataclass(frozen=True)
class MemoryProfile:
    """A traced run's memory behaviour: totals, and the sites worst first.

    ``requested_bytes`` is what the kernels asked global memory for (loads,
    stores and atomics, each access's size once); ``requested_vs_declared``
    sets it against the bytes the variant declares it must move (None
    without a declaration). ``wide_load_share`` is the share of the global
    load bytes that 128-bit loads carried (None without global loads): the
    roofline target's "16-byte loads carry the streamed bytes".
    ``sector_efficiency`` is None when no global
    access was seen, as ``worst_ways`` is 0 without shared accesses."""

    launches: int
    blocks: int
    instructions: int
    accesses: int
    seconds: float
    load_bytes: int
    store_bytes: int
    atomic_bytes: int
    used_bytes: int
    sectors: int
    ideal_sectors: int
    sector_efficiency: float | None
    shared_load_bytes: int
    shared_store_bytes: int
    wavefronts: int
    ideal_wavefronts: int
    worst_ways: int
    sites: tuple[SiteRow, ...]
    declared_bytes: int | None = None
    wide_load_bytes: int = 0
    grid_blocks: int = 0

    @property
    def requested_bytes(self) -> int:
        return self.load_bytes + self.store_bytes + self.atomic_bytes

    @property
    def sampled(self) -> bool:
        """Whether some blocks were skipped (``trace(sample=...)``)."""
        return self.grid_blocks > self.blocks

    @property
    def extra_wavefronts(self) -> int:
        return self.wavefronts - self.ideal_wavefronts

    @property
    def excess_sectors(self) -> int:
        return self.sectors - self.ideal_sectors

    @property
    def wide_load_share(self) -> float | None:
        return self.wide_load_bytes / self.load_bytes if self.load_bytes else None

    @property
    def requested_vs_declared(self) -> float | None:
        if not self.declared_bytes:
            return None
        return self.requested_bytes / self.declared_bytes

    def worst(self, n: int = 5) -> tuple[SiteRow, ...]:
        """The ``n`` sites that waste the most (excess sectors, extra
        wavefronts), worst first; none that waste nothing."""
        return tuple(r for r in self.sites if r.waste_bytes > 0)[:n]

    def rows_at(self, where: str, space: str | None = None, kind: str | None = None) -> tuple[SiteRow, ...]:
        """The rows whose site (or via) is ``where`` ("path.py:12", or a
        suffix of it), optionally of one space and kind."""
        return tuple(
            r
            for r in self.sites
            if (r.site.endswith(where) or (r.via or "").endswith(where))
            and (space is None or r.space == space)
            and (kind is None or r.kind == kind)
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "launches": self.launches,
            "blocks": self.blocks,
            "grid_blocks": self.grid_blocks,
            "instructions": self.instructions,
            "accesses": self.accesses,
            "seconds": round(self.seconds, 3),
            "global": {
                "load_bytes": self.load_bytes,
                "store_bytes": self.store_bytes,
                "atomic_bytes": self.atomic_bytes,
                "requested_bytes": self.requested_bytes,
                "declared_bytes": self.declared_bytes,
                "requested_vs_declared": self.requested_vs_declared,
                "used_bytes": self.used_bytes,
                "sectors": self.sectors,
                "ideal_sectors": self.ideal_sectors,
                "excess_sectors": self.excess_sectors,
                "sector_efficiency": self.sector_efficiency,
                "wide_load_bytes": self.wide_load_bytes,
                "wide_load_share": self.wide_load_share,
            },
            "shared": {
                "load_bytes": self.shared_load_bytes,
                "store_bytes": self.shared_store_bytes,
                "wavefronts": self.wavefronts,
                "ideal_wavefronts": self.ideal_wavefronts,
                "extra_wavefronts": self.extra_wavefronts,
                "worst_ways": self.worst_ways,
            },
            "sites": [r.to_json() for r in self.sites],
        }


def _where(path: str, line: int) -> str:
    p = Path(path)
    try:
        p = p.resolve().relative_to(_ROOT)
    except (ValueError, OSError):
        pass
    return f"{p.as_posix()}:{line}"


def _row(key: tuple, t: _Tally) -> SiteRow:
    fname, line, via, space, kind = key
    common = dict(
        site=_where(fname, line),
        via=_where(*via) if via else None,
        space=space,
        kind=kind,
        instructions=t.instructions,
        accesses=t.accesses,
        bytes=t.bytes,
    )
    if space == GLOBAL:
        return SiteRow(
            **common,
            sectors=t.sectors,
            ideal_sectors=t.ideal_sectors,
            used_bytes=t.used,
            lines=t.lines,
            efficiency=t.used / (t.sectors * SECTOR) if t.sectors else None,
            wide_bytes=t.wide,
        )
    return SiteRow(
        **common,
        wavefronts=t.wavefronts,
        ideal_wavefronts=t.ideal_wavefronts,
        ways=t.ways,
        conflicted=t.conflicted,
    )


def summarize(trace: Trace, declared_bytes: int | None = None) -> MemoryProfile:
    """The totals and the per-site rows of ``trace``, worst first (most
    wasted bytes, then most bytes requested, then by site); ``declared_bytes``
    is what the variant declares it moves, for ``requested_vs_declared``."""
    with trace._lock:
        items = list(trace.sites.items())
    rows = [_row(k, t) for k, t in items]
    rows.sort(key=lambda r: (-r.waste_bytes, -r.bytes, r.site, r.via or "", r.space, r.kind))
    glob = [r for r in rows if r.space == GLOBAL]
    shar = [r for r in rows if r.space == SHARED]

    def total(rs, kind, attr="bytes"):
        return sum(getattr(r, attr) for r in rs if kind is None or r.kind == kind)

    sectors = total(glob, None, "sectors")
    used = total(glob, None, "used_bytes")
    return MemoryProfile(
        launches=trace.launches,
        blocks=trace.blocks,
        instructions=sum(r.instructions for r in rows),
        accesses=trace.accesses,
        seconds=trace.seconds,
        load_bytes=total(glob, LOAD),
        store_bytes=total(glob, STORE),
        atomic_bytes=total(glob, ATOMIC),
        used_bytes=used,
        sectors=sectors,
        ideal_sectors=total(glob, None, "ideal_sectors"),
        sector_efficiency=used / (sectors * SECTOR) if sectors else None,
        shared_load_bytes=total(shar, LOAD),
        shared_store_bytes=total(shar, STORE) + total(shar, ATOMIC),
        wavefronts=total(shar, None, "wavefronts"),
        ideal_wavefronts=total(shar, None, "ideal_wavefronts"),
        worst_ways=max((r.ways or 0 for r in shar), default=0),
        sites=tuple(rows),
        declared_bytes=declared_bytes,
        wide_load_bytes=sum(r.wide_bytes or 0 for r in glob if r.kind == LOAD),
        grid_blocks=trace.grid_blocks,
    )


def profile_variant(path, variant: str, shape, *, seed: int = 0, sample: int | None = None) -> MemoryProfile:
    """Build ``variant`` of kernel path ``path`` at ``shape``, run it once
    on the path's inputs under a trace (as the bench's correctness run
    does: outputs and scratch poisoned first) and summarize it against the
    variant's declared traffic. Building happens outside the trace, and so
    does the model's load-time work a launch declares (``launch.load``:
    the weights ``pre_rotated`` rotates, the adapter ``merged`` merges),
    which the bench's timed calls never repeat: the trace is a warm call's.
    ``sample`` = n traces n blocks a launch (:func:`trace`); the figures
    are then the whole grids' estimates."""
    from numba import cuda

    from ..bench.check import staged

    launch = path.variants[variant].build(shape)
    inputs = path.make_inputs(shape, np.random.default_rng(seed))
    bufs = staged(path, shape, launch, inputs, cuda)
    with trace(sample) as t:
        launch(bufs)
        cuda.synchronize()
    return summarize(t, declared_bytes=int(path.variant_traffic(variant, shape).bytes))
