"""Inline PTX statements without register operands, as numba-cuda
intrinsics: a fence, a commit, a wait. Each is emitted with a side effect
and a memory clobber, so the compiler moves no load or store across it.
``common/wgmma.py`` and ``common/cp_async.py`` build their barriers from
these; the simulator twins do not use them.
"""

from __future__ import annotations


def _emit(builder, text: str) -> None:
    from llvmlite import ir

    fnty = ir.FunctionType(ir.VoidType(), [])
    builder.call(ir.InlineAsm(fnty, text, "~{memory}", side_effect=True), [])


def void(text: str, name: str):
    """``name()``: emits ``text``."""
    from numba.cuda import types
    from numba.cuda.extending import intrinsic

    def fn(typingctx):
        def codegen(context, builder, signature, args):
            _emit(builder, text)
            return context.get_dummy_value()

        return types.void(), codegen

    fn.__name__ = name
    return intrinsic(fn)


def void_n(template: str, name: str):
    """``name(N)``, ``N`` a compile-time integer: emits ``template.format(n=N)``
    (a wait's group count is part of the instruction)."""
    from numba.cuda import types
    from numba.cuda.extending import intrinsic

    def fn(typingctx, n):
        if not isinstance(n, types.IntegerLiteral):
            return None
        text = template.format(n=int(n.literal_value))

        def codegen(context, builder, signature, args):
            _emit(builder, text)
            return context.get_dummy_value()

        return types.void(n), codegen

    fn.__name__ = name
    return intrinsic(fn)
