"""Loops over a tuple of registers (a GEMM's accumulators) unrolled at
compile time, so that every element's index is a constant.

Numba indexes a tuple with a loop variable through a switch over every
element: a 64-accumulator store written as ``for i in range(64): ...
acc[i]`` compiles (sm_90a) to a binary search per element and two store
instructions, not 64 stores. These two intrinsics call a device function
once per element with the index as a constant instead (it inlines and
folds: 64 accumulators, 64 stores)::

    each(body, acc, extra)          # body(i, acc[i], extra) for every i
    out = each_map(body, x, y, extra)  # out[i] = body(i, x[i], y[i], extra)

``x`` and ``y`` are tuples of one length (``UniTuple``), ``out`` one of the
body's return type; ``extra`` is one
tuple carrying whatever else the body needs (arrays, offsets). In the
simulator they are plain Python loops.
"""

from __future__ import annotations

from numba import config


def _each():
    from numba.cuda import types
    from numba.cuda.extending import intrinsic

    def each(typingctx, body, acc, extra):
        if not isinstance(acc, types.UniTuple):
            return None
        bsig = typingctx.resolve_function_type(body, (types.intp, acc.dtype, extra), {})
        if bsig is None:
            return None

        def codegen(context, builder, signature, args):
            impl = context.get_function(body, bsig)
            for i in range(acc.count):
                impl(builder, (context.get_constant(types.intp, i), builder.extract_value(args[1], i), args[2]))
            return context.get_dummy_value()

        return types.void(body, acc, extra), codegen

    return intrinsic(each)


def _each_map():
    from numba.cuda import types
    from numba.cuda.extending import intrinsic

    def each_map(typingctx, body, x, y, extra):
        if not (isinstance(x, types.UniTuple) and isinstance(y, types.UniTuple) and x.count == y.count):
            return None
        bsig = typingctx.resolve_function_type(body, (types.intp, x.dtype, y.dtype, extra), {})
        if bsig is None:
            return None
        out = types.UniTuple(bsig.return_type, x.count)

        def codegen(context, builder, signature, args):
            impl = context.get_function(body, bsig)
            vals = []
            for i in range(x.count):
                xi, yi = builder.extract_value(args[1], i), builder.extract_value(args[2], i)
                vals.append(impl(builder, (context.get_constant(types.intp, i), xi, yi, args[3])))
            return context.make_tuple(builder, out, vals)

        return out(body, x, y, extra), codegen

    return intrinsic(each_map)


def _twin_each(body, acc, extra):
    for i, v in enumerate(acc):
        body(i, v, extra)


def _twin_each_map(body, x, y, extra):
    return tuple(body(i, a, b, extra) for i, (a, b) in enumerate(zip(x, y)))


if config.ENABLE_CUDASIM:
    each, each_map = _twin_each, _twin_each_map
else:
    each, each_map = _each(), _each_map()
