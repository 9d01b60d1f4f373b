"""The declaration of ``attention.rotation`` (Metrale's ``weight_pre_rotated``).

======================  =========================  ================  ================================
path                    lever (default)            variants          chosen when
======================  =========================  ================  ================================
attention.rotation      weight_pre_rotated (off)   pre_rotated       on and head dim 128
                                                   runtime_rotation  otherwise (a note says why when
                                                                     the lever is on)
======================  =========================  ================  ================================

Both variants give the attention its rotated q, k and v and write the same
FP8 E4M3 K and V cache, up to rounding: ``pre_rotated`` projects on
weights rotated at load and stored as bf16, whose rounding moves q by about
1e-3 of its scale and flips an occasional E4M3 code by one step;
``runtime_rotation`` rotates the fp32 projection. The engine's lever does
not name its rotation; these kernels use the orthonormal Walsh-Hadamard
transform (``_rotation``). Every record's ``findings`` give the FP8
quantisation error of the cached K and V with the rotation and without it
(``rotation_spec.quant_error``): the inputs carry outlier channels, which
the rotation spreads over the head.

What the finding shows at these inputs: the rotated cache's relative error
is the larger (about 2.8 % against 1-2 % at the smoke shape). E4M3 is a
floating-point format, so a quiet channel beside a loud one keeps the same
relative step, and with one scale per vector the loudest channel maps to
448 exactly; after the rotation every element sits mid-range with a full
rounding error. The rotation pays off for formats with uniform steps
(integer caches), which these kernels do not write.
"""
from __future__ import annotations

from ..common.path import KernelPath, Tolerance, Variant
from ..selection import ATTENTION_ROTATION as TABLE, check_declaration
from . import rotate_preloaded, rotate_runtime, rotation_spec as spec

# runtime_rotation: fp32 against float64 on the same bf16 inputs; an E4M3
# code flips only where a value sits within ~1e-6 of a rounding boundary.
# The bound per element is one E4M3 step at the top of the range (32 of
# 448); a missing butterfly or a wrong scale moves the caches by tens of
# percent.
RUNTIME_TOL = Tolerance(rel=1e-3, abs_of_max=0.075)
# pre_rotated: the bf16 rounding of W' (relative 2^-9 per weight) moves each
# projection by ~1e-3 of its scale, so a few per cent of the E4M3 codes land
# one step away (~6 % of their value): ~1e-2 in norm.
PRE_ROTATED_TOL = Tolerance(rel=3e-2, abs_of_max=0.075)

ROTATION = KernelPath(
    name=TABLE.path,
    family="attention",
    summary=TABLE.summary,
    levers=TABLE.levers,
    lever_defaults={"weight_pre_rotated": False},
    variants={v.name: v for v in (
        Variant(rotate_preloaded.NAME, rotate_preloaded.SUMMARY, rotate_preloaded.build,
                tolerance=PRE_ROTATED_TOL, launches=2),
        Variant(rotate_runtime.NAME, rotate_runtime.SUMMARY, rotate_runtime.build,
                tolerance=RUNTIME_TOL, traffic=spec.runtime_traffic, launches=2),
    )},
    select=TABLE.select,
    shapes=spec.shapes,
    make_inputs=spec.make_inputs,
    outputs=spec.outputs,
    reference=spec.reference,
    traffic=spec.traffic,
    tolerance=RUNTIME_TOL,
    engines=TABLE.engines,
    notes="Projection-bound; the lever removes the Hadamard from the KV-cache write.",
    extra={"model_sections": ("attention",), "decode": spec.DECODE, "findings": spec.quant_error},
)

check_declaration(ROTATION)
