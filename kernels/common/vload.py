"""128-bit global loads of a read-only stream (packed weights), callable
from ``@cuda.jit`` kernels, with an exact simulator twin.

::

    a, b, c, d = ldg_v4(arr, i)   # arr[i .. i+3] of a C-contiguous array of
                                  # 32-bit elements (flat index i), one
                                  # 16-byte load: the address must be
                                  # 16-byte aligned; of 16-bit elements
                                  # (fp16 activations), arr[i .. i+7] as
                                  # four words, two elements each, the
                                  # lower-addressed in bits 0-15; of 8-bit
                                  # ones (scale bytes), arr[i .. i+15]
    a, b = ldg_v2(arr, i)         # ldg_v4's half: two words, one 8-byte load,
                                  # 8-byte aligned (a row's few scales); also
                                  # of 8-bit elements (E4M3 scale bytes:
                                  # arr[i .. i+7], the first in bits 0-7)
    w = ldg_u32(arr, i)           # one word of 8- or 16-bit elements (arr[i ..
                                  # i+3] of scale bytes, the first in bits
                                  # 0-7), one 4-byte load, 4-byte aligned
    a, b, c, d = ld_v4(arr, i)    # ldg_v4's words by a coherent load, for an
                                  # array the kernel also writes (in place)
    stg_v4(arr, i, a, b, c, d)    # the store of ldg_v4's shape: four words to
                                  # arr[i ..] (32-bit elements: four; 16-bit:
                                  # eight), one 16-byte store, 16-byte aligned
    ok = aligned16(arr)           # arr's first element is 16-byte aligned
    n = elem_bytes(arr)           # arr's element size in bytes, a compile-time
                                  # constant (``arr.itemsize`` is read from the
                                  # array at run time, so a branch on it stays)
    a, b, c, d = ld_f32x4(arr, i) # arr[i .. i+3] of a float32 array that the
    st_f32x4(arr, i, a, b, c, d)  # kernel also writes (recurrent state):
                                  # one coherent 16-byte load / store
    a, b, c, d = ldg_f32x4(arr, i)
                                  # arr[i .. i+3] of a float32 array that no
                                  # thread writes while the kernel runs (an
                                  # earlier launch's partials): ldg_v4's
                                  # read-only path, as floats

On the CUDA target ``ldg_v4`` is inline PTX, ``ld.global.nc.v4.u32`` (SASS
``LDG.E.128.CONSTANT``): one instruction moves a lane's 16 bytes through
the read-only (non-coherent) path, so the array must not be written while
the kernel runs. The asm has no side effect and no memory clobber, so the
compiler may schedule it freely, as it would any load of constant data.
Numba has no vector load: four scalar loads of consecutive words stay four
32-bit ``LDG.E``. ``stg_v4`` is the matching store of packed words (fp16
pairs): ``st.global.v4.b32`` (``STG.E.128``), volatile asm clobbering
memory, as ``st_f32x4``. ``aligned16`` is ordinary integer arithmetic on the data
pointer (a ``cudaMalloc`` is 256-byte aligned; a view starting inside an
allocation may not be), for a kernel to choose a scalar path where the
vector one would fault.

``ld_f32x4``/``st_f32x4`` are the coherent pair for data a kernel reads
and writes in place (the GDN state): ``ld.global.v4.f32`` (SASS
``LDG.E.128``) and ``st.global.v4.f32`` (``STG.E.128``), both volatile
asm, so they stay in program order with each other and the compiler
cannot drop or merge them; the store also clobbers memory. ``ld_v4`` is
the coherent load of packed words (``ld.global.v4.u32``, volatile), the
pair of ``stg_v4`` for 16-bit data rewritten in place (the GDN conv state).
``ldg_f32x4`` is ``ldg_v4``'s float32 form (``ld.global.nc.v4.f32``,
``LDG.E.128.CONSTANT``), free to be scheduled like ``ldg_v4``, for float32
data that only an earlier launch wrote.

**The simulator twin** reads the four words from the NumPy array and
refuses what the hardware would fault on: an address that is not 16-byte
aligned (counted from the start of the allocation, as the GPU's are), or
words past the array's end. Under the memory tracer
(``simwarp.TRACE_HOOK``) it counts one 16-byte global load, at the
caller's line, as the hardware makes it.
"""

from __future__ import annotations

import numpy as np
from numba import config

from . import simwarp

VEC_BYTES = 16
VEC_WORDS = 4  # 32-bit words per load


# ── the CUDA target ──────────────────────────────────────────────────────────


def _load_words(name: str, n: int, op: str, volatile: bool, bits: tuple = (16, 32)):
    """An intrinsic ``name(arr, i)``: ``n`` 32-bit words from flat element
    ``i`` of a C-contiguous array of elements of ``bits`` bits by one ``{op}``
    of ``n`` words (``op`` ``ld.global.nc``: read-only, free to be
    scheduled; ``ld.global`` with ``volatile``: kept in program order)."""
    from llvmlite import ir
    from numba.cuda import types
    from numba.cuda.extending import intrinsic

    regs = ", ".join(f"${i}" for i in range(n))
    text = f"{op}.v{n}.u32 {{{regs}}}, [${n}];" if n > 1 else f"{op}.u32 $0, [$1];"
    constraints = ",".join(["=r"] * n + ["l"])

    def load(typingctx, arr, index):
        if not (isinstance(arr, types.Array) and arr.layout == "C" and isinstance(index, types.Integer)):
            return None
        if not (isinstance(arr.dtype, (types.Integer, types.Float)) and arr.dtype.bitwidth in bits):
            return None

        def codegen(context, builder, signature, args):
            i32, i64 = ir.IntType(32), ir.IntType(64)
            a = context.make_array(signature.args[0])(context, builder, args[0])
            idx = context.cast(builder, args[1], signature.args[1], types.intp)
            ptr = builder.ptrtoint(builder.gep(a.data, [idx]), i64)
            if n == 1:  # one word: the value itself
                fnty = ir.FunctionType(i32, [i64])
                return builder.call(ir.InlineAsm(fnty, text, constraints, volatile), [ptr])
            fnty = ir.FunctionType(ir.LiteralStructType([i32] * n), [i64])
            res = builder.call(ir.InlineAsm(fnty, text, constraints, volatile), [ptr])
            return context.make_tuple(builder, signature.return_type, [builder.extract_value(res, i) for i in range(n)])

        return (types.UniTuple(types.uint32, n) if n > 1 else types.uint32)(arr, index), codegen

    load.__name__ = load.__qualname__ = name
    return intrinsic(load)


def _f32x4_pointer(context, builder, signature, args):
    from llvmlite import ir
    from numba.cuda import types

    a = context.make_array(signature.args[0])(context, builder, args[0])
    idx = context.cast(builder, args[1], signature.args[1], types.intp)
    return builder.ptrtoint(builder.gep(a.data, [idx]), ir.IntType(64))


def _ldg_f32x4():
    from llvmlite import ir
    from numba.cuda import types
    from numba.cuda.extending import intrinsic

    def ldg_f32x4(typingctx, arr, index):
        if not (_is_f32_c_array(arr) and isinstance(index, types.Integer)):
            return None

        def codegen(context, builder, signature, args):
            f32 = ir.FloatType()
            ptr = _f32x4_pointer(context, builder, signature, args)
            fnty = ir.FunctionType(ir.LiteralStructType([f32] * 4), [ptr.type])
            asm = ir.InlineAsm(fnty, "ld.global.nc.v4.f32 {$0, $1, $2, $3}, [$4];", "=f,=f,=f,=f,l")
            res = builder.call(asm, [ptr])
            return context.make_tuple(builder, signature.return_type, [builder.extract_value(res, i) for i in range(4)])

        return types.UniTuple(types.float32, 4)(arr, index), codegen

    return intrinsic(ldg_f32x4)


def _is_f32_c_array(arr) -> bool:
    from numba.cuda import types

    return isinstance(arr, types.Array) and arr.layout == "C" and arr.dtype == types.float32


def f32x4_load(context, builder, signature, addr, space: str):
    """Emit ``ld.<space>.v4.f32`` (volatile asm) at ``addr`` (an i64 global
    or i32 shared address) and return its four float32 as the signature's
    tuple: the one load of :func:`ld_f32x4` and ``smem.ld_shared_f32x4``."""
    from llvmlite import ir

    f32, width = ir.FloatType(), addr.type.width
    fnty = ir.FunctionType(ir.LiteralStructType([f32] * 4), [addr.type])
    asm = ir.InlineAsm(
        fnty, f"ld.{space}.v4.f32 {{$0, $1, $2, $3}}, [$4];", "=f,=f,=f,=f," + ("l" if width == 64 else "r"), True
    )
    res = builder.call(asm, [addr])
    return context.make_tuple(builder, signature.return_type, [builder.extract_value(res, i) for i in range(4)])


def f32x4_store(context, builder, addr, values, types_, space: str):
    """Emit ``st.<space>.v4.f32`` (``.v2`` for two values; volatile asm,
    clobbering memory) of the values cast to float32 at ``addr``: the one
    store of :func:`st_f32x4`, ``smem.st_shared_f32x4`` and
    ``smem.st_shared_f32x2``."""
    from llvmlite import ir
    from numba.cuda import types

    f32 = ir.FloatType()
    n = len(values)
    vals = [context.cast(builder, v, t, types.float32) for v, t in zip(values, types_)]
    fnty = ir.FunctionType(ir.VoidType(), [addr.type] + [f32] * n)
    constraint = ("l" if addr.type.width == 64 else "r") + ",f" * n + ",~{memory}"
    regs = ", ".join(f"${i + 1}" for i in range(n))
    asm = ir.InlineAsm(fnty, f"st.{space}.v{n}.f32 [$0], {{{regs}}};", constraint, side_effect=True)
    builder.call(asm, [addr] + vals)
    return context.get_dummy_value()


def _ld_f32x4():
    from numba.cuda import types
    from numba.cuda.extending import intrinsic

    def ld_f32x4(typingctx, arr, index):
        if not (_is_f32_c_array(arr) and isinstance(index, types.Integer)):
            return None

        def codegen(context, builder, signature, args):
            return f32x4_load(context, builder, signature, _f32x4_pointer(context, builder, signature, args), "global")

        return types.UniTuple(types.float32, 4)(arr, index), codegen

    return intrinsic(ld_f32x4)


def _st_f32x4():
    from numba.cuda import types
    from numba.cuda.extending import intrinsic

    def st_f32x4(typingctx, arr, index, a, b, c, d):
        if not (_is_f32_c_array(arr) and isinstance(index, types.Integer)):
            return None
        if not all(isinstance(x, (types.Float, types.Integer)) for x in (a, b, c, d)):
            return None

        def codegen(context, builder, signature, args):
            ptr = _f32x4_pointer(context, builder, signature, args)
            return f32x4_store(context, builder, ptr, args[2:], signature.args[2:], "global")

        return types.void(arr, index, a, b, c, d), codegen

    return intrinsic(st_f32x4)


def _stg_v4():
    from llvmlite import ir
    from numba.cuda import types
    from numba.cuda.extending import intrinsic

    def stg_v4(typingctx, arr, index, a, b, c, d):
        # any layout: an array the type does not say is C-contiguous (a GEMM's
        # output, which may be a view) takes it behind the caller's run-time
        # check of its strides; the index counts elements from its first
        if not (isinstance(arr, types.Array) and isinstance(index, types.Integer)):
            return None
        if not (isinstance(arr.dtype, (types.Integer, types.Float)) and arr.dtype.bitwidth in (16, 32)):
            return None
        if not all(isinstance(x, types.Integer) for x in (a, b, c, d)):
            return None

        def codegen(context, builder, signature, args):
            i32, i64 = ir.IntType(32), ir.IntType(64)
            arr_ = context.make_array(signature.args[0])(context, builder, args[0])
            idx = context.cast(builder, args[1], signature.args[1], types.intp)
            ptr = builder.ptrtoint(builder.gep(arr_.data, [idx]), i64)
            words = [context.cast(builder, v, t, types.uint32) for v, t in zip(args[2:], signature.args[2:])]
            fnty = ir.FunctionType(ir.VoidType(), [i64] + [i32] * 4)
            asm = ir.InlineAsm(
                fnty, "st.global.v4.b32 [$0], {$1, $2, $3, $4};", "l,r,r,r,r,~{memory}", side_effect=True
            )
            builder.call(asm, [ptr] + words)
            return context.get_dummy_value()

        return types.void(arr, index, a, b, c, d), codegen

    return intrinsic(stg_v4)


def _aligned16():
    from llvmlite import ir
    from numba.cuda import types
    from numba.cuda.extending import intrinsic

    def aligned16(typingctx, arr):
        if not isinstance(arr, types.Array):
            return None

        def codegen(context, builder, signature, args):
            i64 = ir.IntType(64)
            a = context.make_array(signature.args[0])(context, builder, args[0])
            low = builder.and_(builder.ptrtoint(a.data, i64), ir.Constant(i64, VEC_BYTES - 1))
            return builder.icmp_unsigned("==", low, ir.Constant(i64, 0))

        return types.boolean(arr), codegen

    return intrinsic(aligned16)


def _elem_bytes():
    from llvmlite import ir
    from numba.cuda import types
    from numba.cuda.extending import intrinsic

    def elem_bytes(typingctx, arr):
        if not isinstance(arr, types.Array):
            return None
        n = arr.dtype.bitwidth // 8

        def codegen(context, builder, signature, args):
            return ir.Constant(ir.IntType(64), n)  # a constant: the branches on it fold away

        return types.int64(arr), codegen

    return intrinsic(elem_bytes)


def _twin_elem_bytes(arr) -> int:
    return _numpy(arr).itemsize


def c_contiguous(arr) -> bool:
    """Host side: whether a kernel argument (a NumPy array or a device array,
    the simulator's too) is C-contiguous, so that a kernel may take the flat
    16-byte loads here (which index it as one run of elements); a strided
    view needs a build that reads element by element."""
    flags = getattr(arr, "flags", None)
    return bool(flags["C_CONTIGUOUS"]) if flags is not None else bool(arr.is_c_contiguous())


# ── the simulator twin ───────────────────────────────────────────────────────


def _attr(obj, name):
    """``obj.name`` without the simulator wrappers' ``__getattr__`` (which
    would index the array with the name), None where there is none."""
    try:
        return object.__getattribute__(obj, name)
    except AttributeError:
        return None


def _numpy(arr) -> np.ndarray:
    """The NumPy array behind a simulator kernel argument (a NumPy array, the
    simulator's in-kernel wrapper of a device array, or the tracer's proxy)."""
    while not isinstance(arr, np.ndarray):
        inner = _attr(arr, "_item")
        if inner is None:
            inner = _attr(arr, "_ary")
        if inner is None:
            return np.asarray(arr)
        arr = inner
    return arr


def _alloc_offset(arr) -> int:
    """Byte offset of ``arr``'s first element from the start of the
    allocation it views (the tracer's proxy knows it; a NumPy view's is
    the distance from the array that owns the memory)."""
    off = None if isinstance(arr, np.ndarray) else _attr(arr, "_off")
    if off is not None:
        return int(off)
    a = _numpy(arr)
    root = a
    while isinstance(root.base, np.ndarray):
        root = root.base
    return a.__array_interface__["data"][0] - root.__array_interface__["data"][0]


def _twin_aligned16(arr) -> bool:
    return _alloc_offset(arr) % VEC_BYTES == 0


def _twin_words(arr, index: int, what: str, sizes: tuple = (2, 4), nbytes: int = VEC_BYTES) -> int:
    """Byte offset of ``arr``'s flat element ``index`` (elements of
    ``sizes`` bytes), after the checks the hardware's fault would make for
    an ``nbytes``-byte access there: a C-contiguous array, the access
    aligned to its width and inside the array."""
    a = _numpy(arr)
    if a.itemsize not in sizes or not a.flags.c_contiguous:
        bits = [f"{8 * b}" for b in sizes]
        bits = f"{'-, '.join(bits[:-1])}- or {bits[-1]}" if len(bits) > 1 else bits[0]
        raise TypeError(f"{what} twin: a C-contiguous array of {bits}-bit elements, not {a.dtype} {a.strides}")
    per = nbytes // a.itemsize  # elements per load
    start = index * a.itemsize
    if (_alloc_offset(arr) + start) % nbytes:
        raise ValueError(
            f"{what} twin: element {index} (byte {_alloc_offset(arr) + start}) is not {nbytes}-byte aligned"
        )
    if index < 0 or index + per > a.size:
        raise IndexError(f"{what} twin: elements {index}..{index + per - 1} outside 0..{a.size - 1}")
    return start


def _twin_load(nbytes: int, what: str, sizes: tuple):
    """The twin of a global load of ``nbytes`` bytes (16, 8 or 4) as
    32-bit words: the fault checks, then one access of that width under
    the memory tracer, as the instruction makes."""

    def load(arr, index):
        index = int(index)
        start = _twin_words(arr, index, what, sizes, nbytes)
        a = _numpy(arr)
        hook = simwarp.TRACE_HOOK
        if hook is not None:
            a = _numpy(hook("load", arr, start, nbytes))
        w = a.reshape(-1)[index : index + nbytes // a.itemsize].view(np.uint32)
        return tuple(np.uint32(x) for x in w) if nbytes > 4 else np.uint32(w[0])

    load.__name__ = f"_twin_{what}"
    return load


_twin_ldg_v4 = _twin_load(VEC_BYTES, "ldg_v4", (1, 2, 4))
_twin_ldg_v2 = _twin_load(8, "ldg_v2", (1, 2, 4))
_twin_ldg_u32 = _twin_load(4, "ldg_u32", (1, 2))
_twin_ld_v4 = _twin_load(VEC_BYTES, "ld_v4", (2, 4))  # the same checks and access; coherent on the GPU


def _twin_stg_v4(arr, index, a, b, c, d):
    index = int(index)
    start = _twin_words(arr, index, "stg_v4")
    x = _numpy(arr)
    hook = simwarp.TRACE_HOOK
    if hook is not None:  # memory tracer: one 16-byte store, as the instruction makes
        x = _numpy(hook("store", arr, start, VEC_BYTES))
    x.reshape(-1)[index : index + VEC_BYTES // x.itemsize] = np.array([a, b, c, d], dtype=np.uint32).view(x.dtype)


def _twin_f32x4(arr, index, what: str):
    """The float32 words ``index .. index+3`` of ``arr`` (flat) as a view,
    after the checks the hardware's fault would make."""
    index = int(index)
    a = _numpy(arr)
    if a.dtype != np.float32 or not a.flags.c_contiguous:
        raise TypeError(f"{what} twin: a C-contiguous float32 array, not {a.dtype} {a.strides}")
    start = index * 4
    if (_alloc_offset(arr) + start) % VEC_BYTES:
        raise ValueError(f"{what} twin: element {index} (byte {_alloc_offset(arr) + start}) is not 16-byte aligned")
    if index < 0 or index + 4 > a.size:
        raise IndexError(f"{what} twin: elements {index}..{index + 3} outside 0..{a.size - 1}")
    return start


def _four_f32(a: np.ndarray, index) -> tuple:
    w = a.reshape(-1)[int(index) : int(index) + 4]
    return np.float32(w[0]), np.float32(w[1]), np.float32(w[2]), np.float32(w[3])


def _twin_ld_f32x4(arr, index):
    start = _twin_f32x4(arr, index, "ld_f32x4")
    hook = simwarp.TRACE_HOOK  # memory tracer: one 16-byte load (called here: the caller is the site)
    return _four_f32(_numpy(arr if hook is None else hook("load", arr, start, VEC_BYTES)), index)


def _twin_ldg_f32x4(arr, index):
    start = _twin_f32x4(arr, index, "ldg_f32x4")
    hook = simwarp.TRACE_HOOK
    return _four_f32(_numpy(arr if hook is None else hook("load", arr, start, VEC_BYTES)), index)


def _twin_st_f32x4(arr, index, a, b, c, d):
    start = _twin_f32x4(arr, index, "st_f32x4")
    x = _numpy(arr)
    hook = simwarp.TRACE_HOOK
    if hook is not None:  # memory tracer: one 16-byte store
        x = _numpy(hook("store", arr, start, VEC_BYTES))
    x.reshape(-1)[int(index) : int(index) + 4] = np.array([a, b, c, d], dtype=np.float32)


if config.ENABLE_CUDASIM:
    ld_f32x4 = _twin_ld_f32x4
    ldg_f32x4 = _twin_ldg_f32x4
    st_f32x4 = _twin_st_f32x4
    ldg_v4 = _twin_ldg_v4
    ldg_v2 = _twin_ldg_v2
    ldg_u32 = _twin_ldg_u32
    ld_v4 = _twin_ld_v4
    stg_v4 = _twin_stg_v4
    aligned16 = _twin_aligned16
    elem_bytes = _twin_elem_bytes
else:
    ld_f32x4 = _ld_f32x4()
    ldg_f32x4 = _ldg_f32x4()
    st_f32x4 = _st_f32x4()
    ldg_v4 = _load_words("ldg_v4", 4, "ld.global.nc", False, (8, 16, 32))
    ldg_v2 = _load_words("ldg_v2", 2, "ld.global.nc", False, (8, 16, 32))
    ldg_u32 = _load_words("ldg_u32", 1, "ld.global.nc", False, (8, 16))
    ld_v4 = _load_words("ld_v4", 4, "ld.global", True)
    stg_v4 = _stg_v4()
    aligned16 = _aligned16()
    elem_bytes = _elem_bytes()

ldg_v4.__doc__ = (
    "``(a, b, c, d) = ldg_v4(arr, i)``: ``arr[i:i+4]`` (flat index of a C-contiguous array of 32-bit "
    "elements; of 16-bit ones, ``arr[i:i+8]``, two a word; of 8-bit ones, ``arr[i:i+16]``, four a word) as "
    "uint32, one ``ld.global.nc.v4.u32``; the address must be 16-byte aligned."
)
ldg_v2.__doc__ = (
    "``(a, b) = ldg_v2(arr, i)``: ``arr[i:i+2]`` (flat index of a C-contiguous array of 32-bit elements; of "
    "16-bit ones, ``arr[i:i+4]``, two a word; of 8-bit ones, ``arr[i:i+8]``, four a word, the first in bits 0-7) "
    "as uint32, one ``ld.global.nc.v2.u32``; the address must be 8-byte aligned."
)
ldg_u32.__doc__ = (
    "``w = ldg_u32(arr, i)``: ``arr[i:i+4]`` of a C-contiguous array of 8-bit elements (the first in bits 0-7; "
    "of 16-bit ones, ``arr[i:i+2]``) as one uint32, one ``ld.global.nc.u32``; the address must be 4-byte aligned."
)
ld_v4.__doc__ = (
    "``(a, b, c, d) = ld_v4(arr, i)``: ``ldg_v4``'s words by one coherent ``ld.global.v4.u32`` (volatile), "
    "for an array the kernel also writes; the address must be 16-byte aligned."
)
stg_v4.__doc__ = (
    "``stg_v4(arr, i, a, b, c, d)``: four 32-bit words to ``arr[i:i+4]`` (flat index of a C-contiguous "
    "array of 32-bit elements; of 16-bit ones, ``arr[i:i+8]``, two a word, the lower-addressed in bits "
    "0-15), one ``st.global.v4.b32``; the address must be 16-byte aligned."
)
ld_f32x4.__doc__ = (
    "``(a, b, c, d) = ld_f32x4(arr, i)``: ``arr[i:i+4]`` (flat index of a C-contiguous float32 array), "
    "one coherent ``ld.global.v4.f32``; the address must be 16-byte aligned."
)
ldg_f32x4.__doc__ = (
    "``(a, b, c, d) = ldg_f32x4(arr, i)``: ``arr[i:i+4]`` (flat index of a C-contiguous float32 array that "
    "no thread writes while the kernel runs), one ``ld.global.nc.v4.f32``; the address must be 16-byte aligned."
)
st_f32x4.__doc__ = (
    "``st_f32x4(arr, i, a, b, c, d)``: ``arr[i:i+4] = a, b, c, d`` (flat index of a C-contiguous float32 "
    "array), one ``st.global.v4.f32``; the address must be 16-byte aligned."
)
aligned16.__doc__ = "True when the array's first element is 16-byte aligned (its data pointer)."


# ── a row's 16 bytes as float32 ──────────────────────────────────────────────


def _wide_rows():
    from numba import float32, uint32

    from . import cvt
    from .launch import device_inline

    @device_inline
    def as_f32(x):
        return float32(x)

    def eights(eight, elem):
        """``(load, unit)`` of 2-byte rows: ``eight`` the four words' values,
        ``elem`` one element's (fp16: a cast; bf16 bits: a shift)."""

        @device_inline
        def load(a, i, ok):
            w0 = w1 = w2 = w3 = uint32(0)
            if ok:
                w0, w1, w2, w3 = ldg_v4(a, i)
            return eight((w0, w1, w2, w3))

        @device_inline
        def unit(a, row, k, c, aligned):
            if aligned:
                return load(a, row * k + c * 8, True)
            b = c * 8
            return (
                elem(a[row, b]),
                elem(a[row, b + 1]),
                elem(a[row, b + 2]),
                elem(a[row, b + 3]),
                elem(a[row, b + 4]),
                elem(a[row, b + 5]),
                elem(a[row, b + 6]),
                elem(a[row, b + 7]),
            )

        return load, unit

    @device_inline
    def amax8(x):
        x0, x1, x2, x3, x4, x5, x6, x7 = x
        return max(max(max(abs(x0), abs(x1)), max(abs(x2), abs(x3))), max(max(abs(x4), abs(x5)), max(abs(x6), abs(x7))))

    @device_inline
    def load_f32(a, i, ok):
        z = float32(0.0)
        x0 = x1 = x2 = x3 = z
        if ok:
            x0, x1, x2, x3 = ldg_f32x4(a, i)
        return x0, x1, x2, x3

    @device_inline
    def amax4(x):
        x0, x1, x2, x3 = x
        return max(max(abs(x0), abs(x1)), max(abs(x2), abs(x3)))

    @device_inline
    def unit_f32(a, row, k, c, aligned):
        if aligned:
            return load_f32(a, row * k + c * 4, True)
        b = c * 4
        return float32(a[row, b]), float32(a[row, b + 1]), float32(a[row, b + 2]), float32(a[row, b + 3])

    load_f16, unit_f16 = eights(cvt.f16x8_to_f32, as_f32)
    load_bf16, unit_bf16 = eights(cvt.bf16x8_to_f32, cvt.bf16_to_f32)
    return {
        2: (8, load_f16, amax8, unit_f16),
        4: (4, load_f32, amax4, unit_f32),
        "bf16": (8, load_bf16, amax8, unit_bf16),
    }


_WIDE_ROWS: dict = {}


def wide_rows(esize: int, bf16: bool = False):
    """``(per, load, amax, unit)`` for rows of ``esize``-byte activations
    (fp16: 2, float32: 4) read 16 bytes a lane: ``load(a, i, ok)`` the
    ``per`` (8 or 4) float32 values of ``a``'s flat elements ``i ..`` by one
    16-byte load (zeros where not ``ok``; ``i`` 16-byte aligned),
    ``amax(values)`` their largest magnitude, ``unit(a, row, k, c,
    aligned)`` the ``c``-th 16 bytes of row ``row`` of a C-contiguous ``a``
    (``k`` a row's elements) by one load where ``aligned`` (``a``'s first
    element 16-byte aligned), else one element a load. ``bf16``: 2-byte
    elements that are bf16 bits (uint16). The activation quantisers'
    (``rowquant``, ``nvfp4_act``, ``ffn.prefill``'s ``q8_blocks``, the
    attention projections' crush)."""
    if not _WIDE_ROWS:
        _WIDE_ROWS.update(_wide_rows())
    key = "bf16" if bf16 and esize == 2 else esize
    if key not in _WIDE_ROWS or (bf16 and esize != 2):
        raise TypeError(f"activation rows: fp16, bf16 or float32, not {esize}-byte elements")
    return _WIDE_ROWS[key]
