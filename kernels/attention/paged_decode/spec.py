"""Shapes, seeded inputs, outputs, reference, traffic, lever binding and the
batch invariance check of ``attention.paged_decode``, and its declaration.

Shape dims: ``n`` sequences of at most ``ctx`` tokens (their lengths are
:func:`lengths`: different from each other, ending mid-block), ``hq`` query
heads over ``hkv`` KV heads of dim ``d``, ``hc_mult`` (the model's
hyper-connection multiplier: Metrale's per-sequence decode lever applies
only where it is above 0), and the split policy's ``target_ctas`` and
``min_split_blocks`` (``_paged``; smoke shapes lower them so that tiny
sequences still split). :func:`bind` adds the levers that reach the run:
``max_decode_seqs`` and ``kv_fill`` (the bf16 bits the unwritten slots of a
fresh tail block hold: 0, or the engine's poison).

Inputs (fresh draws per call): ``q`` and every written KV slot ~ N(0, 1) in
bf16 bits. The pool holds each sequence's blocks, scattered (a random
permutation), two free blocks of stale finite values, and a last block of
NaN that no table names (a table's unused entries are -1). The reference
reads the same bf16 values, so only the kernels' fp32 arithmetic is under
test.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from ...common.bits import f32_to_bf16_np
from ...common.path import Shape, Traffic, check_preset, declared_path
from ...selection.attention import PAGED_DECODE as TABLE
from .. import family, naive
from .._paged import BLOCK, num_splits
from . import per_sequence, split_live_batch, split_pinned

BF16, F32, I32 = 2, 4, 4

# Qwen3-Next-80B-A3B's gated attention, the fallback without [model.attention].
QWEN3_NEXT_ATTENTION = {"q_heads": 16, "kv_heads": 2, "head_dim": 256}
DEFAULT_CONTEXTS = [1024, 8192, 32768]
DEFAULT_BATCHES = [1, 8, 32]
# The split policy at model shapes: enough blocks to fill an H200 (132 SMs)
# twice over when max_decode_seqs sequences decode together, and no split
# shorter than 8 KV blocks (128 tokens).
TARGET_CTAS = 256
MIN_SPLIT_BLOCKS = 8

# bf16 bits of a poisoned fresh slot: Atlas fills with NaN, Metrale with 0xFF
# bytes (a negative NaN in bf16).
POISON_BITS = {"atlas": 0x7FC0, "metrale": 0xFFFF}
DEFAULT_POISON = 0x7FC0

# Variants whose split count cannot depend on the live batch.
INVARIANT = ("split_pinned", "per_sequence")


# ----------------------------------------------------------------- shapes


def _label(preset: str, d: Mapping[str, int]) -> str:
    hc = f" hc{d['hc_mult']}" if d.get("hc_mult") else ""
    return f"{preset} n{d['n']} ctx{d['ctx']} hq{d['hq']} hkv{d['hkv']} d{d['d']}{hc}"


def shapes(preset: str, model: Mapping[str, Any] | None) -> list[Shape]:
    check_preset(preset)
    if preset == "smoke":
        dims = [
            dict(n=3, ctx=37, hq=4, hkv=2, d=8, hc_mult=0, target_ctas=4, min_split_blocks=1),
            dict(n=3, ctx=45, hq=3, hkv=1, d=12, hc_mult=1, target_ctas=4, min_split_blocks=1),
        ]
    else:
        model = model or {}
        att = {**QWEN3_NEXT_ATTENTION, **dict(model.get("attention") or {})}
        bench = dict(model.get("bench") or {})
        heads = dict(
            hq=int(att["q_heads"]),
            hkv=int(att["kv_heads"]),
            d=int(att["head_dim"]),
            hc_mult=int(model.get("hc_mult", 0)),
            target_ctas=TARGET_CTAS,
            min_split_blocks=MIN_SPLIT_BLOCKS,
        )
        dims = [
            dict(n=int(n), ctx=int(c), **heads)
            for c in bench.get("decode_contexts", DEFAULT_CONTEXTS)
            for n in bench.get("decode_batches", DEFAULT_BATCHES)
        ]
    return [Shape(_label(preset, d), d) for d in dims]


def profile_shape(shape: Shape) -> Shape:
    """The memory trace's shape: the model's heads and head size (so its
    rows, strides and alignment), one sequence of 33 tokens (three KV
    blocks, the last partial)."""
    d = {**shape.dims, "n": 1, "ctx": 33}
    return Shape(_label("profile", d), d)


def lengths(shape) -> list[int]:
    """Sequence lengths: the first ``ctx - 3``, the others spread down to
    about half of it, so they differ and end mid-block."""
    n, ctx = shape["n"], shape["ctx"]
    return [max(1, ctx - 3 - (i * (ctx // 2)) // n) for i in range(n)]


def bind(levers: Mapping[str, Any], shape: Shape, engine: str = "") -> Shape:
    """The shape the run takes at these lever values: the split policy's
    ``max_decode_seqs`` and the fill of fresh KV slots (``kv_fill``, bf16
    bits) join its dims; the label stays."""
    mds = int(levers.get("max_decode_seqs") or 1)
    fill = POISON_BITS.get(engine, DEFAULT_POISON) if levers.get("kv_poison") else 0
    return Shape(shape.label, {**shape.dims, "max_decode_seqs": mds, "kv_fill": fill})


# ----------------------------------------------------------------- inputs


def _bf16(rng, shape) -> np.ndarray:
    # float32 draws: a 32K x 32-sequence cache is ~800M values
    return f32_to_bf16_np(rng.standard_normal(shape, dtype=np.float32))


def make_inputs(shape: Shape, rng) -> dict:
    n, hq, hkv, d = shape["n"], shape["hq"], shape["hkv"], shape["d"]
    lens = lengths(shape)
    nbs = [-(-length // BLOCK) for length in lens]
    owned = sum(nbs)
    pool = owned + 3  # two free blocks of stale values, one NaN block last
    perm = rng.permutation(pool - 1)
    k = _bf16(rng, (pool, BLOCK, hkv, d))
    v = _bf16(rng, (pool, BLOCK, hkv, d))
    k[-1] = v[-1] = 0x7FC0
    table = np.full((n, max(nbs)), -1, np.int32)
    at = 0
    fill = np.uint16(shape.get("kv_fill", 0))
    for i, (length, nb) in enumerate(zip(lens, nbs)):
        table[i, :nb] = perm[at : at + nb]
        at += nb
        tail, used = table[i, nb - 1], length - (nb - 1) * BLOCK
        k[tail, used:] = fill  # the fresh tail block's unwritten slots
        v[tail, used:] = fill
    return {
        "q": _bf16(rng, (n, hq, d)),
        "k_cache": k,
        "v_cache": v,
        "block_table": table,
        "context_lens": np.array(lens, np.int32),
    }


def outputs(shape: Shape):
    return {"o": ((shape["n"], shape["hq"], shape["d"]), "float32")}


def reference(shape: Shape, x: dict) -> dict:
    return {"o": naive.naive_paged_decode(x["q"], x["k_cache"], x["v_cache"], x["block_table"], x["context_lens"])}


# ----------------------------------------------------------------- traffic


def splits_of(shape, ref_seqs: int) -> list[int]:
    return [
        num_splits(length, ref_seqs, shape["hkv"], shape["target_ctas"], shape["min_split_blocks"])[0]
        for length in lengths(shape)
    ]


def _traffic(shape, ref_seqs: int) -> Traffic:
    """q, the tokens' K and V (never the unwritten slots), the block table
    and lengths read; o written; the partials written once and read once;
    2 flops per element of q k and of p v, per head and token."""
    n, hq, hkv, d = shape["n"], shape["hq"], shape["hkv"], shape["d"]
    lens = lengths(shape)
    tokens = sum(lens)
    parts = sum(splits_of(shape, ref_seqs)) * hq * (d + 2) * F32
    read = n * hq * d * BF16 + 2 * tokens * hkv * d * BF16 + sum(-(-x // BLOCK) for x in lens) * I32 + n * I32 + parts
    return Traffic(read, n * hq * d * F32 + parts, 4 * tokens * hq * d)


def pinned_traffic(shape) -> Traffic:
    return _traffic(shape, shape.get("max_decode_seqs", 1))


def live_batch_traffic(shape) -> Traffic:
    return _traffic(shape, shape["n"])


def per_sequence_launches(shape) -> int:
    return 2 * shape["n"]  # split and merge for each sequence


# --------------------------------------------------------- batch invariance


def batch_invariance(variant: str, shape: Shape, launch, bufs: Mapping[str, Any], cuda) -> dict:
    """Decode every sequence of the batch alone with the same launch and
    compare its output with its row of the batched output, bit for bit.
    ``bufs`` are the device buffers of a batched run that has finished
    (the check's); the KV cache is reused, not copied."""
    batched = bufs["o"].copy_to_host()
    differing, worst = 0, 0.0
    for i in range(shape["n"]):
        sub = {
            name: cuda.to_device(np.ascontiguousarray(bufs[name].copy_to_host()[i : i + 1]))
            for name in ("q", "block_table", "context_lens")
        }
        sub.update(
            k_cache=bufs["k_cache"],
            v_cache=bufs["v_cache"],
            o=cuda.to_device(np.full((1, shape["hq"], shape["d"]), np.nan, np.float32)),
        )
        for scratch in getattr(launch, "workspace", {}).values():
            scratch.copy_to_device(np.full(scratch.shape, np.nan, scratch.dtype))
        launch(sub)
        cuda.synchronize()
        alone = sub["o"].copy_to_host()[0]
        if not np.array_equal(alone.view(np.uint32), batched[i].view(np.uint32)):
            differing += 1
            diff = np.abs(alone.astype(np.float64) - batched[i])
            worst = max(worst, float(np.nanmax(diff)) if np.any(np.isfinite(diff)) else float("inf"))
    return {
        "identical": differing == 0,
        "required": variant in INVARIANT,
        "sequences": shape["n"],
        "differing": differing,
        "max_abs_diff": float(f"{worst:.4g}"),
    }


PATH = declared_path(
    TABLE,
    {
        v.name: v
        for v in (
            family.variant(split_pinned, pinned_traffic),
            family.variant(per_sequence, pinned_traffic, per_sequence_launches),
            family.variant(split_live_batch, live_batch_traffic),
        )
    },
    shapes=shapes,
    make_inputs=make_inputs,
    outputs=outputs,
    reference=reference,
    traffic=pinned_traffic,
    tolerance=family.TOL,
    notes="Memory-bound on the KV cache. split_live_batch is a baseline no lever selects.",
    extra={"model_sections": ("attention",), "batch_invariance": batch_invariance, "profile_shape": profile_shape},
    bind=bind,
)
