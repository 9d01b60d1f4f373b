"""Shapes, seeded inputs, outputs, reference and traffic of
``attention.mla_decode``, and its declaration.

Shape dims: ``n`` sequences of at most ``ctx`` tokens (``spec.lengths``:
different, ending mid-block), ``h`` heads, latent rank ``r``, ``p``
rotary dims, and ``qk_dim`` (the query-key head dim the softmax scale is
taken from). Model shapes read the recipe's ``[model.mla]`` (``q_heads``,
``kv_lora_rank``, ``qk_rope_head_dim``, ``qk_nope_head_dim``), DeepSeek-V3's
without it.

The softmax scale is the model's: ``mscale^2 / sqrt(qk_dim)``, where a
model with YaRN rope scaling (``rope_scaling_factor``, ``mscale_all_dim``,
``original_context``) served beyond its original context multiplies the
scale by ``mscale = 0.1 mscale_all_dim ln(factor) + 1``, squared (the
query and the key each carry one), as DeepSeek-V3's own inference code
does; served within it (``served_context``), the scale is plain. A shape
carries ``yarn_factor`` (0: plain) and ``mscale_all_dim``;
``_mla.mscale2`` turns them into the factor the reference and the kernel
both apply.

Inputs (fresh draws per call): q and every written cache row ~ N(0, 1) in
bf16 bits, the cache one buffer per sequence of ``ctx`` rounded up to 16
rows; every row past a sequence's length is NaN, so a kernel that reads
one fails.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from ...common.path import Shape, Traffic, check_preset, declared_path
from ...selection.attention import MLA_DECODE as TABLE
from .. import family
from .._paged import BLOCK
from ..paged_decode import spec
from . import batched, per_sequence
from . import naive as mla_naive
from ._mla import MAX_HEAD_TILE, mscale2

BF16, F32, I32 = 2, 4, 4
NAN_BITS = 0x7FC0

# DeepSeek-V3's attention (MLA), the fallback without [model.mla]: its
# config.json (rope_scaling: yarn, factor 40, mscale_all_dim 1.0,
# original_max_position_embeddings 4096; max_position_embeddings 163840, the
# context served here).
DEEPSEEK_V3_MLA = {
    "q_heads": 128,
    "kv_lora_rank": 512,
    "qk_rope_head_dim": 64,
    "qk_nope_head_dim": 128,
    "rope_scaling_factor": 40,
    "mscale_all_dim": 1.0,
    "original_context": 4096,
    "served_context": 163840,
}


def yarn(mla: Mapping[str, Any]) -> dict:
    """``yarn_factor`` (0 where no YaRN scaling applies: none declared, or
    the served context within the original) and ``mscale_all_dim``."""
    factor = mla.get("rope_scaling_factor")
    served, original = mla.get("served_context"), mla.get("original_context")
    if not factor or float(factor) <= 1 or not served or not original or int(served) <= int(original):
        return {"yarn_factor": 0, "mscale_all_dim": 0.0}
    return {"yarn_factor": int(factor), "mscale_all_dim": float(mla.get("mscale_all_dim", 1.0))}


def _label(preset: str, d: Mapping[str, int]) -> str:
    return f"{preset} n{d['n']} ctx{d['ctx']} h{d['h']} r{d['r']}+{d['p']}"


def shapes(preset: str, model: Mapping[str, Any] | None) -> list[Shape]:
    check_preset(preset)
    if preset == "smoke":
        dims = [dict(n=3, ctx=37, h=3, r=16, p=8, qk_dim=24)]
    else:
        model = model or {}
        mla = {**DEEPSEEK_V3_MLA, **dict(model.get("mla") or {})}
        bench = dict(model.get("bench") or {})
        heads = dict(
            h=int(mla["q_heads"]),
            r=int(mla["kv_lora_rank"]),
            p=int(mla["qk_rope_head_dim"]),
            qk_dim=int(mla["qk_nope_head_dim"]) + int(mla["qk_rope_head_dim"]),
            **yarn(dict(model["mla"]) if model.get("mla") else DEEPSEEK_V3_MLA),  # a recipe states its own
        )
        dims = [
            dict(n=int(n), ctx=int(c), **heads)
            for c in bench.get("decode_contexts", spec.DEFAULT_CONTEXTS)
            for n in bench.get("decode_batches", spec.DEFAULT_BATCHES)
        ]
    return [Shape(_label(preset, d), d) for d in dims]


lengths = spec.lengths


def profile_shape(shape: Shape) -> Shape:
    """The memory trace's shape: the model's latent rank ``r`` and rotary
    dims ``p`` (so a cache row's length, stride and alignment: 576 bf16 at
    DeepSeek-V3) and its softmax scale, one tile of heads (at most 8, the
    kernel's head tile) and one sequence of ``ctx`` 33 (:func:`lengths`: 30
    tokens, two KV blocks, the second partial)."""
    d = {**shape.dims, "n": 1, "ctx": 33, "h": min(shape["h"], MAX_HEAD_TILE)}
    return Shape(_label("profile", d), d)


def make_inputs(shape: Shape, rng) -> dict:
    n, h, r, p = shape["n"], shape["h"], shape["r"], shape["p"]
    cap = -(-shape["ctx"] // BLOCK) * BLOCK
    lens = lengths(shape)
    c_kv = spec._bf16(rng, (n, cap, r))
    k_pe = spec._bf16(rng, (n, cap, p))
    for i, length in enumerate(lens):
        c_kv[i, length:] = k_pe[i, length:] = NAN_BITS  # never written
    return {
        "q_nope": spec._bf16(rng, (n, h, r)),
        "q_pe": spec._bf16(rng, (n, h, p)),
        "c_kv": c_kv,
        "k_pe": k_pe,
        "context_lens": np.array(lens, np.int32),
    }


def outputs(shape: Shape):
    return {"o": ((shape["n"], shape["h"], shape["r"]), "float32")}


def reference(shape: Shape, x: dict) -> dict:
    return {
        "o": mla_naive.naive_mla_decode(
            x["q_nope"], x["q_pe"], x["c_kv"], x["k_pe"], x["context_lens"], shape["qk_dim"], mscale2(shape)
        )
    }


def traffic(shape) -> Traffic:
    """q, each token's latent and rotary row once (the head tiles' repeats
    hit L2) and the lengths read, o written; per head and token 2 flops per
    dim of the score (R + P) and of the output (R)."""
    n, h, r, p = shape["n"], shape["h"], shape["r"], shape["p"]
    tokens = sum(lengths(shape))
    read = n * h * (r + p) * BF16 + tokens * (r + p) * BF16 + n * I32
    return Traffic(read, n * h * r * F32, 2 * tokens * h * (2 * r + p))


def per_sequence_launches(shape) -> int:
    return shape["n"]


def batch_invariance(variant: str, shape: Shape, launch, bufs: Mapping[str, Any], cuda) -> dict:
    """Decode every sequence of the batch alone with the same launch and
    compare its output with its row of the batched output, bit for bit.
    Both variants must pass: a block's work depends on its own sequence
    alone, which is what makes the per-sequence fallback give the batched
    bits. ``bufs`` are those of a finished, passing run (the check's)."""
    batched = bufs["o"].copy_to_host()
    differing, worst = 0, 0.0
    for i in range(shape["n"]):
        sub = {
            name: cuda.to_device(np.ascontiguousarray(bufs[name].copy_to_host()[i : i + 1]))
            for name in ("q_nope", "q_pe", "c_kv", "k_pe", "context_lens")
        }
        sub["o"] = cuda.to_device(np.full((1, shape["h"], shape["r"]), np.nan, np.float32))
        launch(sub)
        cuda.synchronize()
        alone = sub["o"].copy_to_host()[0]
        if not np.array_equal(alone.view(np.uint32), batched[i].view(np.uint32)):
            differing += 1
            diff = np.abs(alone.astype(np.float64) - batched[i])
            worst = max(worst, float(np.nanmax(diff)) if np.any(np.isfinite(diff)) else float("inf"))
    return {
        "identical": differing == 0,
        "required": True,
        "sequences": shape["n"],
        "differing": differing,
        "max_abs_diff": float(f"{worst:.4g}"),
    }


PATH = declared_path(
    TABLE,
    {
        v.name: v
        for v in (family.variant(batched, traffic, 1), family.variant(per_sequence, traffic, per_sequence_launches))
    },
    shapes=shapes,
    make_inputs=make_inputs,
    outputs=outputs,
    reference=reference,
    traffic=traffic,
    tolerance=family.TOL,
    notes="Memory-bound on the latent cache. per_sequence launches the batched kernel once per sequence.",
    extra={"model_sections": ("mla",), "batch_invariance": batch_invariance, "profile_shape": profile_shape},
)
