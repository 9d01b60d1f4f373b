"""Shapes, seeded inputs, outputs, reference, traffic and findings of
``attention.decode_graph`` (declared in ``decode_graph_path``).

Shape dims: the batch ``n``; the GDN layers' heads (``hk``, ``hv``, ``dk``,
``dv``, state pool ``slots``) and the attention layers' (``hq``, ``hkv``,
``d``, ``ctx`` and the split policy's ``target_ctas``,
``min_split_blocks``); ``gdn_layers`` and ``attn_layers`` per step; and two
facts about the serving process that the decision table reads, stated in
every record's shape: ``communicator`` (1: an expert-parallel communicator
is present) and ``lora_pool`` (1: a LoRA pool is loaded).

Inputs: each layer's own, drawn as ``gdn.decode`` and
``attention.paged_decode`` draw theirs, stacked on a leading layer axis
(attention's ``q`` and ``o`` are ``aq`` and ``ao`` here).
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from .. import selection
from ..common.path import Shape, Traffic, check_preset
from ..gdn import naive as gdn_naive, spec as gdn_spec
from . import naive as attn_naive, spec as attn_spec

# Qwen3-Next-80B-A3B: three GDN layers to one attention layer.
MODEL = dict(hk=16, hv=32, dk=128, dv=128, hq=16, hkv=2, d=256, gdn_layers=3, attn_layers=1,
             target_ctas=attn_spec.TARGET_CTAS, min_split_blocks=attn_spec.MIN_SPLIT_BLOCKS)
MODEL_CONTEXT = 8192


def _label(preset: str, d: Mapping[str, int]) -> str:
    facts = ("comm " if d["communicator"] else "") + ("lora " if d["lora_pool"] else "")
    return (f"{preset} {facts}n{d['n']} gdn{d['gdn_layers']}x(hv{d['hv']} {d['dk']}x{d['dv']}) "
            f"attn{d['attn_layers']}x(ctx{d['ctx']} hq{d['hq']} hkv{d['hkv']} d{d['d']})")


def shapes(preset: str, model: Mapping[str, Any] | None) -> list[Shape]:
    check_preset(preset)
    if preset == "smoke":
        tiny = dict(n=2, slots=3, hk=1, hv=2, dk=8, dv=8, hq=2, hkv=1, d=8, ctx=21, gdn_layers=1,
                    attn_layers=1, target_ctas=2, min_split_blocks=1)
        dims = [dict(tiny, communicator=0, lora_pool=0), dict(tiny, communicator=1, lora_pool=1)]
    else:
        bench = dict((model or {}).get("bench") or {})
        dims = [dict(MODEL, n=int(n), slots=2 * int(n) + 1, ctx=MODEL_CONTEXT, communicator=c, lora_pool=0)
                for n in bench.get("decode_batches", attn_spec.DEFAULT_BATCHES) for c in (0, 1)]
    return [Shape(_label(preset, d), d) for d in dims]


def _gdn_shape(shape: Shape) -> Shape:
    return Shape(shape.label, {k: shape[k] for k in ("n", "slots", "hk", "hv", "dk", "dv")})


def _attn_shape(shape: Shape) -> Shape:
    keys = ("n", "ctx", "hq", "hkv", "d", "target_ctas", "min_split_blocks")
    return Shape(shape.label, {**{k: shape[k] for k in keys}, "hc_mult": 0, "max_decode_seqs": 1, "kv_fill": 0})


def make_inputs(shape: Shape, rng) -> dict:
    gs, as_ = _gdn_shape(shape), _attn_shape(shape)
    gdn = [gdn_spec.decode_inputs(gs, rng) for _ in range(shape["gdn_layers"])]
    att = [attn_spec.make_inputs(as_, rng) for _ in range(shape["attn_layers"])]
    out = {name: np.stack([x[name] for x in gdn]) for name in ("q", "k", "v", "g", "beta", "state")}
    out["slots"] = gdn[0]["slots"]
    for name in ("k_cache", "v_cache"):
        out[name] = np.stack([x[name] for x in att])
    out["aq"] = np.stack([x["q"] for x in att])
    # one batch: every attention layer reads the same block table and lengths
    out["block_table"], out["context_lens"] = att[0]["block_table"], att[0]["context_lens"]
    for x in att[1:]:
        x["block_table"], x["context_lens"] = out["block_table"], out["context_lens"]
    return out


def outputs(shape: Shape):
    g, a = shape["gdn_layers"], shape["attn_layers"]
    return {"o": ((g, shape["n"], shape["hv"], shape["dv"]), "float32"),
            "state": ((g, shape["slots"], shape["hv"], shape["dk"], shape["dv"]), "float32"),
            "ao": ((a, shape["n"], shape["hq"], shape["d"]), "float32")}


def reference(shape: Shape, x: dict) -> dict:
    os_, states = [], []
    for layer in range(shape["gdn_layers"]):
        o, pool = gdn_naive.naive_decode(x["q"][layer], x["k"][layer], x["v"][layer], x["g"][layer],
                                         x["beta"][layer], x["slots"], x["state"][layer])
        os_.append(o)
        states.append(pool)
    ao = [attn_naive.naive_paged_decode(x["aq"][layer], x["k_cache"][layer], x["v_cache"][layer],
                                        x["block_table"], x["context_lens"])
          for layer in range(shape["attn_layers"])]
    return {"o": np.stack(os_), "state": np.stack(states), "ao": np.stack(ao)}


def traffic(shape: Shape) -> Traffic:
    g = gdn_spec.decode_traffic(_gdn_shape(shape))
    a = attn_spec.pinned_traffic(_attn_shape(shape))
    lg, la = shape["gdn_layers"], shape["attn_layers"]
    return Traffic(lg * g.bytes_read + la * a.bytes_read, lg * g.bytes_written + la * a.bytes_written,
                   lg * g.flops + la * a.flops)


select = selection.ATTENTION_DECODE_GRAPH.select
