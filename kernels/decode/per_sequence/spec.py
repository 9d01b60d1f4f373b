"""``decode.per_sequence`` (Metrale's per-sequence decode): a decode step
of a batch launched once for the batch or once per sequence.

The step (``_step``) is the decode of a group of layers: for a model
without MLA, Qwen3-Next's group of three GDN layers and one gated-attention
layer (``attention.decode_graph``'s step: the batched GDN decode, the paged
decode's split and merge); for an MLA model, four of DeepSeek-V3's MLA
layers (``attention.mla_decode``'s kernel, one launch each). ``batched``
launches each kernel once for the batch; ``per_sequence`` runs the step
once per sequence on that sequence's batch-1 views. Both write the same
bits: the record's ``findings`` say whether the other variant, run from the
same buffers, gave them (``identical``), with ``mla`` and ``hc_mult``.

The kernels are the same and move the same bytes, so the difference a
record shows is the launches: ``n`` times the step's, each too small to
fill the GPU, each paying the launch latency (the roofline's launch term)
and, in ``with_host_us``, the host's launch cost the batch amortises.

Shape dims, every shape: the batch ``n``; the model's two facts the
decision table reads, ``mla`` (1: its attention is MLA) and ``hc_mult``
(its hyper-connection multiplier; 0: none). Without MLA, those of
``attention.decode_graph`` (GDN heads ``hk``, ``hv``, ``dk``, ``dv`` and
state pool ``slots``; attention ``hq``, ``hkv``, ``d``, ``ctx`` and the
split policy's ``target_ctas``, ``min_split_blocks``; ``gdn_layers``,
``attn_layers``); with it, those of ``attention.mla_decode`` (``ctx``,
``h``, ``r``, ``p``, ``qk_dim``, ``yarn_factor``, ``mscale_all_dim``) and
``mla_layers``. Model shapes read the recipe's ``[model.gdn]`` and
``[model.attention]``, or its ``[model.mla]``, and ``hc_mult`` from its
``[model]``; without a model, both Qwen3-Next's and DeepSeek-V3's.

Inputs: each layer's own, drawn as those paths draw theirs, stacked on a
leading layer axis; the per-sequence tables and the pools are the batch's.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from ...attention.decode_graph import spec as step_spec
from ...attention.mla_decode import spec as mla_spec
from ...attention.paged_decode import spec as attn_spec
from ...common.path import Shape, Traffic, Variant, check_preset, declared_path
from ...gdn import family as gdn_family
from ...selection.decode import PER_SEQUENCE as TABLE
from . import batched, naive, per_sequence
from ._step import MLA_LAYERED, launches

# Qwen3-Next-80B-A3B's repeating group: three GDN layers to one attention layer.
GDN_LAYERS, ATTN_LAYERS = 3, 1
QWEN3_NEXT_GDN = {"qk_heads": 16, "v_heads": 32, "head_dim_k": 128, "head_dim_v": 128}
# DeepSeek-V3: every layer is MLA; a step of four, as many as the group above.
MLA_LAYERS = 4
MODEL_CONTEXT = step_spec.MODEL_CONTEXT


def _label(preset: str, d: Mapping[str, int]) -> str:
    hc = f"hc{d['hc_mult']} " if d["hc_mult"] else ""
    if d["mla"]:
        return f"{preset} mla {hc}n{d['n']} {d['mla_layers']}x(ctx{d['ctx']} h{d['h']} r{d['r']}+{d['p']})"
    return (
        f"{preset} {hc}n{d['n']} gdn{d['gdn_layers']}x(hv{d['hv']} {d['dk']}x{d['dv']}) "
        f"attn{d['attn_layers']}x(ctx{d['ctx']} hq{d['hq']} hkv{d['hkv']} d{d['d']})"
    )


def _hybrid_model(model: Mapping[str, Any]) -> dict:
    att = {**attn_spec.QWEN3_NEXT_ATTENTION, **dict(model.get("attention") or {})}
    return dict(
        **gdn_family.heads({**QWEN3_NEXT_GDN, **dict(model.get("gdn") or {})}),
        hq=int(att["q_heads"]),
        hkv=int(att["kv_heads"]),
        d=int(att["head_dim"]),
        gdn_layers=GDN_LAYERS,
        attn_layers=ATTN_LAYERS,
        target_ctas=attn_spec.TARGET_CTAS,
        min_split_blocks=attn_spec.MIN_SPLIT_BLOCKS,
        mla=0,
    )


def _mla_model(model: Mapping[str, Any]) -> dict:
    (one,) = mla_spec.shapes("model", {**model, "bench": {"decode_batches": [1], "decode_contexts": [MODEL_CONTEXT]}})
    return {**{k: v for k, v in one.dims.items() if k != "n"}, "mla_layers": MLA_LAYERS, "mla": 1}


def shapes(preset: str, model: Mapping[str, Any] | None) -> list[Shape]:
    check_preset(preset)
    if preset == "smoke":
        hybrid = dict(
            n=3, slots=5, hk=1, hv=2, dk=8, dv=8, hq=2, hkv=1, d=8, ctx=21,
            gdn_layers=1, attn_layers=1, target_ctas=2, min_split_blocks=1, mla=0, hc_mult=1,
        )  # fmt: skip
        mla = dict(n=3, ctx=21, h=3, r=16, p=8, qk_dim=24, yarn_factor=0, mscale_all_dim=0.0, mla_layers=2)
        dims = [hybrid, dict(mla, mla=1, hc_mult=0)]
    else:
        model = dict(model or {})
        bench = dict(model.get("bench") or {})
        kinds = [m for m, has in ((_mla_model, "mla"), (_hybrid_model, "gdn")) if not model or model.get(has)]
        dims = []
        for kind in kinds:
            facts = {**kind(model), "hc_mult": int(model.get("hc_mult", 0))}
            for n in bench.get("decode_batches", attn_spec.DEFAULT_BATCHES):
                more = {} if facts["mla"] else {"slots": 2 * int(n) + 1}
                dims.append({**facts, "ctx": MODEL_CONTEXT, "n": int(n), **more})
    return [Shape(_label(preset, d), d) for d in dims]


def derive(dims: Mapping[str, Any], given: set) -> dict:
    """A shape refined along ``n``: a GDN step keeps ``2 n + 1`` state slots
    (``gdn.family.derive_slots``); an MLA step has none."""
    return gdn_family.derive_slots(dims, given) if "slots" in dims else dict(dims)


def smoke_of_kind(shape) -> Shape:
    """The smoke shape of ``shape``'s kind of model (MLA or not), whose
    buffers ``leverctl profile`` launches a model shape's step on to learn
    its kernels' argument types (an MLA step's buffers are not a GDN step's)."""
    return next(s for s in shapes("smoke", None) if s["mla"] == shape["mla"])


def profile_shape(shape: Shape) -> Shape:
    """The memory trace's shape: the model's rows (GDN state ``dk x dv``
    and value heads per key head, attention ``hq``, ``hkv``, ``d``; MLA's
    latent and rotary dims, one tile of heads), one sequence of 33 tokens
    (three KV blocks, the last partial), one layer of each kind."""
    if shape["mla"]:
        d = {**shape.dims, "n": 1, "ctx": 33, "h": min(shape["h"], 8), "mla_layers": 1}
    else:
        one_key_head = {"hk": 1, "hv": shape["hv"] // shape["hk"]}
        d = {**shape.dims, "n": 1, "slots": 3, "ctx": 33, "gdn_layers": 1, "attn_layers": 1, **one_key_head}
    return Shape(_label("profile", d), d)


def make_inputs(shape: Shape, rng) -> dict:
    if not shape["mla"]:
        return step_spec.make_inputs(shape, rng)
    layers = [mla_spec.make_inputs(shape, rng) for _ in range(shape["mla_layers"])]
    out = {name: np.stack([x[name] for x in layers]) for name in MLA_LAYERED if name != "o"}
    out["context_lens"] = layers[0]["context_lens"]  # one batch: the same lengths in every layer
    return out


def outputs(shape: Shape):
    if not shape["mla"]:
        return step_spec.outputs(shape)
    return {"o": ((shape["mla_layers"], shape["n"], shape["h"], shape["r"]), "float32")}


def traffic(shape) -> Traffic:
    """The composed kernels' traffic: ``attention.decode_graph``'s step, or
    ``attention.mla_decode``'s per layer. The same for both variants: a
    sequence's split count is pinned, not the live batch's."""
    if not shape["mla"]:
        return step_spec.traffic(shape)
    one, layers = mla_spec.traffic(shape), shape["mla_layers"]
    return Traffic(layers * one.bytes_read, layers * one.bytes_written, layers * one.flops)


def per_sequence_launches(shape) -> int:
    return shape["n"] * launches(shape)


def findings(variant: str, shape: Shape, launch, bufs, cuda, on_gpu: bool = False) -> dict:
    """The record's ``findings``: the model facts ``select()`` read, and
    whether the other variant, run from the same buffers (copies of the
    check's, after its step), writes what this one writes bit for bit
    (``identical``; ``differing`` names the outputs that differ)."""
    other = (per_sequence if variant == batched.NAME else batched).build(shape)
    mine, theirs = step_spec.clone(bufs, cuda), step_spec.clone(bufs, cuda)
    launch(mine)
    other(theirs)
    cuda.synchronize()
    differing = step_spec.differing(outputs(shape), mine, theirs)
    out = {"mla": bool(shape["mla"]), "hc_mult": int(shape["hc_mult"]), "identical": not differing}
    if differing:
        out["differing"] = differing
        out["note"] = f"{variant} differs from the other variant in {', '.join(differing)}"
    return out


PATH = declared_path(
    TABLE,
    {
        v.name: v
        for v in (
            Variant(batched.NAME, batched.SUMMARY, batched.build, launches=launches),
            Variant(per_sequence.NAME, per_sequence.SUMMARY, per_sequence.build, launches=per_sequence_launches),
        )
    },
    shapes=shapes,
    make_inputs=make_inputs,
    outputs=outputs,
    reference=naive.reference,
    traffic=traffic,
    tolerance=step_spec.TOL,
    notes="Launch-bound at small batches: per_sequence makes n times the step's launches, each too small to "
    "fill the GPU, on the same kernels and bytes; the record shows the launches and with_host_us the host's "
    "cost of each, which the batch amortises.",
    extra={
        "model_sections": ("gdn", "mla"),
        "findings": findings,
        "derive": derive,
        "types_shape": smoke_of_kind,
        "profile_shape": profile_shape,
    },
)
