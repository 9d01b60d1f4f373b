"""Shapes, seeded inputs, outputs, reference and traffic of
``attention.dflash_contig``, and its declaration.

Shape dims: ``n`` sequences of at most ``ctx`` tokens (lengths from
``spec.lengths``: different, ending mid-block), a draft block of ``t``
query tokens (the last ``t`` tokens of each sequence), ``hq`` query heads
over ``hkv`` KV heads of dim ``d``, and the split policy's ``target_ctas``
and ``min_split_blocks`` (smoke shapes lower them so that tiny sequences
still split).

Inputs hold every token twice, with the same bf16 values: scattered over a
pool of 16-token blocks behind a block table (as ``spec.make_inputs`` lays
out the paged decode's), and in one contiguous buffer per sequence. Slots
no sequence wrote are NaN in both layouts (the pool's unnamed last block,
the tail of each tail block, each contiguous buffer past its length), so a
kernel that reads one fails.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from ...common.path import Shape, Traffic, check_preset, declared_path
from ...selection.attention import DFLASH_CONTIG as TABLE
from .. import family
from ..paged_decode import spec
from . import contig, paged
from . import naive as dflash_naive
from ._dflash import BLOCK, num_splits, ref_seqs

BF16, F32, I32 = 2, 4, 4
NAN_BITS = 0x7FC0
DRAFT_BLOCK = 16  # DFlash's draft block: 16 query tokens


def _label(preset: str, d: Mapping[str, int]) -> str:
    return f"{preset} n{d['n']} ctx{d['ctx']} t{d['t']} hq{d['hq']} hkv{d['hkv']} d{d['d']}"


def shapes(preset: str, model: Mapping[str, Any] | None) -> list[Shape]:
    """Smoke: tiny odd shapes. Model: one sequence (the draft head runs per
    request) at each of the recipe's decode contexts, the target's
    attention heads (Qwen3-Next's without ``[model.attention]``), a draft
    block of ``[model.bench] draft_block`` tokens (16)."""
    check_preset(preset)
    if preset == "smoke":
        dims = [
            dict(n=2, ctx=37, t=4, hq=4, hkv=2, d=8, target_ctas=32, min_split_blocks=1),
            dict(n=2, ctx=29, t=3, hq=3, hkv=1, d=12, target_ctas=32, min_split_blocks=1),
        ]
    else:
        model = model or {}
        att = {**spec.QWEN3_NEXT_ATTENTION, **dict(model.get("attention") or {})}
        bench = dict(model.get("bench") or {})
        dims = [
            dict(
                n=1,
                ctx=int(c),
                t=int(bench.get("draft_block", DRAFT_BLOCK)),
                hq=int(att["q_heads"]),
                hkv=int(att["kv_heads"]),
                d=int(att["head_dim"]),
                target_ctas=spec.TARGET_CTAS,
                min_split_blocks=spec.MIN_SPLIT_BLOCKS,
            )
            for c in bench.get("decode_contexts", spec.DEFAULT_CONTEXTS)
        ]
    return [Shape(_label(preset, d), d) for d in dims]


lengths = spec.lengths

PROFILE_DRAFT = 2  # query tokens of the profile shape's draft block


def profile_shape(shape: Shape) -> Shape:
    """The memory trace's shape: the model's heads and head size (``hq``,
    ``hkv``, ``d``: so a token's K and V rows, their strides and alignment)
    and split policy, one sequence of ``ctx`` 33 (:func:`lengths`: 30
    tokens, two KV blocks, the second partial: one split) and a draft block
    of 2 query tokens (of the model's
    16: each query's blocks read the same rows, so two keep the causal
    edge between queries at an eighth of the simulator's time)."""
    d = {**shape.dims, "n": 1, "ctx": 33, "t": min(shape["t"], PROFILE_DRAFT)}
    return Shape(_label("profile", d), d)


def make_inputs(shape: Shape, rng) -> dict:
    n, t, hq, hkv, d = shape["n"], shape["t"], shape["hq"], shape["hkv"], shape["d"]
    lens = lengths(shape)
    nbs = [-(-length // BLOCK) for length in lens]
    pool = sum(nbs) + 3  # two free blocks of stale values, one NaN block last
    perm = rng.permutation(pool - 1)
    k = spec._bf16(rng, (pool, BLOCK, hkv, d))
    v = spec._bf16(rng, (pool, BLOCK, hkv, d))
    k[-1] = v[-1] = NAN_BITS
    table = np.full((n, max(nbs)), -1, np.int32)
    kc = np.full((n, shape["ctx"], hkv, d), NAN_BITS, np.uint16)
    vc = np.full_like(kc, NAN_BITS)
    at = 0
    for i, (length, nb) in enumerate(zip(lens, nbs)):
        table[i, :nb] = perm[at : at + nb]
        at += nb
        tail, used = table[i, nb - 1], length - (nb - 1) * BLOCK
        k[tail, used:] = v[tail, used:] = NAN_BITS  # never written
        kc[i, :length] = k[table[i, :nb]].reshape(-1, hkv, d)[:length]
        vc[i, :length] = v[table[i, :nb]].reshape(-1, hkv, d)[:length]
    return {
        "q": spec._bf16(rng, (n, t, hq, d)),
        "k_cache": k,
        "v_cache": v,
        "block_table": table,
        "k_contig": kc,
        "v_contig": vc,
        "context_lens": np.array(lens, np.int32),
    }


def outputs(shape: Shape):
    return {"o": ((shape["n"], shape["t"], shape["hq"], shape["d"]), "float32")}


def reference(shape: Shape, x: dict) -> dict:
    return {
        "o": dflash_naive.naive_dflash_block(x["q"], x["k_cache"], x["v_cache"], x["block_table"], x["context_lens"])
    }


def splits_of(shape) -> list[int]:
    return [
        num_splits(length, ref_seqs(shape), shape["hkv"], shape["target_ctas"], shape["min_split_blocks"])[0]
        for length in lengths(shape)
    ]


def _traffic(shape, table: bool) -> Traffic:
    """q, each token's K and V once (the T queries' repeats hit L2), the
    lengths, and for the paged layout the block table's entries, read; o
    written; the partials written once and read once; 4 flops per head,
    dim and token a query sees."""
    n, t, hq, hkv, d = shape["n"], shape["t"], shape["hq"], shape["hkv"], shape["d"]
    lens = lengths(shape)
    parts = sum(splits_of(shape)) * t * hq * (d + 2) * F32
    read = n * t * hq * d * BF16 + 2 * sum(lens) * hkv * d * BF16 + n * I32 + parts
    if table:
        read += sum(-(-x // BLOCK) for x in lens) * I32
    seen = sum(length - t + j + 1 for length in lens for j in range(t))
    return Traffic(read, n * t * hq * d * F32 + parts, 4 * seen * hq * d)


def paged_traffic(shape) -> Traffic:
    return _traffic(shape, table=True)


def contig_traffic(shape) -> Traffic:
    return _traffic(shape, table=False)


PATH = declared_path(
    TABLE,
    {v.name: v for v in (family.variant(paged, paged_traffic), family.variant(contig, contig_traffic))},
    shapes=shapes,
    make_inputs=make_inputs,
    outputs=outputs,
    reference=reference,
    traffic=paged_traffic,
    tolerance=family.TOL,
    notes="Memory-bound on the KV; contig reads no block table. Same kernel code, so the same bits.",
    extra={"model_sections": ("attention",), "profile_shape": profile_shape},
)
