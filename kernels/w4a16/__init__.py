"""W4A16 kernel paths: int4 weights (8 per uint32, fp16 group-128 scales),
fp16 activations, fp32 accumulation, fp16 outputs.

Paths (``PATHS``):

==================  ==========================================  =============================
path                levers                                      variants
==================  ==========================================  =============================
w4a16.gemv          gemv_sw                                     gemv_sw, gemv_64t
w4a16.gemv_dual     gemv_sw                                     gemv_dual_sw, gemv_dual_64t
w4a16.ffn_decode    decode_ffn_via_gemm, decode_split_silu,     gemv_sw+fused, gemv_64t+fused,
                    gemv_sw                                     gemv_sw+split, gemv_64t+split,
                                                                gemm_m1
w4a16.gemm          ffn_small_m                                 small_m, default_tiles (tensor
                                                                cores), fma_tiles (k % 16 != 0)
==================  ==========================================  =============================

Weight layout: ``leverctl_kernels.common.int4``. Every output is fp16 (the
engines' activation type); the intermediates of the FFN decode (``gate``,
``up`` and, on the split and GEMM paths, ``silu(gate) * up``) are fp16 too.
References (``naive``) are float64 from the exactly dequantized weights.
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from ..common.int4 import packed_bytes, random_w4
from ..common.path import KernelPath, Shape, Tolerance, Traffic, Variant, declared_path, check_preset
from ..selection import W4A16_FFN_DECODE, W4A16_GEMM, W4A16_GEMV, W4A16_GEMV_DUAL, Table, check_declaration
from . import (
    gemm_tc,
    gemm_tiled,
    gemv_64t,
    gemv_dual_64t,
    gemv_dual_sw,
    gemv_sw,
    naive,
    silu_mul,
)
from .ffn_decode import build_ffn_variant, ffn_variant_traffic

# fp16 outputs of fp32 sums: rounding is <= 2^-11 relative per element
# (~3e-4 in norm); 2e-3 leaves room for the fp16 intermediates of the FFN.
# The absolute bound follows each output's scale: no element may be off by
# more than 2e-3 of the output's largest magnitude. Correct arithmetic (fp32
# sums, fp16 outputs and intermediates) stays under 5e-4 of it at the model
# shapes (the FFN's intermediates are the largest part); a dropped scale
# group of one row, or one row 10 % off, is far over it at any shape.
TOLERANCE = Tolerance(rel=2e-3, abs_of_max=2e-3)

# Qwen3-Next-80B-A3B: the `model` preset when the recipe has no [model] sizes.
DEFAULT_MODEL: Mapping[str, Any] = {
    "name": "Qwen3-Next-80B-A3B",
    "hidden": 2048,
    "moe": {"expert_intermediate": 512, "shared_intermediate": 512},
    "bench": {"gemm_rows": [16, 64, 256, 1024, 4096]},
}
DEFAULT_GEMM_ROWS = (16, 64, 256, 1024, 4096)

# Which variant each path takes is ``leverctl_kernels.selection``'s decision
# table for it (``select`` runs it; ``leverctl explain`` words it).


# ── sizes ────────────────────────────────────────────────────────────────────


def _ffn_sizes(model: Mapping[str, Any] | None) -> tuple[int, list[tuple[str, int]], list[int]]:
    """(hidden, [(tag, intermediate)], gemm_rows) from a recipe's [model]
    table, or Qwen3-Next-80B-A3B's when it has no usable FFN sizes.
    FFNs of equal intermediate size share one entry (tags joined by '/')."""
    model = model or {}
    hidden = model.get("hidden")
    found: list[tuple[str, int]] = []
    ffn = model.get("ffn") or {}
    if ffn.get("intermediate"):
        found.append(("ffn", int(ffn["intermediate"])))
    moe = model.get("moe") or {}
    if moe.get("expert_intermediate"):
        found.append(("expert", int(moe["expert_intermediate"])))
    if moe.get("shared_intermediate"):
        found.append(("shared", int(moe["shared_intermediate"])))
    if not hidden or not found:
        return _ffn_sizes(DEFAULT_MODEL)  # which has both
    merged: dict[int, list[str]] = {}
    for tag, inter in found:
        merged.setdefault(inter, []).append(tag)
    ffns = [("/".join(tags), inter) for inter, tags in merged.items()]
    rows = (model.get("bench") or {}).get("gemm_rows") or DEFAULT_GEMM_ROWS
    return int(hidden), ffns, [int(r) for r in rows]



def _mk(label: str, **dims: int) -> Shape:
    return Shape(label, dims)


def _fp16_normal(rng: np.random.Generator, shape) -> np.ndarray:
    return rng.standard_normal(shape, dtype=np.float32).astype(np.float16)


def _w4(rng: np.random.Generator, n: int, k: int, qname: str, sname: str) -> dict:
    """One packed ``n x k`` weight as ``{qname: qweight, sname: scales}``."""
    qweight, scales = random_w4(rng, n, k)
    return {qname: qweight, sname: scales}


def _args(inputs: dict, *names: str) -> list:
    return [inputs[n] for n in names]


def _path(table: Table, variants: list[Variant], **fields) -> KernelPath:
    """The path ``table`` decides, with the family's tolerance; ``variants``
    in the order the bench lists them."""
    if tuple(v.name for v in variants) != table.variants:
        raise ValueError(f"{table.path}: variants {[v.name for v in variants]} are not the table's {table.variants}")
    return declared_path(table, "w4a16", {v.name: v for v in variants}, tolerance=TOLERANCE, **fields)


# ── w4a16.gemv and w4a16.gemv_dual (decode, m = 1) ──────────────────────────

# 37 rows: not a multiple of the row blocks; k = 264: two full scale groups
# and a partial third of 8 inputs.
_SMOKE_GEMV = dict(m=1, n=37, k=264)


def _gemv_traffic(mats: int):
    """Traffic of ``mats`` GEMVs of one ``n x k`` shape against one ``x``."""

    def traffic(shape: Shape) -> Traffic:
        n, k = shape["n"], shape["k"]
        return Traffic(bytes_read=mats * packed_bytes(n, k) + 2 * k, bytes_written=2 * mats * n,
                       flops=2 * mats * n * k)

    return traffic


def gemv_shapes(preset: str, model: Mapping[str, Any] | None) -> list[Shape]:
    check_preset(preset)
    if preset == "smoke":
        return [_mk("m1-n37-k264", **_SMOKE_GEMV)]
    hidden, ffns, _ = _ffn_sizes(model)
    out = []
    for tag, inter in ffns:
        out.append(_mk(f"{tag}-gate n{inter} k{hidden}", m=1, n=inter, k=hidden))
        out.append(_mk(f"{tag}-down n{hidden} k{inter}", m=1, n=hidden, k=inter))
    return out


def gemv_inputs(shape: Shape, rng: np.random.Generator) -> dict:
    w = _w4(rng, shape["n"], shape["k"], "qweight", "scales")
    return {"x": _fp16_normal(rng, shape["k"]), **w}


def gemv_reference(shape: Shape, inputs: dict) -> dict:
    return {"y": naive.naive_gemv(*_args(inputs, "qweight", "scales", "x"))}


GEMV = _path(
    W4A16_GEMV,
    [
        Variant("gemv_sw", "one warp per output row, lanes stride over packed words, shuffle reduction",
                gemv_sw.build),
        Variant("gemv_64t", "64 threads per 4-row block, shared-memory tree reduction (pre-single-warp kernel)",
                gemv_64t.build),
    ],
    shapes=gemv_shapes,
    make_inputs=gemv_inputs,
    outputs=lambda shape: {"y": ((shape["n"],), "float16")},
    reference=gemv_reference,
    traffic=_gemv_traffic(1),
    notes="memory-bound: streams k/2 bytes of packed weights per row",
    extra={"gemm_mnk": lambda s: (1, s["n"], s["k"])},
)


def dual_shapes(preset: str, model: Mapping[str, Any] | None) -> list[Shape]:
    check_preset(preset)
    if preset == "smoke":
        return [_mk("m1-n37-k264", **_SMOKE_GEMV)]
    hidden, ffns, _ = _ffn_sizes(model)
    return [_mk(f"{tag}-gate+up n{inter} k{hidden}", m=1, n=inter, k=hidden) for tag, inter in ffns]


def dual_inputs(shape: Shape, rng: np.random.Generator) -> dict:
    n, k = shape["n"], shape["k"]
    w = {**_w4(rng, n, k, "qw_gate", "s_gate"), **_w4(rng, n, k, "qw_up", "s_up")}
    return {"x": _fp16_normal(rng, k), **w}


def dual_reference(shape: Shape, inputs: dict) -> dict:
    gate, up = naive.naive_gemv_dual(*_args(inputs, "qw_gate", "s_gate", "qw_up", "s_up", "x"))
    return {"gate": gate, "up": up}


GEMV_DUAL = _path(
    W4A16_GEMV_DUAL,
    [
        Variant("gemv_dual_sw", "one warp per output row computing gate and up, two shuffle reductions",
                gemv_dual_sw.build),
        Variant("gemv_dual_64t", "64 threads per 4-row block computing gate and up, shared-memory reduction",
                gemv_dual_64t.build),
    ],
    shapes=dual_shapes,
    make_inputs=dual_inputs,
    outputs=lambda shape: {"gate": ((shape["n"],), "float16"), "up": ((shape["n"],), "float16")},
    reference=dual_reference,
    traffic=_gemv_traffic(2),
    notes="memory-bound: streams both packed weight matrices once",
    extra={"gemm_mnk": lambda s: (1, 2 * s["n"], s["k"])},
)


# ── w4a16.ffn_decode ─────────────────────────────────────────────────────────

_FFN_ARGS = ("x", "qw_gate", "s_gate", "qw_up", "s_up", "qw_down", "s_down")


def ffn_shapes(preset: str, model: Mapping[str, Any] | None) -> list[Shape]:
    check_preset(preset)
    if preset == "smoke":
        # Each projection's only scale group is partial (72 and 40 inputs);
        # the GEMV and GEMM paths cover several groups. Kept small: the
        # down GEMV has a warp per hidden row.
        return [_mk("h72-i40", m=1, hidden=72, inter=40)]
    hidden, ffns, _ = _ffn_sizes(model)
    return [_mk(f"{tag}-ffn h{hidden} i{inter}", m=1, hidden=hidden, inter=inter) for tag, inter in ffns]


def ffn_inputs(shape: Shape, rng: np.random.Generator) -> dict:
    h, i = shape["hidden"], shape["inter"]
    w = {
        **_w4(rng, i, h, "qw_gate", "s_gate"),
        **_w4(rng, i, h, "qw_up", "s_up"),
        **_w4(rng, h, i, "qw_down", "s_down"),
    }
    return {"x": _fp16_normal(rng, h), **w}


def ffn_traffic(shape: Shape) -> Traffic:
    """The least any variant must move: the three weight matrices, ``x`` in,
    ``y`` out (no intermediate round trips)."""
    h, i = shape["hidden"], shape["inter"]
    return Traffic(
        bytes_read=2 * packed_bytes(i, h) + packed_bytes(h, i) + 2 * h,
        bytes_written=2 * h,
        flops=6 * h * i + silu_mul.FLOPS_PER_ELEMENT * i,
    )


FFN_LEVER_DEFAULTS = W4A16_FFN_DECODE.fixed  # Atlas: always the fused kernel
ffn_select = W4A16_FFN_DECODE.select


_FFN_SUMMARIES = {
    "gemv_sw+fused": "dual GEMV (warp per row), then fused SiLU-multiply + down GEMV",
    "gemv_64t+fused": "dual GEMV (64 threads per 4 rows), then fused SiLU-multiply + down GEMV",
    "gemv_sw+split": "dual GEMV, SiLU-multiply, down GEMV (all warp per row)",
    "gemv_64t+split": "dual GEMV, SiLU-multiply, down GEMV (64 threads per 4 rows)",
    "gemm_m1": "gate, up, down through the tiled GEMM at M = 1, SiLU-multiply between",
}


# Kernel launches per call (ffn_decode's sequences): the levers choose
# between two, three and four, so the bench also times these with the host's
# launch cost, and the roofline floor pays a launch latency for each.
_FFN_LAUNCHES = {"gemv_sw+fused": 2, "gemv_64t+fused": 2, "gemv_sw+split": 3, "gemv_64t+split": 3, "gemm_m1": 4}


def _ffn_variant(name: str) -> Variant:
    return Variant(
        name,
        _FFN_SUMMARIES[name],
        lambda shape, _n=name: build_ffn_variant(_n, shape),
        traffic=lambda shape, _n=name: ffn_variant_traffic(_n, shape),
        launches=_FFN_LAUNCHES[name],
    )


FFN_DECODE = _path(
    W4A16_FFN_DECODE,
    [_ffn_variant(name) for name in _FFN_SUMMARIES],
    shapes=ffn_shapes,
    make_inputs=ffn_inputs,
    outputs=lambda shape: {"y": ((shape["hidden"],), "float16")},
    reference=lambda shape, inputs: {"y": naive.naive_ffn_decode(*_args(inputs, *_FFN_ARGS))},
    traffic=ffn_traffic,
    notes=(
        "memory-bound: the three weight matrices dominate; decode_ffn_via_gemm "
        "takes precedence over decode_split_silu and gemv_sw"
    ),
)


# ── w4a16.gemm ───────────────────────────────────────────────────────────────


def gemm_shapes(preset: str, model: Mapping[str, Any] | None) -> list[Shape]:
    check_preset(preset)
    if preset == "smoke":
        # k = 160: a full scale group and a partial one of 32; a multiple of
        # 32 (the small-M tiles run) but not of the default TILE_K = 64.
        # m = 67 is past the small-M limit of 64 and not a tile multiple.
        return [_mk("m5-n37-k160", m=5, n=37, k=160), _mk("m67-n37-k160", m=67, n=37, k=160)]
    hidden, ffns, rows = _ffn_sizes(model)
    out = []
    for m in rows:
        for tag, inter in ffns:
            out.append(_mk(f"{tag}-gate m{m} n{inter} k{hidden}", m=m, n=inter, k=hidden))
            out.append(_mk(f"{tag}-down m{m} n{hidden} k{inter}", m=m, n=hidden, k=inter))
    return out


def gemm_inputs(shape: Shape, rng: np.random.Generator) -> dict:
    w = _w4(rng, shape["n"], shape["k"], "qweight", "scales")
    return {"a": _fp16_normal(rng, (shape["m"], shape["k"])), **w}


def gemm_traffic(shape: Shape) -> Traffic:
    m, n, k = shape["m"], shape["n"], shape["k"]
    return Traffic(
        bytes_read=packed_bytes(n, k) + 2 * m * k, bytes_written=2 * m * n, flops=2 * m * n * k
    )


gemm_select = W4A16_GEMM.select


# The tensor-core form this process builds (None only where there is
# neither a GPU nor the simulator): what `leverctl kernels` says; each
# launch carries the form it actually runs on, which the record takes.
_TC_FORM = gemm_tc.declared_form()
_TC_DTYPE = gemm_tc.TC_DTYPE if _TC_FORM else None

GEMM = _path(
    W4A16_GEMM,
    [
        Variant("small_m", "tensor cores, m <= 64: wgmma 64 x 64 warpgroup tiles (Hopper) or mma.sync 16-64 x 16 "
                "tiles of 4 warps splitting K; int4 dequantised to fp16, f32 accumulators", gemm_tc.build_small_m,
                tensor_cores=_TC_FORM, tc_dtype=_TC_DTYPE),
        Variant("default_tiles", "tensor cores, any m: wgmma 64 x 128 warpgroup tiles, two K stages in flight "
                "(Hopper) or mma.sync 64 x 64 tiles of 4 warps, A staged for ldmatrix", gemm_tc.build_default,
                tensor_cores=_TC_FORM, tc_dtype=_TC_DTYPE),
        Variant("fma_tiles", "FP32 FMA on CUDA cores: 64x64x64 tiles, 256 threads, 4x4 register micro-tiles, "
                "any k % 8 == 0 (where the tensor-core GEMMs cannot step K by 16)", gemm_tiled.build_default),
    ],
    shapes=gemm_shapes,
    make_inputs=gemm_inputs,
    outputs=lambda shape: {"c": ((shape["m"], shape["n"]), "float16")},
    reference=lambda shape, inputs: {"c": naive.naive_gemm(*_args(inputs, "a", "qweight", "scales"))},
    traffic=gemm_traffic,
    notes="memory-bound at small m (weight stream), tensor-core-bound at large m (FP32-bound on fma_tiles)",
    extra={"gemm_mnk": lambda s: (s["m"], s["n"], s["k"])},
)

PATHS = (GEMV, GEMV_DUAL, FFN_DECODE, GEMM)

for _declared in PATHS:
    check_declaration(_declared)
