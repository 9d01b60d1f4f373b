"""32-bit index arithmetic in a streaming loop that LLVM would widen.

A streaming loop indexes a row of weights by the step's load number ``q``:
``ldg_v4(w[e, n], q * 4)``. Numba's integers are 64-bit, and LLVM keeps a
loop's induction variable 64-bit (widening a 32-bit one to spare the
extensions), so each address is 64-bit arithmetic: the row's element index
plus ``q * 4`` (a shift, a funnel shift, two adds with carry), scaled by the
element size and added to the base (two more), five instructions a load
where ``IMAD.WIDE.U32 address, q4, 4, row`` is one. Two functions let a
kernel write the one-instruction form:

* ``row(a)``: the array ``a`` unchanged, its data pointer passed through an
  opaque ``mov.b64``, so that LLVM cannot fold a view's offset into the
  indices of the loads from it: the row's address is computed once, before
  the loop (the move has no side effect and is hoisted with its operands).
  The moved address is made a global pointer cast to a generic one, as a
  kernel's array argument is, so that NVVM still loads through it by
  ``ld.global`` (an integer turned straight into a generic pointer gives
  generic ``LD``);
* ``u32(x)``: ``x`` as a uint32 through an opaque ``mov.b32``, so that LLVM
  cannot widen it back; a load's index then extends it for free
  (``IMAD.WIDE.U32``).

Both moves are erased by ptxas: they cost no instruction. ``u32`` keeps the
low 32 bits, as ``np.uint32`` does: a caller's index must fit (a row's
16-byte loads do: a weight row has fewer than ``2**32`` words). In the
simulator both are the identity (``u32`` a ``np.uint32``).
"""

from __future__ import annotations

import numpy as np
from numba import config


def _intrinsics():
    from llvmlite import ir
    from numba.cuda import types
    from numba.cuda.extending import intrinsic

    def _mov(builder, bits, value):
        t = ir.IntType(bits)
        fnty = ir.FunctionType(t, [t])
        return builder.call(ir.InlineAsm(fnty, f"mov.b{bits} $0, $1;", "=l,l" if bits == 64 else "=r,r"), [value])

    def row(typingctx, arr):
        if not isinstance(arr, types.Array):
            return None

        def codegen(context, builder, signature, args):
            a = context.make_array(signature.args[0])(context, builder, args[0])
            addr = _mov(builder, 64, builder.ptrtoint(a.data, ir.IntType(64)))
            # a global pointer cast to a generic one, as a kernel's array
            # argument is: NVVM then still loads through it by ld.global
            glob = builder.inttoptr(addr, a.data.type.pointee.as_pointer(1))
            out = context.make_array(signature.return_type)(context, builder)
            context.populate_array(
                out,
                data=builder.addrspacecast(glob, a.data.type),
                shape=a.shape,
                strides=a.strides,
                itemsize=a.itemsize,
                meminfo=a.meminfo,
                parent=a.parent,
            )
            return out._getvalue()

        return arr(arr), codegen

    def u32(typingctx, x):
        if not isinstance(x, types.Integer):
            return None

        def codegen(context, builder, signature, args):
            return _mov(builder, 32, context.cast(builder, args[0], signature.args[0], types.uint32))

        return types.uint32(x), codegen

    return intrinsic(row), intrinsic(u32)


def _twin_row(arr):
    return arr


def _twin_u32(x):
    return np.uint32(int(x) & 0xFFFFFFFF)


if config.ENABLE_CUDASIM:
    row, u32 = _twin_row, _twin_u32
else:
    row, u32 = _intrinsics()
