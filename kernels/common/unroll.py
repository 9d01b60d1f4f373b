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
    each_group(body, tail, acc, g, extra)
                                    # body(i, acc[i:i+g], extra) for every
                                    # whole group of g (i = 0, g, 2g, ...),
                                    # then tail(i, acc[i], extra) for each
                                    # element past the last whole group

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


def _each_group():
    from numba.cuda import types
    from numba.cuda.extending import intrinsic

    def each_group(typingctx, body, tail, acc, size, extra):
        if not (isinstance(acc, types.UniTuple) and isinstance(size, types.IntegerLiteral)):
            return None
        g = size.literal_value
        if g < 1:
            return None
        full = acc.count // g * g
        part = types.UniTuple(acc.dtype, g)
        gsig = typingctx.resolve_function_type(body, (types.intp, part, extra), {}) if full else None
        tsig = typingctx.resolve_function_type(tail, (types.intp, acc.dtype, extra), {}) if full < acc.count else None
        if (full and gsig is None) or (full < acc.count and tsig is None):
            return None

        def codegen(context, builder, signature, args):
            if full:
                impl = context.get_function(body, gsig)
                for i in range(0, full, g):
                    vals = [builder.extract_value(args[2], i + j) for j in range(g)]
                    impl(
                        builder, (context.get_constant(types.intp, i), context.make_tuple(builder, part, vals), args[4])
                    )
            if full < acc.count:
                impl = context.get_function(tail, tsig)
                for i in range(full, acc.count):
                    impl(builder, (context.get_constant(types.intp, i), builder.extract_value(args[2], i), args[4]))
            return context.get_dummy_value()

        return types.void(body, tail, acc, size, extra), codegen

    return intrinsic(each_group)


def _twin_each(body, acc, extra):
    for i, v in enumerate(acc):
        body(i, v, extra)


def _twin_each_map(body, x, y, extra):
    return tuple(body(i, a, b, extra) for i, (a, b) in enumerate(zip(x, y)))


def _twin_each_group(body, tail, acc, size, extra):
    full = len(acc) // size * size
    for i in range(0, full, size):
        body(i, tuple(acc[i : i + size]), extra)
    for i in range(full, len(acc)):
        tail(i, acc[i], extra)


if config.ENABLE_CUDASIM:
    each, each_map, each_group = _twin_each, _twin_each_map, _twin_each_group
else:
    each, each_map, each_group = _each(), _each_map(), _each_group()
