"""Kernels planted for ``test_machine.py``: each holds memory operations of
known widths, a local array, register spills, shared memory or a
tensor-core tile, so that what ptxas and nvdisasm make of it can be checked
against what was planted.

Run as a script, in a child process with the CUDA simulator off (the test
session itself runs in the simulator), it compiles every kernel to PTX for
compute capability 9.0 without a GPU::

    python tests/profile/planted_kernels.py OUT_DIR

writes ``OUT_DIR/<name>.ptx`` and prints ``{"kernels": [names]}``; it
exits with ``ptx_harness.SKIP`` (and a ``{"skip": why}`` line) where there
is no libNVVM to compile with. The 128-bit global accesses, ``cp.async``,
``ldmatrix`` and ``mma.sync`` are inline PTX (Numba has no spelling for
them), emitted through llvmlite's ``InlineAsm`` as the project's kernels
do (``kernels/common/mma.py``).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
HARNESS = HERE.parent / "kernels"  # ptx_harness.py: the sm_90 look-ups and the libNVVM probe

SPILL_ACCUMULATORS = 48  # live floats in `spills`: more than the 32 registers its launch bounds leave
SPILL_BOUNDS = (1024, 2)  # 1024 threads, 2 blocks per SM: 65536 / 2048 = 32 registers per thread


def _asm(name: str, text: str, constraints: str, n_out: int, arg_kinds: tuple[str, ...]):
    """An ``@intrinsic`` emitting ``text``. ``arg_kinds`` per argument:
    ``"ptr"`` (an array and an index: the element's address, 64-bit),
    ``"u32"`` or ``"f32"`` (a scalar). It returns ``n_out`` uint32 values
    (a tuple) or nothing."""
    from llvmlite import ir
    from numba.cuda import cgutils, types
    from numba.cuda.extending import intrinsic

    def typer(typingctx, args):
        sig_args, i = [], 0
        for kind in arg_kinds:
            if kind == "ptr":
                sig_args += [args[i], types.intp]
                i += 2
            else:
                sig_args.append(types.uint32 if kind == "u32" else types.float32)
                i += 1
        ret = types.UniTuple(types.uint32, n_out) if n_out else types.void
        sig = ret(*sig_args)

        def codegen(context, builder, signature, llargs):
            ops, tys, j = [], [], 0
            for kind in arg_kinds:
                if kind == "ptr":
                    aryty = signature.args[j]
                    ary = context.make_array(aryty)(context, builder, llargs[j])
                    ptr = cgutils.get_item_pointer(context, builder, aryty, ary, [llargs[j + 1]])
                    ops.append(builder.ptrtoint(ptr, ir.IntType(64)))
                    tys.append(ir.IntType(64))
                    j += 2
                else:
                    ops.append(llargs[j])
                    tys.append(ir.IntType(32) if kind == "u32" else ir.FloatType())
                    j += 1
            i32 = ir.IntType(32)
            out_ty = ir.LiteralStructType([i32] * n_out) if n_out > 1 else i32 if n_out else ir.VoidType()
            res = builder.call(ir.InlineAsm(ir.FunctionType(out_ty, tys), text, constraints, side_effect=True), ops)
            if not n_out:
                return context.get_dummy_value()
            outs = [builder.extract_value(res, k) for k in range(n_out)] if n_out > 1 else [res]
            return context.make_tuple(builder, signature.return_type, outs)

        return sig, codegen

    # Numba's lowering takes no *args in an intrinsic: one parameter each.
    n_args = sum(2 if kind == "ptr" else 1 for kind in arg_kinds)
    params = ", ".join(f"x{k}" for k in range(n_args))
    scope = {"typer": typer}
    exec(f"def {name}(typingctx, {params}):\n    return typer(typingctx, ({params},))", scope)
    return intrinsic(scope[name])


def kernels() -> dict:
    """``{name: (python function, signature, launch bounds or None)}``; on
    the CUDA target only (the intrinsics have no simulator twin)."""
    from numba import cuda, float32, int32

    to_global = "{ .reg .u64 p; cvta.to.global.u64 p, $%d; "
    to_shared = "{ .reg .u64 p; cvta.to.shared.u64 p, $%d; "
    ld_v4 = _asm("ld_v4", to_global % 4 + "ld.global.v4.u32 {$0, $1, $2, $3}, [p]; }", "=r,=r,=r,=r,l", 4, ("ptr",))
    st_v4 = _asm(
        "st_v4",
        to_global % 0 + "st.global.v4.u32 [p], {$1, $2, $3, $4}; }",
        "l,r,r,r,r,~{memory}",
        0,
        ("ptr", "u32", "u32", "u32", "u32"),
    )
    cp_async16 = _asm(
        "cp_async16",
        "{ .reg .u64 s, g; cvta.to.shared.u64 s, $0; cvta.to.global.u64 g, $1; "
        "cp.async.cg.shared.global [s], [g], 16; cp.async.commit_group; cp.async.wait_group 0; }",
        "l,l,~{memory}",
        0,
        ("ptr", "ptr"),
    )
    ldsm_x4 = _asm(
        "ldsm_x4",
        to_shared % 4 + "ldmatrix.sync.aligned.m8n8.x4.shared.b16 {$0, $1, $2, $3}, [p]; }",
        "=r,=r,=r,=r,l,~{memory}",
        4,
        ("ptr",),
    )
    ldsm_x2_trans = _asm(
        "ldsm_x2_trans",
        to_shared % 2 + "ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {$0, $1}, [p]; }",
        "=r,=r,l,~{memory}",
        2,
        ("ptr",),
    )
    mma_bf16 = _asm(
        "mma_bf16",
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {$0, $1, $2, $3}, {$4, $5, $6, $7}, {$8, $9}, "
        "{$10, $11, $12, $13};",
        "=r,=r,=r,=r,r,r,r,r,r,r,f,f,f,f",
        4,
        ("u32",) * 6 + ("f32",) * 4,
    )

    def copy_f32(dst, src):
        i = cuda.grid(1)
        if i < src.size:
            dst[i] = src[i]  # one LDG.E, one STG.E: 32 bits

    def copy_widths(d8, s8, d16, s16, d64, s64):
        i = cuda.grid(1)
        if i < s8.size:
            d8[i] = s8[i]  # 8 bits
            d16[i] = s16[i]  # 16 bits
            d64[i] = s64[i]  # 64 bits

    def copy_v4(dst, src):
        i = cuda.grid(1)
        if 4 * i < src.size:
            a, b, c, d = ld_v4(src, 4 * i)  # LDG.E.128
            st_v4(dst, 4 * i, a, b, c, d)  # STG.E.128

    def local_array(dst, src, idx):
        i = cuda.grid(1)
        buf = cuda.local.array(64, float32)
        for j in range(64):
            buf[j] = src[i + j]
        dst[i] = buf[idx[i] & 63]  # indexed at run time: the array lives in local memory

    def shared_tile(dst, src):
        tile = cuda.shared.array(256, float32)  # 1 KiB of static shared memory
        t = cuda.threadIdx.x
        tile[t] = src[t]  # STS
        cuda.syncthreads()  # BAR.SYNC
        dst[t] = tile[255 - t]  # LDS

    def tc_tile(out, a_hi, a_lo):
        """cp.async a 16x16 bf16 tile into shared memory, ldmatrix it (x4,
        and x2 transposed), one mma.sync bf16."""
        tile = cuda.shared.array(256, int32)
        t = cuda.threadIdx.x
        cp_async16(tile, 4 * t, a_hi, 4 * t)  # LDGSTS
        cuda.syncthreads()
        r0, r1, r2, r3 = ldsm_x4(tile, 4 * t)  # LDSM.16.M88.4
        b0, b1 = ldsm_x2_trans(tile, 4 * (t & 15))  # LDSM.16.MT88.2
        d0, d1, d2, d3 = mma_bf16(r0, r1, r2, r3, b0, b1, a_lo[t], a_lo[t + 1], a_lo[t + 2], a_lo[t + 3])
        out[t] = d0 ^ d1 ^ d2 ^ d3

    spills = _spilling_kernel(cuda)

    f32, u8, i16, f64, u32 = "float32[::1]", "uint8[::1]", "int16[::1]", "float64[::1]", "uint32[::1]"
    return {
        "copy_f32": (copy_f32, f"void({f32}, {f32})", None),
        "copy_widths": (copy_widths, f"void({u8}, {u8}, {i16}, {i16}, {f64}, {f64})", None),
        "copy_v4": (copy_v4, f"void({u32}, {u32})", None),
        "local_array": (local_array, f"void({f32}, {f32}, int32[::1])", None),
        "shared_tile": (shared_tile, f"void({f32}, {f32})", None),
        "tc_tile": (tc_tile, f"void({u32}, int32[::1], {f32})", None),
        "spills": (spills, f"void({f32}, {f32}, int32)", SPILL_BOUNDS),
    }


def _spilling_kernel(cuda):
    """A loop carrying :data:`SPILL_ACCUMULATORS` float32 accumulators, each
    feeding the next, so that all are live at once: under
    :data:`SPILL_BOUNDS` ptxas has 32 registers and must spill. Written out
    by code (one line per accumulator) because a local array would live in
    local memory whole, which is not a spill."""
    n = SPILL_ACCUMULATORS
    lines = ["def spills(dst, src, n):", "    i = cuda.grid(1)"]
    lines += [f"    a{k} = src[i + {k}]" for k in range(n)]
    lines += ["    for j in range(n):", "        x = src[i + j]"]
    lines += [f"        a{k} = a{k} * x + a{(k + 1) % n}" for k in range(n)]
    lines += ["    dst[i] = " + " + ".join(f"a{k}" for k in range(n))]
    scope: dict = {"cuda": cuda}
    exec(compile("\n".join(lines), f"<{__name__}.spills>", "exec"), scope)
    return scope["spills"]


def harness():
    """``tests/kernels/ptx_harness.py``: its folder on ``sys.path``, as
    pytest puts it there for the kernel tests."""
    if str(HARNESS) not in sys.path:
        sys.path.append(str(HARNESS))
    import ptx_harness

    return ptx_harness


def main(out_dir: str) -> None:
    """Compile every kernel to ``out_dir/<name>.ptx`` for CC 9.0."""
    h = harness()
    h._answer_lookups_for_sm90()
    h._probe()  # exits with SKIP where there is no libNVVM
    from numba import cuda

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    names = []
    for name, (fn, sig, bounds) in kernels().items():
        ptx, _ = cuda.compile_ptx(fn, sig, cc=(9, 0), launch_bounds=bounds)
        (out / f"{name}.ptx").write_text(ptx)
        names.append(name)
    print(json.dumps({"kernels": names}))


if __name__ == "__main__":
    # Before numba is imported: the CUDA target, not the simulator, sm_90 named.
    os.environ.pop("NUMBA_ENABLE_CUDASIM", None)
    os.environ["NUMBA_FORCE_CUDA_CC"] = "9.0"
    if harness().cuda_home():
        os.environ["CUDA_HOME"] = harness().cuda_home()
    main(sys.argv[1])
