"""The W4A16 tensor-core GEMM of the ``w4a16.gemm`` variants ``small_m``
and ``default_tiles``: ``c[m, n] = a[m, k] @ W[n, k].T`` on the project's
pipelined mainloop (``common/gemm/pipeline.py``), in either tensor-core
form (``common/tc.py``): ``wgmma`` (``common/gemm/wgmma_async.py``, Hopper
and the simulator's default) or ``mma.sync`` (``common/gemm/mma_sync.py``,
sm_80 and later without wgmma). One kernel builder, one tile table, both
forms.

* ``build(kind, shape, form=None)``: the launch of variant ``kind``
  ("small_m" or "default") at ``shape``; ``build_small_m`` and
  ``build_default`` are its two entries (the variants' ``build``).

``a`` fp16 ``[m, k]``, ``W`` packed as in ``leverctl_kernels.common.int4``
(``qweight uint32[n, k/8]``, ``scales fp16[n, k/128]``), ``c`` fp16
``[m, n]``; ``k % 16 == 0`` (:func:`supports`), m and n free. The
activations are fp16 in this project's W4A16 layout, so the MMA is the
f16 form (inputs fp16, accumulators f32) on both.

Tiling: one block per 64 x ``BN`` tile of ``c`` (:data:`TILE_N`: ``BN`` =
64 for ``small_m``, where m is small and the weight stream is the cost, so
narrow tiles give more blocks along N; 128 for ``default_tiles``, where
each staged A tile then feeds twice the columns), ``blockIdx.x`` along N,
``blockIdx.y`` along M; two warpgroups (256 threads) a block, one on each
column half of the tile (``common/gemm/pipeline.py``'s geometry), both
staging every stage: each thread dequantises half the weights one
warpgroup would and holds half its accumulators. K goes by in
stages of 64 (128 bytes of fp16: one 128-byte swizzle atom wide), several
in dynamic shared memory::

    A (activations): TMA on wgmma (a stage's tile in one copy), cp.async
                     16 bytes a thread-chunk on mma.sync, into the swizzled
                     stage, STAGES - 1 stages ahead, zero-filled past m and k
    B (weights):     the int4 stager (``wgmma_gemm.stager("int4_f16")``)
                     along K: a lane's 16-byte load is 32 values of one row
                     (four staged chunks; a row's stage is two lanes), its
                     group scales loaded eight groups at a time by the
                     row's pair of lanes and passed by a shuffle; ``(q -
                     8) x scale`` exact in f32, rounded once to fp16 in
                     pairs (``cvt.rn.f16x2.f32``), stored ``st.shared.v4``
                     at the swizzled offset -- for a later stage, while
                     the tensor cores work on this one

and each stage is read by the form's instructions:

    form       stages  shared (BN 64 / 128)  per stage of 64 k
    wgmma      4       65 / 97 KiB           a warpgroup: 4 x wgmma m64n(BN/2)k16
                                             through mode-1 (128-byte swizzle)
                                             descriptors, the accumulators tied
                                             to the wait
    mma.sync   3       49 / 73 KiB           per warp (16 of the 64 rows, its
                                             warpgroup's BN/2 columns) and k16:
                                             1 ldmatrix.x4 of A, BN/32 of B,
                                             BN/16 mma.sync m16n8k16

(a stage is ``(64 + BN) x 128`` bytes, and 1 KiB aligns the first; the
mma.sync form stays within the 99 KiB sm_86 and sm_89 let a block opt in
to, ``mma_sync.MAX_SHARED``). Each form keeps ``BN / 4`` f32 accumulators
a thread (16 or 32) in wgmma's layout, and the epilogue rounds each once
to fp16 (its scales are ones: multiplying by 1.0 is exact). On sm_86 and
sm_89, 100 KiB of shared memory an SM, the stages allow two BN 64 blocks
or one BN 128 block an SM. On wgmma the kernels carry a launch bound of
the blocks the stages' shared memory lets reside (three at BN 64, two at
128: :data:`MIN_BLOCKS`), so the registers do not hold fewer. Scale groups
are 128 wide and stages 64, so a word never straddles a group. The
dequantisation is the only rounding the FMA GEMM (``gemm_tiled``) does
not have: <= 2^-11 relative per weight.

``form`` defaults to :func:`tc.current` ("wgmma" on compute capability
9.x and in the simulator, "mma.sync" otherwise); tests pass it to run both
anywhere. Both forms take the same shapes (``k % 16 == 0``), so neither
falls back to the other: the decision table sends other k to the
FP32-FMA ``fma_tiles`` variant (``selection.w4a16.GEMM``), and a build
asked for one anyway raises ``ValueError``.

Every launch returned carries what it runs on, for the record:
``launch.tensor_cores`` ("mma.sync" or "wgmma"), ``launch.tc_dtype``
("f16": the activations are fp16, so the MMA inputs are) and
``launch.fallback`` (empty: the form asked for is the form that runs).
"""

from __future__ import annotations

import numpy as np

from ...common import tc
from ...common import wgmma as wg
from ...common import wgmma_gemm as P
from ...common.gemm import mma_sync as MS
from ...common.gemm import wgmma_async as G

TC_DTYPE = "f16"
KINDS = ("small_m", "default")
WGS = WN = 2  # warpgroups a block, both along the tile's columns (``common/gemm/pipeline.py``)
THREADS = wg.WARPGROUP * WGS
TILE_N = {"small_m": 64, "default": 128}  # BN of each variant, on either form
STAGES = {tc.WGMMA: 4, tc.MMA_SYNC: MS.STAGES}


# Resident blocks an SM the stages' shared memory allows on wgmma (65 KiB at
# BN 64: three; 97 KiB at 128: two), the launch bound the registers are held to.
MIN_BLOCKS = {64: 3, 128: 2}


def _tile(bn: int) -> dict:
    return dict(dtype="f16", wgs=WGS, bn=bn, b_kind="int4_f16", wn=WN, min_blocks=MIN_BLOCKS.get(bn, 1))


def shared_bytes(bn: int, form: str) -> int:
    """Dynamic shared memory of a block on ``form``: its stages of A and B,
    and 1 KiB to align them."""
    return G.shared_bytes(WGS, bn, STAGES[tc.check_form(form)], G.tile_rows(WGS, WN))


def kernel(bn: int, form: str):
    """The mainloop's kernel for 64 x ``bn`` tiles on ``form`` (``c``,
    ``a`` as uint32, ``qweight`` and ``scales`` in its ``y, a32, b32,
    bsc``; its epilogue scales ones), compiled once per geometry by the
    mainloop's cache."""
    return G.kernel_for(_tile(bn), STAGES[tc.WGMMA], form)


def make_kernel(bn: int, form: str, group_shift: int = 7, fault: str = ""):
    """:func:`kernel`, uncached, with ``group_shift`` (a wrong scale group:
    the stager takes ``k >> group_shift``) and ``fault`` (one of
    ``pipeline.FAULTS``): for the tests' broken variants."""
    stage_b = P.stager("int4_f16", THREADS, group_shift=group_shift)
    make = G.make_kernel if tc.check_form(form) == tc.WGMMA else MS.make_kernel
    return make("f16", WGS, bn, STAGES[form], b_kind="int4_f16", fault=fault, stage_b=stage_b, wn=WN)


def supports(m: int, n: int, k: int) -> str:
    """Empty when the kernels (either form) can run ``m x n x k``, else why not."""
    if k <= 0 or k % wg.K_BF16:
        return f"k={k} is not a positive multiple of {wg.K_BF16} (16-byte rows of fp16 and of packed weights)"
    return ""


def make_launch(m: int, n: int, k: int, kern):
    """``launch(c, a, qweight, scales)`` running ``kern`` (:func:`kernel`'s
    or :func:`make_kernel`'s); ``a`` fp16, passed as uint32 pairs."""
    why = supports(m, n, k)
    if why:
        raise ValueError(f"gemm_tc: {why}")
    run = G.unscaled(G.make_launch(m, n, k, kern), m, n)

    def launch(c, a, qweight, scales):
        run(c, a.view(np.uint32), qweight, scales)

    return launch


def declared_form() -> str | None:
    """The form a variant declares (``Variant.tensor_cores``, what
    ``leverctl kernels`` shows): :func:`tc.current`, or None in a process
    with neither the simulator nor a GPU (the sm_90 compile process, which
    only imports the declarations); the launch's own attribute is what a
    record takes."""
    from numba import config, cuda

    if config.ENABLE_CUDASIM or cuda.is_available():
        return tc.current()
    return None


def build(kind: str, shape, form: str | None = None):
    """The launch for variant ``kind`` ("small_m" or "default") at ``shape``
    on tensor-core form ``form`` (default :func:`tc.current`)."""
    if kind not in KINDS:
        raise ValueError(f"gemm_tc: kind {kind!r}, one of {KINDS}")
    form = tc.check_form(form or tc.current())
    kern = kernel(TILE_N[kind], form)
    run = make_launch(shape["m"], shape["n"], shape["k"], kern)  # raises ValueError unless k % 16 == 0

    def launch(bufs):
        run(bufs["c"], bufs["a"], bufs["qweight"], bufs["scales"])

    launch.tensor_cores = kern.form
    launch.tc_dtype = TC_DTYPE
    launch.fallback = ""
    return launch


def build_small_m(shape, form: str | None = None):
    """64 x 64 tiles: more blocks along N where m is small."""
    return build("small_m", shape, form)


def build_default(shape, form: str | None = None):
    """64 x 128 tiles: each staged A tile feeds twice the columns."""
    return build("default", shape, form)


# The forms these builds can run on (the SASS claim tests cover each).
build_small_m.forms = build_default.forms = tc.FORMS
