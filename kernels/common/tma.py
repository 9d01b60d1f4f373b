"""The Tensor Memory Accelerator (TMA, sm_90 and later): a 2-D tile of a
global array copied into shared memory by one instruction, its completion
counted on a shared-memory transaction barrier (``mbarrier``); callable
from ``@cuda.jit`` kernels, with a simulator twin that lands each copy
when the hardware guarantees it, not before.

Device side::

    mbar_init(bar, count)          # a barrier at shared address ``bar`` (8-byte
                                   # aligned): ``count`` arrivals a phase
    mbar_fence_init()              # the inits visible to the async proxy (then a barrier)
    mbar_expect_tx(bar, nbytes)    # arrive, and expect ``nbytes`` more of copies this phase
    mbar_try_wait(bar, parity)     # 1 once the phase of that parity has completed
    mbar_wait(bar, parity)         # spin on it
    tensormap_acquire(tm, which)   # before the first copy through a map in global memory
    load_2d(dst, tm, which, src, c0, c1, bar)
        # the box of map ``tm[which]`` at element ``c0`` of a row, row ``c1``
        # (elements past the tensor's edge land as zeros) to shared address
        # ``dst``; its bytes complete on ``bar``. ``src`` is the array the map
        # describes: the hardware reads the map only, the twin checks the two agree.

On the CUDA target these are ``mbarrier.init`` / ``arrive.expect_tx`` /
``try_wait.parity`` on ``.shared::cta`` (``SYNCS.*`` in SASS),
``fence.mbarrier_init``, ``fence.proxy.tensormap::generic.acquire`` and
``cp.async.bulk.tensor.2d ... mbarrier::complete_tx::bytes`` (``UTMALDG.2D``),
each inline PTX with a memory clobber.

**Tensor maps** (:func:`encode_2d`, :func:`device_maps`): the 128-byte
descriptor of a 2-D row-major array and its box. On a GPU the driver
encodes it (``cuTensorMapEncodeTiled``); the kernel takes the maps as a
``uint64`` array in global memory (a ``__grid_constant__`` parameter, which
numba-cuda cannot declare, is the other place a map may live) and fences
them in once (``tensormap_acquire``) before its first copy. In the
simulator a map is the same description in the project's own packing
(:data:`MAGIC` first), which only the twin reads.

**The simulator twin** keeps each barrier's state per block (arrivals
still due this phase, expected bytes, the copies issued against it, the
phase). A copy reads its box when issued; its bytes land in shared memory
only when the phase completes, which the twin decides the first time a
lane waits on the barrier after all its arrivals are in (or when it is
armed again without anyone having waited): a kernel that reads a stage
without waiting on its barrier reads what the slot held before. A phase
whose copies do not add up to the bytes it was told to expect raises. A
lane whose wait finds the phase incomplete hands the interpreter to the
block's other lanes (``simwarp.spin``); if none can go on, the block is
reported deadlocked. Under the memory tracer each box row inside the
tensor is one global load of its bytes (the shared side is written by
the TMA unit, not by a lane's store, and is not traced).
"""

from __future__ import annotations

import numpy as np
from numba import config

from . import ptx_stmt, simwarp

MAP_WORDS = 16  # a tensor map: 128 bytes
MAP_ALIGN = 64  # bytes; the maps' array rows are 128 bytes apart from a 256-byte aligned start
BAR_BYTES = 8
SWIZZLE_NONE, SWIZZLE_128B = 0, 3  # CUtensorMapSwizzle's values
MAGIC = 0x4C56_544D_4150_3244  # the simulator's packing (never a driver's map)
MAX_BOX = 256  # elements a box dimension
# the element types a map may name: bytes an element -> (driver type name, ...)
_DRIVER_TYPE = {"bf16": "BFLOAT16", "f16": "FLOAT16", "e4m3": "UINT8", "s8": "UINT8"}
ESIZE = {"bf16": 2, "f16": 2, "e4m3": 1, "s8": 1}


# ── tensor maps (host) ───────────────────────────────────────────────────────


def check_box(dtype: str, rows: int, row_elems: int, row_bytes: int, box_rows: int, box_elems: int, swizzle: int):
    """The limits ``cuTensorMapEncodeTiled`` puts on a 2-D map, as one
    ValueError before any encoding: a box dimension 1..256, rows 16-byte
    aligned; and the project's own rule, a 128-byte-swizzled box's rows one
    swizzle atom (128 bytes; the driver takes narrower ones too)."""
    if dtype not in ESIZE:
        raise ValueError(f"tensor map of {dtype!r}: one of {', '.join(ESIZE)}")
    if not (1 <= box_rows <= MAX_BOX and 1 <= box_elems <= MAX_BOX):
        raise ValueError(f"a box of {box_rows} x {box_elems}: each side 1..{MAX_BOX}")
    if rows < 1 or row_elems < 1:
        raise ValueError(f"a tensor of {rows} x {row_elems}: empty")
    if row_bytes % 16:
        raise ValueError(f"rows {row_bytes} bytes apart: a multiple of 16")
    if swizzle == SWIZZLE_128B and box_elems * ESIZE[dtype] != 128:
        width = box_elems * ESIZE[dtype]
        raise ValueError(f"a 128-byte-swizzled box's rows are 128 bytes (a swizzle atom), not {width}")
    if swizzle not in (SWIZZLE_NONE, SWIZZLE_128B):
        raise ValueError(f"swizzle mode {swizzle}: none ({SWIZZLE_NONE}) or 128-byte ({SWIZZLE_128B})")


def encode_2d(arr, dtype: str, box_rows: int, box_elems: int, swizzle: int = SWIZZLE_128B) -> np.ndarray:
    """The tensor map (16 ``uint64``) of the 2-D C-contiguous array ``arr``
    read as rows of ``dtype`` elements (a ``uint32`` view of bf16 rows is
    two elements a word), with a box of ``box_rows`` rows by ``box_elems``
    elements; outside the array a box reads zeros."""
    shape = tuple(int(x) for x in arr.shape)
    if len(shape) != 2:
        raise ValueError(f"a 2-D tensor map of an array of shape {shape}")
    itemsize = int(np.dtype(arr.dtype).itemsize)
    row_bytes = shape[1] * itemsize
    strides = tuple(int(x) for x in arr.strides)
    if shape[0] > 1 and strides[0] != row_bytes or shape[1] > 1 and strides[1] != itemsize:
        raise ValueError(f"a tensor map of a {shape} array with strides {strides}: C-contiguous rows only")
    row_elems = row_bytes // ESIZE.get(dtype, 1)
    check_box(dtype, shape[0], row_elems, row_bytes, box_rows, box_elems, swizzle)
    if config.ENABLE_CUDASIM:
        out = np.zeros(MAP_WORDS, np.uint64)
        fields = (MAGIC, shape[0], row_elems, row_bytes, box_rows, box_elems, ESIZE[dtype], swizzle, host_ptr(arr))
        out[: len(fields)] = fields
        return out
    return _driver_encode(arr, dtype, shape[0], row_elems, row_bytes, box_rows, box_elems, swizzle)


def host_ptr(arr) -> int:
    """The simulator's device array's data address (the twin's check that a
    copy reads the array its map describes)."""
    return int(np.asarray(arr).__array_interface__["data"][0])


def _driver_encode(arr, dtype, rows, row_elems, row_bytes, box_rows, box_elems, swizzle, binding=None) -> np.ndarray:
    """``cuTensorMapEncodeTiled`` through numba-cuda's driver binding
    (``binding``: a stand-in in tests). An error is a RuntimeError naming
    the driver's code and the map asked for."""
    if binding is None:
        from numba.cuda.cudadrv import driver as drv

        binding = drv.binding
    b = binding
    ptr = int(arr.device_ctypes_pointer.value) if hasattr(arr, "device_ctypes_pointer") else int(arr)
    u64, u32 = b.cuuint64_t, b.cuuint32_t  # the binding takes no plain int in these lists
    err, tmap = b.cuTensorMapEncodeTiled(
        getattr(b.CUtensorMapDataType, "CU_TENSOR_MAP_DATA_TYPE_" + _DRIVER_TYPE[dtype]),
        2,
        ptr,
        [u64(row_elems), u64(rows)],
        [u64(row_bytes)],
        [u32(box_elems), u32(box_rows)],
        [u32(1), u32(1)],
        b.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
        b.CUtensorMapSwizzle(swizzle),
        b.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
        b.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
    )
    if int(err) != 0:
        raise RuntimeError(
            f"cuTensorMapEncodeTiled failed ({err}): {dtype} {rows} x {row_elems}, rows {row_bytes} bytes apart, "
            f"box {box_rows} x {box_elems}, swizzle {swizzle}"
        )
    return np.array([int(w) for w in tmap.opaque], dtype=np.uint64)


def device_maps(maps) -> object:
    """The maps as one ``(len(maps), 16)`` ``uint64`` device array, each 128
    bytes from a 256-byte aligned allocation (so 64-byte aligned)."""
    from numba import cuda

    return cuda.to_device(np.stack([np.asarray(m, np.uint64) for m in maps]))


# ── the CUDA target ──────────────────────────────────────────────────────────


def _asm2(text: str, cons: str, ret: bool = False):
    """An intrinsic ``f(a, b)`` of two integers emitting ``text`` with them as
    32-bit operands (``ret``: and a 32-bit result, ``$0``)."""
    from llvmlite import ir
    from numba.cuda import types
    from numba.cuda.extending import intrinsic

    def typer(typingctx, a, b):
        if not (isinstance(a, types.Integer) and isinstance(b, types.Integer)):
            return None

        def codegen(context, builder, signature, vals):
            i32 = ir.IntType(32)
            ins = [context.cast(builder, v, t, types.uint32) for v, t in zip(vals, signature.args)]
            fnty = ir.FunctionType(i32 if ret else ir.VoidType(), [i32, i32])
            res = builder.call(ir.InlineAsm(fnty, text, cons + ",~{memory}", side_effect=True), ins)
            return res if ret else context.get_dummy_value()

        return (types.uint32 if ret else types.void)(a, b), codegen

    return intrinsic(typer)


def _map_addr(context, builder, tm_type, tm, which_type, which):
    """The generic address of map ``which`` (a row of 16 words) of the maps' array ``tm``."""
    from llvmlite import ir
    from numba.cuda import types

    data = context.make_array(tm_type)(context, builder, tm).data
    row = context.cast(builder, which, which_type, types.intp)
    at = builder.gep(data, [builder.mul(row, ir.Constant(row.type, MAP_WORDS))])
    return builder.ptrtoint(at, ir.IntType(64))


def _tensormap_acquire():
    from llvmlite import ir
    from numba.cuda import types
    from numba.cuda.extending import intrinsic

    def tensormap_acquire(typingctx, tm, which):
        if not (isinstance(tm, types.Array) and isinstance(which, types.Integer)):
            return None

        def codegen(context, builder, signature, args):
            addr = _map_addr(context, builder, signature.args[0], args[0], signature.args[1], args[1])
            text = "fence.proxy.tensormap::generic.acquire.sys [$0], 128;"
            fnty = ir.FunctionType(ir.VoidType(), [ir.IntType(64)])
            builder.call(ir.InlineAsm(fnty, text, "l,~{memory}", side_effect=True), [addr])
            return context.get_dummy_value()

        return types.void(tm, which), codegen

    return intrinsic(tensormap_acquire)


def _load_2d():
    from llvmlite import ir
    from numba.cuda import types
    from numba.cuda.extending import intrinsic

    def load_2d(typingctx, dst, tm, which, src, c0, c1, bar):
        ints = (dst, which, c0, c1, bar)
        if not (isinstance(tm, types.Array) and isinstance(src, types.Array)):
            return None
        if not all(isinstance(x, types.Integer) for x in ints):
            return None

        def codegen(context, builder, signature, args):
            i32 = ir.IntType(32)
            addr = _map_addr(context, builder, signature.args[1], args[1], signature.args[2], args[2])
            d, x, y, b = (
                context.cast(builder, args[i], signature.args[i], types.int32 if i in (4, 5) else types.uint32)
                for i in (0, 4, 5, 6)
            )
            text = (
                "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                " [$0], [$1, {$2, $3}], [$4];"
            )
            fnty = ir.FunctionType(ir.VoidType(), [i32, ir.IntType(64), i32, i32, i32])
            builder.call(ir.InlineAsm(fnty, text, "r,l,r,r,r,~{memory}", side_effect=True), [d, addr, x, y, b])
            return context.get_dummy_value()

        return types.void(dst, tm, which, src, c0, c1, bar), codegen

    return intrinsic(load_2d)


# ── the simulator twin ───────────────────────────────────────────────────────

_BARS = "_leverctl_mbarriers"  # per block (its BlockManager): shared address -> _Bar


class _Bar:
    __slots__ = ("count", "due", "tx", "copies", "phase")

    def __init__(self, count: int):
        self.count, self.due, self.tx, self.copies, self.phase = count, count, 0, [], 0

    def complete(self, at: int) -> None:
        """Land the phase's copies and move to the next phase."""
        landed = sum(len(data) for _dst, data in self.copies)
        if landed != self.tx:
            raise ValueError(
                f"mbarrier twin: the phase at shared address {at} expected {self.tx} bytes, its copies brought {landed}"
            )
        for dst, data in self.copies:
            _base, arr = _region(dst, len(data))
            raw = np.asarray(arr).reshape(-1).view(np.uint8)
            raw[dst - _base : dst - _base + len(data)] = data
        self.copies, self.tx, self.due = [], 0, self.count
        self.phase += 1


def _region(addr: int, nbytes: int):
    from .smem import _twin_region

    return _twin_region(addr, nbytes, "TMA")


def _bars() -> dict:
    lane = simwarp.current_lane()
    d = lane._manager.__dict__
    if _BARS not in d:
        d[_BARS] = {}
    return d[_BARS]


def _bar(addr) -> _Bar:
    addr = int(addr)
    bar = _bars().get(addr)
    if bar is None:
        raise ValueError(f"mbarrier twin: no barrier initialised at shared address {addr}")
    return bar


def _twin_init(addr, count):
    addr, count = int(addr), int(count)
    if addr % BAR_BYTES:
        raise ValueError(f"mbarrier twin: address {addr} is not on {BAR_BYTES} bytes")
    if count < 1:
        raise ValueError(f"mbarrier twin: {count} arrivals a phase")
    _region(addr, BAR_BYTES)  # inside a shared array
    _bars()[addr] = _Bar(count)


def _twin_expect_tx(addr, nbytes):
    bar = _bar(addr)
    if bar.due == 0:  # armed again without a wait: the phase before completed by now
        bar.complete(int(addr))
    bar.tx += int(nbytes)
    bar.due -= 1


def _twin_try_wait(addr, parity):
    bar = _bar(addr)
    if bar.due == 0 and (bar.phase & 1) == (int(parity) & 1):
        bar.complete(int(addr))
    return np.uint32((bar.phase & 1) != (int(parity) & 1))


def _twin_wait(addr, parity):
    while not _twin_try_wait(addr, parity):
        simwarp.spin(f"the phase of parity {int(parity) & 1} of the mbarrier at shared address {int(addr)}")


def _twin_nothing(*_args):
    return None


def _twin_load_2d(dst, tm, which, src, c0, c1, bar_addr):
    dst, c0, c1 = int(dst), int(c0), int(c1)
    m = np.asarray(tm).reshape(-1, MAP_WORDS)[int(which)]
    if int(m[0]) != MAGIC:
        raise ValueError(f"TMA twin: map {int(which)} is not a tensor map")
    rows, row_elems, row_bytes, box_rows, box_elems, esize, swz, ptr = (int(x) for x in m[1:9])
    if host_ptr(src) != ptr:
        raise ValueError(f"TMA twin: map {int(which)} describes another array than the copy's source")
    if dst % (1024 if swz == SWIZZLE_128B else 128):
        raise ValueError(f"TMA twin: destination {dst} not aligned for swizzle mode {swz}")
    box_row_bytes = box_elems * esize
    out = np.zeros((box_rows, box_row_bytes), np.uint8)
    hook = simwarp.TRACE_HOOK
    raw = np.asarray(src).reshape(-1).view(np.uint8)
    e0, e1 = max(c0, 0), min(c0 + box_elems, row_elems)
    for r in range(box_rows):
        g = c1 + r
        if 0 <= g < rows and e0 < e1:
            start, nb = g * row_bytes + e0 * esize, (e1 - e0) * esize
            if hook is not None:
                hook("load", src, start, nb)
            out[r, (e0 - c0) * esize : (e1 - c0) * esize] = raw[start : start + nb]
    if swz == SWIZZLE_128B:  # 16-byte chunk j of row r lands at chunk j ^ (r % 8) of its 128-byte row
        chunks = out.reshape(box_rows, 8, 16)
        placed = np.empty_like(chunks)
        rr = np.arange(box_rows)[:, None]
        placed[rr, np.arange(8)[None, :] ^ (rr & 7)] = chunks
        out = placed
    data = out.reshape(-1)
    _bar(bar_addr).copies.append((dst, data))


if config.ENABLE_CUDASIM:
    mbar_init = _twin_init
    mbar_fence_init = _twin_nothing
    mbar_expect_tx = _twin_expect_tx
    mbar_try_wait = _twin_try_wait
    tensormap_acquire = _twin_nothing
    load_2d = _twin_load_2d
else:
    mbar_init = _asm2("mbarrier.init.shared::cta.b64 [$0], $1;", "r,r")
    mbar_fence_init = ptx_stmt.void("fence.mbarrier_init.release.cluster;", "mbar_fence_init")
    mbar_expect_tx = _asm2("mbarrier.arrive.expect_tx.shared::cta.b64 _, [$0], $1;", "r,r")
    mbar_try_wait = _asm2(
        "{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [$1], $2; selp.u32 $0, 1, 0, p; }",
        "=r,r,r",
        ret=True,
    )
    tensormap_acquire = _tensormap_acquire()
    load_2d = _load_2d()


def _make_wait():
    if config.ENABLE_CUDASIM:
        return _twin_wait
    from .launch import device_inline

    try_wait = mbar_try_wait

    @device_inline
    def mbar_wait(addr, parity):
        while try_wait(addr, parity) == 0:
            pass

    return mbar_wait


mbar_wait = _make_wait()
