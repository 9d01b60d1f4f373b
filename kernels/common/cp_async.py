"""Asynchronous global -> shared copies (``cp.async``, sm_80 and later),
callable from ``@cuda.jit`` kernels, with a simulator twin that lands each
copy when the hardware guarantees it, not before.

::

    cp_async_16(dst, dst_byte, src, src_index, src_bytes)
        # 16 bytes of the global array ``src`` from element ``src_index`` on
        # (of its flat, C-contiguous data) to byte ``dst_byte`` (a multiple
        # of 16) of the shared array ``dst``; only the first ``src_bytes``
        # (0..16) are read, the rest of the 16 zero-filled: an edge tile's
        # rows and K past the end stage as zeros without a branch.
    cp_async_commit()       # close the group of copies this thread issued
    cp_async_wait(n)        # n a constant: wait until at most n of this
                            # thread's groups are still in flight
    cp_async_wait_all()     # every group, committed or not

The usual multi-stage loop issues the copies of stage ``s + S - 1``,
commits them, waits with ``cp_async_wait(S - 2)`` (the oldest stage has
landed), then ``cuda.syncthreads()`` (every thread's copies of it have),
and only then reads stage ``s``.

On the CUDA target these are ``cp.async.cg.shared.global`` with a source
size (``LDGSTS.E.BYPASS.128`` in SASS: the L1 is bypassed, 16 bytes per
thread), ``cp.async.commit_group`` (``LDGDEPBAR``) and
``cp.async.wait_group`` / ``wait_all`` (``DEPBAR``), each inline PTX with a
memory clobber so that no shared load moves across a wait. The source
address must be 16-byte aligned whatever ``src_bytes`` is.

**The simulator twin** reads the source bytes when the copy is issued and
keeps them per thread; ``commit`` closes a group; a wait writes the groups
it waits for into shared memory, oldest first. Until then the destination
keeps what it held: a kernel that reads a stage without waiting for it, or
before the barrier after the wait, reads stale data in the simulator as it
could on a GPU, and its check fails. Copies never waited for never land.
Under the memory tracer each copy counts as one 16-byte global load (when
issued) and one 16-byte shared store (when it lands), as the hardware
makes them.
"""

from __future__ import annotations

import numpy as np
from numba import config

from . import ptx_stmt, simwarp

COPY_BYTES = 16


# ── the CUDA target ──────────────────────────────────────────────────────────


def _copy_16():
    from llvmlite import ir
    from numba.cuda import types
    from numba.cuda.extending import intrinsic

    def cp_async_16(typingctx, dst, dst_byte, src, src_index, src_bytes):
        if not (isinstance(dst, types.Array) and isinstance(src, types.Array)):
            return None
        if not all(isinstance(x, types.Integer) for x in (dst_byte, src_index, src_bytes)):
            return None

        def codegen(context, builder, signature, args):
            i32, i64 = ir.IntType(32), ir.IntType(64)
            dst_a = context.make_array(signature.args[0])(context, builder, args[0])
            src_a = context.make_array(signature.args[2])(context, builder, args[2])
            # the shared-window address of dst's data, plus the byte offset
            gen = builder.ptrtoint(dst_a.data, i64)
            cvta = ir.InlineAsm(ir.FunctionType(i64, [i64]), "cvta.to.shared.u64 $0, $1;", "=l,l")
            sh = builder.trunc(builder.call(cvta, [gen]), i32)
            off = context.cast(builder, args[1], signature.args[1], types.uint32)
            daddr = builder.add(sh, off)
            # the source element's address (generic; a global array's is its global address)
            idx = context.cast(builder, args[3], signature.args[3], types.intp)
            sptr = builder.ptrtoint(builder.gep(src_a.data, [idx]), i64)
            nbytes = context.cast(builder, args[4], signature.args[4], types.uint32)
            fnty = ir.FunctionType(ir.VoidType(), [i32, i64, i32])
            asm = ir.InlineAsm(fnty, "cp.async.cg.shared.global [$0], [$1], 16, $2;", "r,l,r,~{memory}", True)
            builder.call(asm, [daddr, sptr, nbytes])
            return context.get_dummy_value()

        return types.void(dst, dst_byte, src, src_index, src_bytes), codegen

    return intrinsic(cp_async_16)


# ── the simulator twin ───────────────────────────────────────────────────────

_STATE = "_leverctl_cp_async"  # per simulated thread: [pending copies, committed groups]


def _state(t) -> list:
    st = getattr(t, _STATE, None)
    if st is None:
        st = [[], []]
        setattr(t, _STATE, st)
    return st


def _twin_copy_16(dst, dst_byte, src, src_index, src_bytes):
    dst_byte, src_index, src_bytes = int(dst_byte), int(src_index), int(src_bytes)
    if dst_byte % COPY_BYTES:
        raise ValueError(f"cp.async twin: destination byte {dst_byte} is not 16-byte aligned")
    if not 0 <= src_bytes <= COPY_BYTES:
        raise ValueError(f"cp.async twin: source size {src_bytes} is not 0..16")
    hook = simwarp.TRACE_HOOK
    start = src_index * np.asarray(src).dtype.itemsize if hasattr(src, "dtype") else src_index
    if start % COPY_BYTES:
        raise ValueError(f"cp.async twin: source byte {start} is not 16-byte aligned")
    data = np.zeros(COPY_BYTES, np.uint8)
    if src_bytes:
        arr = hook("load", src, start, COPY_BYTES) if hook is not None else src
        raw = np.asarray(arr).reshape(-1).view(np.uint8)
        if start + src_bytes > raw.size:
            raise IndexError(f"cp.async twin: source bytes {start}..{start + src_bytes - 1} past {raw.size}")
        data[:src_bytes] = raw[start : start + src_bytes]
    _state(simwarp.current_lane())[0].append((dst, dst_byte, data))


def _twin_commit():
    st = _state(simwarp.current_lane())
    st[1].append(st[0])
    st[0] = []


def _land(groups: list) -> None:
    hook = simwarp.TRACE_HOOK
    for group in groups:
        for dst, off, data in group:
            arr = hook("store", dst, off, COPY_BYTES) if hook is not None else dst
            raw = np.asarray(arr).reshape(-1).view(np.uint8)
            raw[off : off + COPY_BYTES] = data


def _twin_wait(n):
    st = _state(simwarp.current_lane())
    keep = int(n)
    done = st[1][: max(0, len(st[1]) - keep)]
    st[1] = st[1][len(done) :]
    _land(done)


def _twin_wait_all():
    _twin_commit()
    _twin_wait(0)


if config.ENABLE_CUDASIM:
    cp_async_16 = _twin_copy_16
    cp_async_commit = _twin_commit
    cp_async_wait = _twin_wait
    cp_async_wait_all = _twin_wait_all
else:
    cp_async_16 = _copy_16()
    cp_async_commit = ptx_stmt.void("cp.async.commit_group;", "cp_async_commit")
    cp_async_wait = ptx_stmt.void_n("cp.async.wait_group {n};", "cp_async_wait")
    cp_async_wait_all = ptx_stmt.void("cp.async.wait_all;", "cp_async_wait_all")
