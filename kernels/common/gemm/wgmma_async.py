"""A multi-stage wgmma mainloop. Operands that need no transform on the
way in (bf16, fp16 or E4M3 already) are copied global -> shared by
``cp.async`` (``common/cp_async.py``) into 128-byte-swizzled K-major tiles
(a B that does need one -- NVFP4 or int4 weights -- goes through
``wgmma_gemm``'s stagers into the same layout, from registers, while the
tensor cores work on the current stage)
(``common/swizzle.py``), ``STAGES`` of them in flight in dynamic shared
memory (``common/dynsmem.py`` past 48 KiB), read by ``wgmma.mma_async``
through mode-1 descriptors, the accumulators tied to the wait
(``wgmma.wait_acc``).

Geometry, as ``common/wgmma_gemm.py``'s (whose stagers transform B and
stay there): ``WG`` warpgroups per block, each on 64 rows of A; ``BN``
rows of B per block; ``blockIdx.x`` along B's rows, ``blockIdx.y`` along
A's; the epilogue scales by ``rs[row] * cs[col] * ts[0]`` and stores at
``y[r, c]`` or, with ``swap``, ``y[c, r]`` (``wgmma_gemm.make_store``).

One stage is 128 bytes of K per row (64 bf16 or 128 E4M3): a swizzle atom
wide, ``(64 WG + BN) x 128`` bytes. Each thread copies 16-byte chunks,
chunk ``c`` of a tile being row ``c // 8``, K chunk ``c % 8``; a chunk past
the rows or past ``k`` copies 0 source bytes (zero-filled), so edges need
no branch around the copy. The loop, per K stage ``kt``::

    wait until stage kt has landed (cp.async.wait_group STAGES - 2),
    fence.proxy.async (the copies, generic-proxy writes, made visible to
    the tensor cores), barrier;
    issue the copies of stage kt + STAGES - 1 into the slot stage kt - 1
    used (every warpgroup finished reading it before the barrier), commit;
    wgmma over the stage's K (4 x k16 bf16 or 4 x k32 E4M3), commit,
    wait with the accumulators tied.

So ``STAGES - 1`` stages of loads are in flight while the tensor cores
work. Rows of A and B must start on 16 bytes (``k`` a multiple of 8 bf16
or 16 E4M3): ``wgmma_gemm.K_MULTIPLE`` (16) covers both.

The dynamic shared memory's start is rounded up to 1024 bytes at run time
(a swizzled tile's pattern follows absolute address bits), so a block asks
for 1 KiB more than its stages.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
from numba import cuda, uint32

from .. import cp_async as ca
from .. import dynsmem
from .. import launch as L
from .. import swizzle as sw
from .. import wgmma as wg
from .. import wgmma_gemm as P

BM = wg.M
STAGE_KBYTES = sw.ROW_BYTES  # 128 bytes of K per stage
CHUNKS = STAGE_KBYTES // 16
STEP = 32  # one instruction's K in bytes (k16 bf16, k32 E4M3)
KSUB = STAGE_KBYTES // STEP


def shared_bytes(wgs: int, bn: int, stages: int) -> int:
    """Dynamic shared memory a block asks for: the stages, and 1 KiB to
    round the start up to 1024 bytes."""
    return stages * (BM * wgs + bn) * STAGE_KBYTES + sw.ATOM_BYTES


# deliberate bugs, for the tests that prove the checks: a stage read before
# its copies landed, copies that ignore the swizzle the descriptors assume,
# the stages read out of order, one instruction of each stage's K dropped
FAULTS = ("no_wait", "no_swizzle", "stage_order", "short_k")


def _make_issue(threads: int, esize: int, swizzle: bool = True):
    """``issue(smem, at, src, nrows, k, r0, k0, tid, rows)``: the copies of
    one tile's stage (rows ``r0..r0+rows`` of ``src``, K from ``k0``)."""
    epc = 16 // esize  # elements per 16-byte chunk

    @cuda.jit(device=True, inline="always")
    def issue(smem, at, src, nrows, k, r0, k0, tid, rows):
        words = src.shape[1]  # uint32 words per row
        for c in range(tid, rows * CHUNKS, threads):
            r = c >> 3
            kc = c & 7
            gr = r0 + r
            gk = k0 + kc * epc
            nbytes = 0
            at_src = 0
            if gr < nrows and gk < k:
                nbytes = min(16, (k - gk) * esize)
                at_src = gr * words + (gk * esize >> 2)
            off = r * STAGE_KBYTES + kc * 16
            ca.cp_async_16(smem, at + (sw.sw128(off) if swizzle else off), src, at_src, nbytes)

    return issue


@lru_cache(maxsize=None)
def kernel(dtype: str, wgs: int, bn: int, stages: int, swap: bool = False, b_kind: str = "copy", fault: str = ""):
    """:func:`make_kernel`, compiled once per geometry."""
    return make_kernel(dtype, wgs, bn, stages, swap, b_kind, fault)


def make_kernel(
    dtype: str,
    wgs: int,
    bn: int,
    stages: int,
    swap: bool = False,
    b_kind: str = "copy",
    fault: str = "",
    stage_b=None,
    fold=None,
):
    """``kernel(y, a32, b32, bsc, rs, cs, ts)`` (the signature of
    ``wgmma_gemm``'s kernels), launched by :func:`make_launch`. With
    ``b_kind`` other than ``copy``, B goes through ``wgmma_gemm``'s stager
    of that kind (a transform on the way in: NVFP4 or int4 weights with
    their scales ``bsc``), writing the same swizzled layout from registers
    while the tensor cores work; A is still copied asynchronously.
    ``fault`` and ``stage_b`` (a stager of one's own) are for the tests
    that plant a bug (:data:`FAULTS`, a wrong block scale).

    ``fold`` is the per-stage hook: ``fold(total, stage, bsc, n, n0, kt)``
    returns the running f32 sums with the stage's accumulators (started
    from zero each stage) folded in, after the stage's MMAs are waited
    for; the epilogue then stores ``total``. The FP8 arm folds with each
    column's group scale (a stage is one scale group), as DeepGEMM
    promotes its FP8 sums to FP32 CUDA-core registers: the tensor cores'
    FP8 accumulator is narrower than FP32."""
    if fault and fault not in FAULTS:
        raise ValueError(f"fault {fault!r}: one of {FAULTS}")
    if b_kind not in P.B_KINDS:
        raise ValueError(f"B kind {b_kind!r}: one of {P.B_KINDS}")
    if P.DTYPE_OF[b_kind] not in (None, dtype):
        raise ValueError(f"B stager {b_kind} stages {P.DTYPE_OF[b_kind]}, not {dtype}")
    if dtype not in ("bf16", "f16", "e4m3"):
        raise ValueError(f"wgmma_async: input type {dtype!r}: bf16, f16 or e4m3")
    wg.check_shape(dtype, bn)
    if bn % 8:
        raise ValueError(f"wgmma_async: BN={bn} is not a multiple of 8 (a swizzle atom's rows)")
    if stages < 2:
        raise ValueError(f"wgmma_async: {stages} stages: at least 2")
    threads = wg.WARPGROUP * wgs
    esize = 1 if dtype == "e4m3" else 2
    bk = STAGE_KBYTES // esize
    a_rows = BM * wgs
    a_tile, b_tile = a_rows * STAGE_KBYTES, bn * STAGE_KBYTES
    stage = a_tile + b_tile
    issue = _make_issue(threads, esize, swizzle=fault != "no_swizzle")
    copy_b = b_kind == "copy"
    if stage_b is None and not copy_b:
        stage_b = P.stager(b_kind, CHUNKS, threads, swizzled=True)
    dropped = 1 if fault == "short_k" else -1  # the second instruction of each stage's K
    per_stage = fold is not None
    if not per_stage:

        @cuda.jit(device=True, inline="always")
        def fold(total, stage, bsc, n, n0, kt):  # never called: the accumulators run over the whole K
            return stage

    t_mul = 1.0 / float(P.E4M3_FOLD) if b_kind == "nvfp4_e4m3" else 1.0
    mma, zeros, store = wg.op(dtype, bn), wg.zeros(bn), P.make_store(bn, swap)
    in_flight = stages - 1 if fault == "no_wait" else stages - 2
    ahead = 1 if fault == "stage_order" else 0  # reads the slot of the stage after kt
    tm = np.float32(t_mul)
    if dtype == "e4m3":

        @cuda.jit(device=True, inline="always")
        def step(da, db, acc):
            return mma(da, db, acc, 1, 1, 1)
    else:

        @cuda.jit(device=True, inline="always")
        def step(da, db, acc):
            return mma(da, db, acc, 1, 1, 1, 0, 0)

    @L.jit_bounded(threads)
    def gemm_async(y, a32, b32, bsc, rs, cs, ts):
        m = a32.shape[0]
        n = b32.shape[0]
        k = a32.shape[1] * 4 // esize
        smem = cuda.shared.array(0, uint32)
        base = wg.smem_addr(smem)
        pad = (sw.ATOM_BYTES - (base & (sw.ATOM_BYTES - 1))) & (sw.ATOM_BYTES - 1)
        tid = cuda.threadIdx.x
        g = tid >> 7  # this thread's warpgroup: rows 64 g .. 64 g + 63 of the A tile
        r0 = cuda.blockIdx.y * a_rows
        n0 = cuda.blockIdx.x * bn
        nk = (k + bk - 1) // bk
        for s in range(stages - 1):  # the prologue: stages 0 .. S - 2
            if s < nk:
                at = pad + s * stage
                issue(smem, at, a32, m, k, r0, s * bk, tid, a_rows)
                if copy_b:
                    issue(smem, at + a_tile, b32, n, k, n0, s * bk, tid, bn)
                else:
                    stage_b(base + at + a_tile, b32, bsc, n, k, n0, s, tid, bn)
            ca.cp_async_commit()
        acc = zeros()
        total = zeros()
        for kt in range(nk):
            ca.cp_async_wait(in_flight)
            wg.fence_proxy_async()
            cuda.syncthreads()
            nxt = kt + stages - 1
            if nxt < nk:
                at = pad + (nxt % stages) * stage
                issue(smem, at, a32, m, k, r0, nxt * bk, tid, a_rows)
                if copy_b:
                    issue(smem, at + a_tile, b32, n, k, n0, nxt * bk, tid, bn)
            ca.cp_async_commit()
            at = base + pad + ((kt + ahead) % stages) * stage
            if per_stage:
                acc = zeros()
            wg.wgmma_fence()
            for j in range(KSUB):
                if j != dropped:
                    da = wg.make_desc(at + g * BM * STAGE_KBYTES + j * STEP, 16, sw.SBO, wg.SWIZZLE_128B)
                    db = wg.make_desc(at + a_tile + j * STEP, 16, sw.SBO, wg.SWIZZLE_128B)
                    acc = step(da, db, acc)
            wg.wgmma_commit_group()
            if not copy_b and nxt < nk:  # B of a later stage through registers while the tensor cores work
                stage_b(base + pad + (nxt % stages) * stage + a_tile, b32, bsc, n, k, n0, nxt, tid, bn)
            acc = wg.wait_acc(0, acc)
            if per_stage:
                total = fold(total, acc, bsc, n, n0, kt)
        ca.cp_async_wait_all()
        if per_stage:
            acc = total
        store(y, m, n, r0 + BM * g, n0, acc, rs, cs, ts[0] * tm)

    gemm_async.geometry = (dtype, wgs, bn, stages, swap)
    gemm_async.per_stage = per_stage
    gemm_async.form = "wgmma"
    gemm_async.async_stages = stages
    return gemm_async


def make_launch(rows_a: int, rows_b: int, k: int, kern):
    """``launch(y, a32, b32, bsc, rs, cs, ts)`` over ``rows_a`` x ``rows_b``
    with the kernel's stages in dynamic shared memory (opted in past 48 KiB
    at the first launch)."""
    why = P.supports(k)
    if why:
        raise ValueError(f"wgmma_async: {why}")
    _dtype, wgs, bn, stages, _swap = kern.geometry
    nbytes = L.check_shared(shared_bytes(wgs, bn, stages), hopper=True)
    grid = L.check_grid((L.blocks_for(rows_b, bn), L.blocks_for(rows_a, BM * wgs)))
    threads = L.check_block(wg.WARPGROUP * wgs, warps=True)
    opted: list = []

    def launch(y, a32, b32, bsc, rs, cs, ts):
        if not opted:
            dynsmem.opt_in(kern, (y, a32, b32, bsc, rs, cs, ts), nbytes)
            opted.append(True)
        kern[grid, threads, 0, nbytes](y, a32, b32, bsc, rs, cs, ts)

    return launch


def unscaled(run, rows_a: int, rows_b: int):
    """``launch(y, a32, b32, bsc)``: ``run`` (a launch of this module's or of
    ``wgmma_gemm``'s) for a GEMM whose epilogue has no scale to apply; its
    ``rs``, ``cs`` and ``ts`` are ones, which multiply exactly."""
    rs, cs, ts = P.ones(rows_a), P.ones(rows_b), P.ones(1)

    def launch(y, a32, b32, bsc):
        run(y, a32, b32, bsc, rs, cs, ts)

    return launch


def kernel_for(tile: dict, stages: int, form: str):
    """A projection variant's kernel: on wgmma this module's, ``stages``
    deep, with the tile's type, warpgroups, BN and B stager; on mma.sync
    ``wgmma_gemm``'s form of ``tile`` (its staging, two stages)."""
    from .. import tc

    if form == tc.WGMMA:
        return kernel(tile["dtype"], tile["wgs"], tile["bn"], stages, tile.get("swap", False), b_kind=tile["b_kind"])
    return P.kernel(*tile.values(), form=form)


def launch_for(rows_a: int, rows_b: int, k: int, kern):
    """The launch of ``kern``: this module's (:func:`make_launch`) or, for a
    kernel of ``wgmma_gemm`` (its mma.sync form, a test's broken variant),
    that module's."""
    if getattr(kern, "async_stages", None):
        return make_launch(rows_a, rows_b, k, kern)
    return P.make_launch(rows_a, rows_b, k, kern)


def token_tile_build(name: str, tile: dict):
    """``build(shape, kern=None)`` of an FP8 projection variant whose tokens
    sit on wgmma's N side (``y^T = W x^T``, ``tile["swap"]``): the m16 and
    m32 tilings differ only in ``tile`` (:func:`kernel`'s arguments)."""

    def build(shape, kern=None):
        P.require_wgmma(name)
        m, n, k = shape["m"], shape["n"], shape["k"]
        run = make_launch(n, m, k, kern or kernel(**tile))
        ts = P.ones(1)

        def launch(bufs):
            run(
                bufs["y"],
                bufs["w8"].view(np.uint32),
                bufs["x8"].view(np.uint32),
                bufs["w_scale"],
                bufs["w_scale"],
                bufs["x_scale"],
                ts,
            )

        launch.tensor_cores, launch.tc_dtype = "wgmma", "e4m3"
        return launch

    return build
