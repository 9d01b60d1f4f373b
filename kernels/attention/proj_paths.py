"""Declarations of the attention projection paths (``proj_spec`` has their
shapes, inputs, references and traffic; the variants are one file each):

========================  ==================  ============  ===================================
path                      lever (default)     variants      chosen when
========================  ==================  ============  ===================================
proj_bf16_tc (Atlas)      bf16_tc_proj (off)  bf16_tc       on
                                              fp8_e4m3      off: activations crushed to E4M3
proj_bf16_tc_w4a16        bf16_tc_proj (off)  bf16_n128     on
(Metrale)                                     w4a16_f16     off: the default projection GEMM
proj_fp8 (Metrale)        fp8_attn_m32 (off)  m32           on and more than 16 rows
                                              m16           otherwise
========================  ==================  ============  ===================================

The "chosen when" column is ``leverctl_kernels.selection``'s tables. The
engines' ``bf16_tc_proj`` levers share a name and steer different
projections (Atlas's NVFP4 weights, Metrale's int4 W4A16), hence two
paths. Every variant is checked against the float64 product of the
unquantised activations and the weights as stored, with its own tolerance,
so its record's error is the perturbation its arithmetic adds: the FP8
crush for ``fp8_e4m3``, the weights' rounding to BF16 for ``bf16_n128``
and to fp16 for ``w4a16_f16``, fp32 accumulation for all.

Tensor cores: on Hopper (and in the simulator) every kernel runs on wgmma
(sm_90a: bf16 m64n128k16, e4m3 m64nNk32). Elsewhere the BF16 variants run
mma.sync m16n8k16 bf16 on the same staged tiles, ``w4a16_f16`` the W4A16
GEMM's mma.sync f16 kernel, and the FP8 variants' builds refuse, saying
that FP8 tensor cores are wgmma's (there is no kernel of them for FP16).
"""
from __future__ import annotations

from ..common.path import KernelPath, Tolerance, Variant
from ..selection import ATTENTION_PROJ_BF16_TC, ATTENTION_PROJ_BF16_TC_W4A16, ATTENTION_PROJ_FP8
from ..w4a16 import gemm_tc
from . import (proj_bf16_n128, proj_bf16_tc, proj_fp8_e4m3, proj_fp8_m16, proj_fp8_m32, proj_spec,
               proj_w4a16_f16)

# Measured at the smoke and model shapes (tests/kernels/test_attention_proj.py
# prints them): bf16_tc ~1e-7 (fp32 accumulation only); fp8_e4m3 ~3e-2 rel
# (the activations' E4M3 crush, ~2^-4 per value, and the weights' E4M3
# rounding); bf16_n128 ~2e-3 (weights rounded to BF16); w4a16_f16 ~3e-4
# (fp16 weights and output), each also at 512 x 5120 x 2048 (a float64
# emulation of the roundings); the FP8 GEMMs ~1e-7 on exact inputs in the
# simulator. Their bound leaves room for Hopper's FP8 wgmma, whose
# accumulation keeps fewer bits than fp32 (errors near 1e-3 of a K = 4096
# sum have been reported); one wrong channel scale still moves the error
# past it by far.
TOL_BF16_TC = Tolerance(rel=1e-5, abs_of_max=1e-5)
TOL_FP8_CRUSH = Tolerance(rel=8e-2, abs_of_max=8e-2)
TOL_BF16_W4 = Tolerance(rel=8e-3, abs_of_max=8e-3)
TOL_F16_W4 = Tolerance(rel=2e-3, abs_of_max=2e-3)
TOL_FP8_GEMM = Tolerance(rel=5e-3, abs_of_max=1e-2)


def _v(mod, tol, traffic=None, launches=1, tc=("wgmma", None)) -> Variant:
    return Variant(mod.NAME, mod.SUMMARY, mod.build, tolerance=tol, traffic=traffic, launches=launches,
                   tensor_cores=tc[0], tc_dtype=tc[1])



# The form the BF16 variants build on in this process (wgmma on Hopper and in
# the simulator, mma.sync elsewhere; None where neither a GPU nor the
# simulator is present); each launch says what it ran on.
_FORM = gemm_tc.declared_form()

PROJ_BF16_TC = KernelPath(
    name=ATTENTION_PROJ_BF16_TC.path,
    family="attention",
    summary=ATTENTION_PROJ_BF16_TC.summary,
    levers=ATTENTION_PROJ_BF16_TC.levers,
    lever_defaults={"bf16_tc_proj": False},
    variants={v.name: v for v in (
        _v(proj_bf16_tc, TOL_BF16_TC, tc=(_FORM, "bf16" if _FORM else None)),
        _v(proj_fp8_e4m3, TOL_FP8_CRUSH, proj_spec.fp8_crush_traffic, proj_fp8_e4m3.LAUNCHES,
           tc=("wgmma", "e4m3")),
    )},
    select=ATTENTION_PROJ_BF16_TC.select,
    shapes=proj_spec.prefill_shapes,
    make_inputs=proj_spec.nvfp4_inputs,
    outputs=proj_spec.outputs_f32,
    reference=proj_spec.nvfp4_reference,
    traffic=proj_spec.nvfp4_traffic,
    tolerance=TOL_BF16_TC,
    engines=ATTENTION_PROJ_BF16_TC.engines,
    notes="Tensor-core-bound at prefill. The error fields carry the FP8 crush the lever removes.",
    extra={"model_sections": ("attention",), "gemm_mnk": lambda s: (s["m"], s["n"], s["k"])},
)

_W4_FORM = _FORM

PROJ_BF16_TC_W4A16 = KernelPath(
    name=ATTENTION_PROJ_BF16_TC_W4A16.path,
    family="attention",
    summary=ATTENTION_PROJ_BF16_TC_W4A16.summary,
    levers=ATTENTION_PROJ_BF16_TC_W4A16.levers,
    lever_defaults={"bf16_tc_proj": False},
    variants={v.name: v for v in (
        _v(proj_bf16_n128, TOL_BF16_W4, tc=(_FORM, "bf16" if _FORM else None)),
        _v(proj_w4a16_f16, TOL_F16_W4, proj_spec.w4_f16_traffic, proj_w4a16_f16.LAUNCHES,
           tc=(_W4_FORM, gemm_tc.TC_DTYPE if _W4_FORM else None)),
    )},
    select=ATTENTION_PROJ_BF16_TC_W4A16.select,
    shapes=proj_spec.prefill_shapes,
    make_inputs=proj_spec.w4_inputs,
    outputs=proj_spec.outputs_f16,
    reference=proj_spec.w4_reference,
    traffic=proj_spec.w4_traffic,
    tolerance=TOL_BF16_W4,
    engines=ATTENTION_PROJ_BF16_TC_W4A16.engines,
    notes="Tensor-core-bound at prefill; the error fields carry each path's weight rounding.",
    extra={"model_sections": ("attention",), "gemm_mnk": lambda s: (s["m"], s["n"], s["k"])},
)

PROJ_FP8 = KernelPath(
    name=ATTENTION_PROJ_FP8.path,
    family="attention",
    summary=ATTENTION_PROJ_FP8.summary,
    levers=ATTENTION_PROJ_FP8.levers,
    lever_defaults={"fp8_attn_m32": False},
    variants={v.name: v for v in (
        _v(proj_fp8_m16, TOL_FP8_GEMM, tc=("wgmma", "e4m3")),
        _v(proj_fp8_m32, TOL_FP8_GEMM, tc=("wgmma", "e4m3")),
    )},
    select=ATTENTION_PROJ_FP8.select,
    shapes=proj_spec.fp8_shapes,
    make_inputs=proj_spec.fp8_inputs,
    outputs=proj_spec.outputs_f32,
    reference=proj_spec.fp8_reference,
    traffic=proj_spec.fp8_traffic,
    tolerance=TOL_FP8_GEMM,
    engines=ATTENTION_PROJ_FP8.engines,
    notes="Weight-stream-bound at small batches.",
    extra={"model_sections": ("attention",), "gemm_mnk": lambda s: (s["m"], s["n"], s["k"])},
)

PATHS = (PROJ_BF16_TC, PROJ_BF16_TC_W4A16, PROJ_FP8)
