"""Mamba2 (Nemotron-H's SSM layers) kernel paths, Metrale.

===================  =========================  ===========  ============================================
path                 levers (default)           variants     chosen when
===================  =========================  ===========  ============================================
mamba2.prefill_scan  ssd (on),                  ssd          ssd on and the state size fits the SSD
                     ssm_persistent (on)                     kernels' shared memory (N <= 167)
                                                persistent   else ssm_persistent on
                                                sequential   otherwise
mamba2.prefill_proj  ssm_w4a4 (on)              w4a4         lever on, >= 512 rows, the W4A4 kernels
                                                             loaded, the fp8_act buffer large enough
                                                w4a16        otherwise (the default projection GEMM)
===================  =========================  ===========  ============================================

The "chosen when" column is ``leverctl_kernels.selection``'s decision
tables (``MAMBA2_PREFILL_SCAN``, ``MAMBA2_PREFILL_PROJ``). The recurrence
and its three float64 forms are in ``naive``; shapes, inputs and traffic
in ``spec``.

The scan is the layer's selective-state recurrence alone (after the
in-projection and the causal conv, before the gated RMSNorm and the
out-projection). The projections reuse the dense-FFN prefill arms' GEMMs:
``ffn_prefill.w4a4`` (NVFP4 weights, activations quantised to NVFP4 per
GEMM) and, for the engine's default projection GEMM, which its lever file
does not name, the W4A16 GEMM (``w4a16.gemm``'s default tiles): leverctl's
choice.
"""
from __future__ import annotations

import numpy as np

from ..common import int4
from ..common.path import Tolerance, Traffic, Variant, declared_path
from ..ffn_prefill import TOLERANCES as FFN_TOLERANCES
from ..ffn_prefill import activations, formats, w4a4, w4a16_default, weights
from ..ffn_prefill.naive import naive_gemm
from ..selection import MAMBA2_PREFILL_PROJ, MAMBA2_PREFILL_SCAN, check_declaration
from . import persistent, sequential, spec, ssd

# fp32 scans against a float64 reference on the same fp16 inputs. Correct
# fp32 arithmetic stays near 1e-6 of each output's largest magnitude (the
# chunked form reassociates the sums, which costs nothing measurable);
# the bound is 1e-4 of it per element. A decay off by a factor in its
# exponent, or a chunk's state not carried into the next, is orders of
# magnitude over it.
SCAN_TOL = Tolerance(rel=1e-3, abs_of_max=1e-4)


def _variant(mod, traffic=None) -> Variant:
    return Variant(mod.NAME, mod.SUMMARY, mod.build, traffic=traffic, launches=getattr(mod, "LAUNCHES", 1))


PREFILL_SCAN = declared_path(
    MAMBA2_PREFILL_SCAN, "mamba2",
    {v.name: v for v in (_variant(ssd, spec.ssd_traffic), _variant(persistent),
                         _variant(sequential, spec.sequential_traffic))},
    shapes=spec.scan_shapes,
    make_inputs=spec.scan_inputs,
    outputs=spec.scan_outputs,
    reference=spec.scan_reference,
    traffic=spec.scan_traffic,
    tolerance=SCAN_TOL,
    notes="persistent moves the state once and is bound by its sequential token walk; ssd spreads the "
          "prompt over chunks x heads blocks at the cost of the chunk states' round trips; sequential "
          "round-trips each state row through global memory every token. All on FP32 CUDA cores.",
    extra={"model_sections": ("mamba2",)},
)


# ── prefill projections ─────────────────────────────────────────────────────


def proj_inputs(shape, rng: np.random.Generator) -> dict:
    """``a`` fp16 activations (outlier channels), the model's weights ``w``
    as the W4A16 GEMM stores them (float32, exact), and ``w`` in NVFP4."""
    m, n, k = shape["m"], shape["n"], shape["k"]
    w4 = formats.w4a16(weights(rng, n, k))
    w = int4.dequantize_w4(w4["qweight"], w4["scales"])
    return {"a": activations(rng, m, k), "w": w, **w4, **formats.nvfp4(w)}


def proj_reference(shape, inputs: dict) -> dict:
    return {"c": naive_gemm(inputs["a"], inputs["w"])}


def _proj_traffic(weight_bytes, scratch_per_row=lambda k: 0):
    def traffic(shape) -> Traffic:
        m, n, k = shape["m"], shape["n"], shape["k"]
        extra = m * scratch_per_row(k)
        return Traffic(bytes_read=weight_bytes(n, k) + 2 * m * k + extra, bytes_written=2 * m * n + extra,
                       flops=2 * m * n * k)

    return traffic


PREFILL_PROJ = declared_path(
    MAMBA2_PREFILL_PROJ, "mamba2",
    {
        "w4a4": Variant("w4a4", "ffn_prefill's W4A4 GEMM: activations to NVFP4 per GEMM, NVFP4 weights, both "
                        "decoded exactly to bf16 while staged, wgmma m64n128k16", w4a4.build,
                        tolerance=FFN_TOLERANCES["w4a4"],
                        traffic=_proj_traffic(formats.nvfp4_bytes, lambda k: k // 2 + k // 16 + 4), launches=3,
                        tensor_cores="wgmma", tc_dtype="bf16"),
        "w4a16": Variant("w4a16", "the default projection GEMM, here the W4A16 GEMM (w4a16.gemm's default tiles)",
                         w4a16_default.build, tolerance=FFN_TOLERANCES["w4a16"],
                         traffic=_proj_traffic(formats.w4a16_bytes)),
    },
    shapes=spec.proj_shapes,
    make_inputs=proj_inputs,
    outputs=lambda shape: {"c": ((shape["m"], shape["n"]), "float16")},
    reference=proj_reference,
    traffic=_proj_traffic(formats.w4a16_bytes),
    tolerance=FFN_TOLERANCES["w4a16"],
    notes="compute-bound at prefill sizes (512 and 4096 tokens); W4A4 trades activation precision "
          "(NVFP4, ~10 % error against the unquantised product) for FP4 weights' bytes",
    extra={"gemm_mnk": lambda s: (s["m"], s["n"], s["k"]), "model_sections": ("mamba2",)},
)

PATHS = (PREFILL_SCAN, PREFILL_PROJ)

for _declared in PATHS:
    check_declaration(_declared)
