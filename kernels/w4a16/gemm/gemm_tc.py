"""The tensor-core W4A16 GEMMs the ``w4a16.gemm`` variants build through:
one entry per variant, and the tensor-core form decided once for the
process (``common/tc.py``).

* ``build_small_m(shape, form=None)``: the ``small_m`` variant (m <= 64);
* ``build_default(shape, form=None)``: the ``default_tiles`` variant.

``form`` defaults to :func:`tc.current` ("wgmma" on compute capability
9.x and in the simulator, "mma.sync" otherwise); tests pass it explicitly
to run both forms anywhere. "mma.sync" builds ``gemm_mma.py``'s kernels;
"wgmma" builds ``gemm_wgmma.py``'s where its ``supports(m, n, k)`` accepts
the shape, and the mma.sync kernel where it does not (the launch then says
``mma.sync``, and ``launch.fallback`` says why). Both need ``k % 16 ==
0``: the decision table sends other shapes to the FP32-FMA ``fma_tiles``
variant (``selection.w4a16.GEMM``), and a build asked for one anyway
raises ``ValueError``.

Every launch returned carries what it runs on, for the record:
``launch.tensor_cores`` ("mma.sync" or "wgmma") and ``launch.tc_dtype``
("f16": the activations are fp16, so the MMA inputs are).
"""

from __future__ import annotations

from ...common import tc
from . import gemm_mma

TC_DTYPE = "f16"
KINDS = ("small_m", "default")


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


def _mark(run, form: str, fallback: str = ""):
    def launch(bufs):
        run(bufs)

    launch.tensor_cores = form
    launch.tc_dtype = TC_DTYPE
    launch.fallback = fallback
    return launch


def _mma_sync(kind: str, shape):
    m, n, k = shape["m"], shape["n"], shape["k"]
    make = gemm_mma.small_m_launch if kind == "small_m" else gemm_mma.tiles_launch
    run = make(m, n, k)  # raises ValueError unless k % 16 == 0
    return lambda bufs: run(bufs["c"], bufs["a"], bufs["qweight"], bufs["scales"])


def build(kind: str, shape, form: str | None = None):
    """The launch for variant ``kind`` ("small_m" or "default") at ``shape``
    on tensor-core form ``form`` (default :func:`tc.current`)."""
    if kind not in KINDS:
        raise ValueError(f"gemm_tc: kind {kind!r}, one of {KINDS}")
    form = tc.check_form(form or tc.current())
    why_not_wgmma = ""
    if form == tc.WGMMA:
        from . import gemm_wgmma

        why_not_wgmma = gemm_wgmma.supports(shape["m"], shape["n"], shape["k"])
        if not why_not_wgmma:
            return _mark(getattr(gemm_wgmma, f"build_{kind}")(shape), tc.WGMMA)
    return _mark(
        _mma_sync(kind, shape), tc.MMA_SYNC, f"wgmma: {why_not_wgmma}; mma.sync instead" if why_not_wgmma else ""
    )


def build_small_m(shape, form: str | None = None):
    return build("small_m", shape, form)


def build_default(shape, form: str | None = None):
    return build("default", shape, form)


# The forms these builds can run on (the SASS claim tests cover each).
build_small_m.forms = build_default.forms = tc.FORMS
