"""Shared memory by address: the 32-bit shared-window address of a shared
array (``cvta.to.shared.u64``), 16-byte accesses through it (``st.shared.v4``
and ``ld_shared_v4`` four words; ``st_shared_f32x4``/``ld_shared_f32x4``
four float32 each way, ``st_shared_f32x2`` two),
views of the dynamic shared memory as arrays of any shape
(``shared_view``), and in the simulator the registry that maps those addresses back to arrays,
for every twin of an instruction that takes a shared address (wgmma's
descriptors, ``ldmatrix``, the stagers' stores).

Shared arrays in the simulator are NumPy arrays with host addresses: the
twin's ``smem_addr`` hands each one a 1024-byte-aligned address in a 256 KiB
window (what 14 bits of a descriptor's address >> 4 reach) and remembers it;
a 128-byte-swizzled tile starts on 1024 bytes, so relative and absolute
swizzle bits agree there as on the hardware.
"""

from __future__ import annotations

import threading
from functools import partial

import numpy as np
from numba import config

from . import simwarp

# The alignment argument of a ``cuda.shared.array`` read or written 16 bytes
# at a time: 16 on a GPU; the simulator refuses the argument (its twin's
# addresses are 1024-byte aligned already).
ALIGN16 = None if config.ENABLE_CUDASIM else 16

# ── the CUDA target ──────────────────────────────────────────────────────────


def _smem_addr():
    from llvmlite import ir
    from numba.cuda import types
    from numba.cuda.extending import intrinsic

    def smem_addr(typingctx, arr):
        if not isinstance(arr, types.Array):
            return None

        def codegen(context, builder, signature, args):
            data = context.make_array(signature.args[0])(context, builder, args[0]).data
            i64 = ir.IntType(64)
            gen = builder.ptrtoint(data, i64)
            fnty = ir.FunctionType(i64, [i64])
            sh = builder.call(ir.InlineAsm(fnty, "cvta.to.shared.u64 $0, $1;", "=l,l"), [gen])
            return builder.trunc(sh, ir.IntType(32))

        return types.uint32(arr), codegen

    return intrinsic(smem_addr)


def _st_shared_v4():
    from llvmlite import ir
    from numba.cuda import types
    from numba.cuda.extending import intrinsic

    def st_shared_v4(typingctx, addr, a, b, c, d):
        if not all(isinstance(x, types.Integer) for x in (addr, a, b, c, d)):
            return None

        def codegen(context, builder, signature, args):
            i32 = ir.IntType(32)
            vals = [context.cast(builder, v, t, types.uint32) for v, t in zip(args, signature.args)]
            fnty = ir.FunctionType(ir.VoidType(), [i32] * 5)
            builder.call(
                ir.InlineAsm(fnty, "st.shared.v4.b32 [$0], {$1, $2, $3, $4};", "r,r,r,r,r,~{memory}", side_effect=True),
                vals,
            )
            return context.get_dummy_value()

        return types.void(addr, a, b, c, d), codegen

    return intrinsic(st_shared_v4)


def _ld_shared_v4():
    from llvmlite import ir
    from numba.cuda import types
    from numba.cuda.extending import intrinsic

    def ld_shared_v4(typingctx, addr):
        if not isinstance(addr, types.Integer):
            return None

        def codegen(context, builder, signature, args):
            i32 = ir.IntType(32)
            at = context.cast(builder, args[0], signature.args[0], types.uint32)
            fnty = ir.FunctionType(ir.LiteralStructType([i32] * 4), [i32])
            # volatile, as the other shared accesses by address: no barrier
            # or store may be crossed
            asm = ir.InlineAsm(fnty, "ld.shared.v4.b32 {$0, $1, $2, $3}, [$4];", "=r,=r,=r,=r,r", True)
            res = builder.call(asm, [at])
            return context.make_tuple(builder, signature.return_type, [builder.extract_value(res, i) for i in range(4)])

        return types.UniTuple(types.uint32, 4)(addr), codegen

    return intrinsic(ld_shared_v4)


def _shared_f32x4():
    """``st.shared.v4.f32`` and ``ld.shared.v4.f32`` (both volatile asm: a
    barrier orders them like any shared access; the asm is vload's)."""
    from numba.cuda import types
    from numba.cuda.extending import intrinsic

    from .vload import f32x4_load, f32x4_store

    def st_f32(addr, values):
        """The typing and codegen of a store of ``values`` (2 or 4) as float32."""
        if not isinstance(addr, types.Integer):
            return None
        if not all(isinstance(x, (types.Float, types.Integer)) for x in values):
            return None

        def codegen(context, builder, signature, args):
            at = context.cast(builder, args[0], signature.args[0], types.uint32)
            return f32x4_store(context, builder, at, args[1:], signature.args[1:], "shared")

        return types.void(addr, *values), codegen

    def st_shared_f32x4(typingctx, addr, a, b, c, d):
        return st_f32(addr, (a, b, c, d))

    def st_shared_f32x2(typingctx, addr, a, b):
        return st_f32(addr, (a, b))

    def ld_shared_f32x4(typingctx, addr):
        if not isinstance(addr, types.Integer):
            return None

        def codegen(context, builder, signature, args):
            at = context.cast(builder, args[0], signature.args[0], types.uint32)
            return f32x4_load(context, builder, signature, at, "shared")

        return types.UniTuple(types.float32, 4)(addr), codegen

    return intrinsic(st_shared_f32x4), intrinsic(ld_shared_f32x4), intrinsic(st_shared_f32x2)


def _shared_view():
    """``shared_view(arr, start, shape)``: the C-contiguous array of ``shape``
    (a tuple of integers) over ``arr[start:]`` (a C-contiguous 1-D array,
    the block's dynamic shared memory), no copy. Numba's ``reshape`` of a
    slice calls a host helper (``numba_attempt_nocopy_reshape``) that a
    kernel cannot link; this builds the array's shape and strides in
    registers instead."""
    from numba.cuda import types
    from numba.cuda.extending import intrinsic

    def shared_view(typingctx, arr, start, shape):
        if not (isinstance(arr, types.Array) and arr.ndim == 1 and arr.layout == "C"):
            return None
        if not isinstance(start, types.Integer) or not isinstance(shape, types.UniTuple):
            return None
        if not isinstance(shape.dtype, types.Integer):
            return None
        retty = types.Array(arr.dtype, shape.count, "C")

        def codegen(context, builder, signature, args):
            src = context.make_array(signature.args[0])(context, builder, args[0])
            at = context.cast(builder, args[1], signature.args[1], types.intp)
            dims = [
                context.cast(builder, builder.extract_value(args[2], i), shape.dtype, types.intp)
                for i in range(shape.count)
            ]
            itemsize = context.get_abi_sizeof(context.get_data_type(arr.dtype))
            strides, step = [], context.get_constant(types.intp, itemsize)
            for dim in reversed(dims):
                strides.insert(0, step)
                step = builder.mul(step, dim)
            out = context.make_array(retty)(context, builder)
            context.populate_array(
                out,
                data=builder.gep(src.data, [at]),
                shape=dims,
                strides=strides,
                itemsize=context.get_constant(types.intp, itemsize),
                meminfo=None,
            )
            return out._getvalue()

        return retty(arr, start, shape), codegen

    return intrinsic(shared_view)


# ── the simulator twin ───────────────────────────────────────────────────────

_WINDOW = 1 << 18
_smem_lock = threading.Lock()
_smem: dict = {}  # host data pointer -> (address, array); arrays kept alive, so pointers stay unique
_smem_next = [0]


def _twin_smem_addr(arr):
    key = arr.__array_interface__["data"][0]
    with _smem_lock:
        hit = _smem.get(key)
        # The same memory (the registered array is kept alive, so no other
        # allocation can have its address): another view of it, as each
        # thread's cuda.shared.array(0, ...) of dynamic shared memory is.
        if hit is not None and arr.nbytes <= hit[1].nbytes:
            return np.uint32(hit[0])
        addr = _smem_next[0]
        if addr + arr.nbytes > _WINDOW:  # a new window: older blocks' arrays are done with
            addr = 0
        # Forget only the (older) arrays this one now overlaps: clearing the
        # whole window would also drop the arrays this block registered just
        # before the wrap, and their stores would then find no array.
        end = addr + arr.nbytes
        for old_key, (base, old) in list(_smem.items()):
            if base < end and addr < base + old.nbytes:
                del _smem[old_key]
        _smem[key] = (addr, arr)
        _smem_next[0] = (addr + arr.nbytes + 1023) & ~1023  # a swizzled tile starts on 1024 bytes
        return np.uint32(addr)


def regions() -> list:
    """The registered arrays, ``[(address, array), ...]``."""
    with _smem_lock:
        return list(_smem.values())


def _twin_region(addr: int, nbytes: int, what: str):
    """(base, array) of the registered shared array holding bytes ``addr ..
    addr + nbytes - 1``."""
    for base, arr in regions():  # integer tests first: a block's window may hold many arrays
        if base <= addr and addr + nbytes <= base + arr.nbytes:
            return base, arr
    raise IndexError(f"{what} twin: bytes {addr}..{addr + nbytes - 1} not in one shared array")


def _twin_store(dtype, what: str, align: int, addr, *values) -> None:
    """A twin's store of ``values`` as ``dtype`` at shared address ``addr``
    (refused off ``align`` bytes, where nonzero), one store to the tracer.
    The twins are this bound by ``functools.partial``, which adds no Python
    frame: the tracer's site stays the twin's caller."""
    addr = int(addr)
    nbytes = len(values) * 4
    base, arr = _twin_region(addr, nbytes, what)
    if align and addr % align:
        raise ValueError(f"{what} twin: address {addr} is not on {align} bytes")
    hook = simwarp.TRACE_HOOK
    if hook is not None:  # memory tracer: one store of the instruction's width
        arr = hook("store", arr, addr - base, nbytes)
    raw = np.asarray(arr).reshape(-1).view(np.uint8)
    raw[addr - base : addr - base + nbytes] = np.array(values, dtype=dtype).view(np.uint8)


_twin_st_shared_v4 = partial(_twin_store, np.uint32, "st.shared.v4", 0)
_twin_st_shared_f32x4 = partial(_twin_store, np.float32, "st.shared.v4.f32", 0)
_twin_st_shared_f32x2 = partial(_twin_store, np.float32, "st.shared.v2.f32", 8)


def _twin_ld_shared_f32x4(addr):
    w = twin_read_shared(addr, 16, "ld.shared.v4.f32").view(np.float32)
    return np.float32(w[0]), np.float32(w[1]), np.float32(w[2]), np.float32(w[3])


def _twin_ld_shared_v4(addr):
    w = twin_read_shared(addr, 16, "ld.shared.v4").view(np.uint32)
    return np.uint32(w[0]), np.uint32(w[1]), np.uint32(w[2]), np.uint32(w[3])


def twin_read_shared(addr: int, nbytes: int, what: str) -> np.ndarray:
    """A copy of ``nbytes`` bytes at shared-window address ``addr`` (the
    simulator's), one load of that width under the memory tracer: for the
    twins of instructions that read shared memory by address (``ldmatrix``
    in ``mma.py``, the wgmma operands in ``wgmma.py``)."""
    addr = int(addr)
    base, arr = _twin_region(addr, nbytes, what)
    hook = simwarp.TRACE_HOOK
    if hook is not None:
        arr = hook("load", arr, addr - base, nbytes)
    return np.asarray(arr).reshape(-1).view(np.uint8)[addr - base : addr - base + nbytes].copy()


def _twin_shared_view(arr, start, shape):
    n = 1
    for dim in shape:
        n *= int(dim)
    return arr[int(start) : int(start) + n].reshape(tuple(int(x) for x in shape))


if config.ENABLE_CUDASIM:
    shared_view = _twin_shared_view
    smem_addr = _twin_smem_addr
    st_shared_v4 = _twin_st_shared_v4
    st_shared_f32x4 = _twin_st_shared_f32x4
    st_shared_f32x2 = _twin_st_shared_f32x2
    ld_shared_f32x4 = _twin_ld_shared_f32x4
    ld_shared_v4 = _twin_ld_shared_v4
else:
    smem_addr = _smem_addr()
    shared_view = _shared_view()
    st_shared_v4 = _st_shared_v4()
    st_shared_f32x4, ld_shared_f32x4, st_shared_f32x2 = _shared_f32x4()
    ld_shared_v4 = _ld_shared_v4()

st_shared_v4.__doc__ = (
    "``st.shared.v4.b32``: four 32-bit words to the 16-byte-aligned shared-window "
    "address ``addr`` (from :func:`smem_addr`) in one store."
)
st_shared_f32x4.__doc__ = "``st.shared.v4.f32``: four float32 to the 16-byte-aligned shared-window address ``addr``."
st_shared_f32x2.__doc__ = "``st.shared.v2.f32``: two float32 to the 8-byte-aligned shared-window address ``addr``."
ld_shared_f32x4.__doc__ = "``ld.shared.v4.f32``: four float32 from the 16-byte-aligned shared-window address ``addr``."
ld_shared_v4.__doc__ = (
    "``ld.shared.v4.b32``: four 32-bit words from the 16-byte-aligned shared-window address ``addr``."
)
shared_view.__doc__ = (
    "``shared_view(arr, start, shape)``: a C-contiguous ``shape`` array over ``arr[start:]`` "
    "(1-D, C-contiguous: the dynamic shared memory), no copy."
)
smem_addr.__doc__ = "The 32-bit shared-window address of a shared array (``cvta.to.shared.u64``)."
