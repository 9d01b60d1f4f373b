"""``attention.decode_graph`` (Metrale's decode CUDA graph).

==========================  ======================  =======  =====================================
path                        levers (default)        variant  chosen when
==========================  ======================  =======  =====================================
attention.decode_graph      ep_graphs (off),        eager    ms_profile on; or lora_eager on with
                            gdn_decode_graph (off),          a LoRA pool loaded; or a communicator
                            ms_profile (off),                present and neither ep_graphs nor
                            lora_eager (off)                 gdn_decode_graph on
                                                    graph    otherwise
==========================  ======================  =======  =====================================

Whether an expert-parallel communicator is present and whether a LoRA pool
is loaded are facts of the serving process, not levers: the shapes carry
them (``communicator``, ``lora_pool``), so ``select()`` reads them and every
record's shape states them. The step is the GDN decode of every GDN layer
and the paged decode attention of every attention layer
(``_step``); ``graph`` replays it as one CUDA graph, ``eager``
launches its kernels one by one. Both write the same bits (the graph runs
the same kernels on the same buffers): on a GPU each record's ``findings``
say whether a replay and an eager step from the same state agreed bit for
bit and give both times; in the simulator the graph variant runs eagerly
and its note says so.

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

from ...common.path import Shape, Tolerance, Traffic, Variant, check_preset, declared_path
from ...gdn.decode import spec as gdn_decode
from ...gdn.family import derive_slots
from ...selection.attention import DECODE_GRAPH as TABLE
from ..paged_decode import spec as attn_spec
from . import eager, graph, naive
from ._step import launches

# Qwen3-Next-80B-A3B: three GDN layers to one attention layer.
MODEL = dict(
    hk=16,
    hv=32,
    dk=128,
    dv=128,
    hq=16,
    hkv=2,
    d=256,
    gdn_layers=3,
    attn_layers=1,
    target_ctas=attn_spec.TARGET_CTAS,
    min_split_blocks=attn_spec.MIN_SPLIT_BLOCKS,
)
MODEL_CONTEXT = 8192


def _label(preset: str, d: Mapping[str, int]) -> str:
    facts = ("comm " if d["communicator"] else "") + ("lora " if d["lora_pool"] else "")
    return (
        f"{preset} {facts}n{d['n']} gdn{d['gdn_layers']}x(hv{d['hv']} {d['dk']}x{d['dv']}) "
        f"attn{d['attn_layers']}x(ctx{d['ctx']} hq{d['hq']} hkv{d['hkv']} d{d['d']})"
    )


def shapes(preset: str, model: Mapping[str, Any] | None) -> list[Shape]:
    check_preset(preset)
    if preset == "smoke":
        tiny = dict(
            n=2,
            slots=3,
            hk=1,
            hv=2,
            dk=8,
            dv=8,
            hq=2,
            hkv=1,
            d=8,
            ctx=21,
            gdn_layers=1,
            attn_layers=1,
            target_ctas=2,
            min_split_blocks=1,
        )
        dims = [dict(tiny, communicator=0, lora_pool=0), dict(tiny, communicator=1, lora_pool=1)]
    else:
        bench = dict((model or {}).get("bench") or {})
        dims = [
            dict(MODEL, n=int(n), slots=2 * int(n) + 1, ctx=MODEL_CONTEXT, communicator=c, lora_pool=0)
            for n in bench.get("decode_batches", attn_spec.DEFAULT_BATCHES)
            for c in (0, 1)
        ]
    return [Shape(_label(preset, d), d) for d in dims]


def profile_shape(shape: Shape) -> Shape:
    """The memory trace's shape: the model's rows (GDN state ``dk x dv``
    and value heads per key head; attention ``hq``, ``hkv``, ``d`` and the
    split policy), one sequence (three state slots) of ``ctx`` 33
    (``attention.paged_decode``'s lengths: 30 tokens, two KV blocks, the
    second partial), one key head, one layer of each kind, and
    the model shape's serving facts."""
    one_key_head = {"hk": 1, "hv": shape["hv"] // shape["hk"]}
    d = {**shape.dims, "n": 1, "slots": 3, "ctx": 33, "gdn_layers": 1, "attn_layers": 1, **one_key_head}
    return Shape(_label("profile", d), d)


def _gdn_shape(shape: Shape) -> Shape:
    return Shape(shape.label, {k: shape[k] for k in ("n", "slots", "hk", "hv", "dk", "dv")})


def _attn_shape(shape: Shape) -> Shape:
    keys = ("n", "ctx", "hq", "hkv", "d", "target_ctas", "min_split_blocks")
    return Shape(shape.label, {**{k: shape[k] for k in keys}, "hc_mult": 0, "max_decode_seqs": 1, "kv_fill": 0})


def make_inputs(shape: Shape, rng) -> dict:
    gs, as_ = _gdn_shape(shape), _attn_shape(shape)
    gdn = [gdn_decode.decode_inputs(gs, rng) for _ in range(shape["gdn_layers"])]
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
    return {
        "o": ((g, shape["n"], shape["hv"], shape["dv"]), "float32"),
        "state": ((g, shape["slots"], shape["hv"], shape["dk"], shape["dv"]), "float32"),
        "ao": ((a, shape["n"], shape["hq"], shape["d"]), "float32"),
    }


def traffic(shape: Shape) -> Traffic:
    g = gdn_decode.decode_traffic(_gdn_shape(shape))
    a = attn_spec.pinned_traffic(_attn_shape(shape))
    lg, la = shape["gdn_layers"], shape["attn_layers"]
    return Traffic(
        lg * g.bytes_read + la * a.bytes_read, lg * g.bytes_written + la * a.bytes_written, lg * g.flops + la * a.flops
    )


TOL = Tolerance(rel=5e-4, abs_of_max=1e-4)
SIM_NOTE = "simulator: no CUDA graphs here, the graph variant launched its kernels eagerly"
TIMED_STEPS = 20


def clone(b: Mapping[str, Any], cuda) -> dict:
    """Device copies of the buffers ``b`` (a step run on them leaves ``b`` as it was)."""
    out = {}
    for name, arr in b.items():
        copy = cuda.device_array(arr.shape, arr.dtype)
        copy.copy_to_device(arr)
        out[name] = copy
    return out


def differing(names, a: Mapping[str, Any], b: Mapping[str, Any]) -> list[str]:
    """Of the outputs ``names``, those whose bits differ between the device buffers ``a`` and ``b``."""
    bits = lambda bufs, name: bufs[name].copy_to_host().view(np.uint32)  # noqa: E731
    return [name for name in names if not np.array_equal(bits(a, name), bits(b, name))]


def _median_us(fn, stream, cuda, steps: int = TIMED_STEPS) -> float:
    times = []
    for _ in range(steps):
        start, end = cuda.event(), cuda.event()
        start.record(stream)
        fn()
        end.record(stream)
        end.synchronize()
        times.append(cuda.event_elapsed_time(start, end) * 1e3)
    return float(f"{float(np.median(times)):.4g}")


def findings(variant: str, shape, launch, bufs, cuda, on_gpu: bool = False) -> dict:
    """The record's ``findings``: the serving facts select() read, whether
    the step ran as a graph, and on a GPU (graph variant) whether a replay
    equals an eager step from the same state bit for bit, with both
    times (CUDA events on the step's stream, median of 20)."""
    out = {
        "communicator": bool(shape["communicator"]),
        "lora_pool": bool(shape["lora_pool"]),
        "captured": bool(getattr(launch, "captured", False)),
    }
    if not on_gpu:
        if variant == "graph":
            out["note"] = SIM_NOTE
        return out
    if variant != "graph":
        return out
    start = clone(bufs, cuda)
    eager = clone(start, cuda)
    launch.step(eager, launch.stream)
    for name in graph.WRITTEN:
        bufs[name].copy_to_device(start[name])
    launch(bufs)  # a replay: the graph was captured on these buffers by the check
    cuda.synchronize()
    differ = differing(outputs(shape), eager, bufs)
    out.update(
        identical=not differ,
        differing=differ,
        eager_us=_median_us(lambda: launch.step(eager, launch.stream), launch.stream, cuda),
        graph_us=_median_us(lambda: launch(bufs), launch.stream, cuda),
    )
    if differ:
        out["note"] = f"graph replay differs from the eager step in {', '.join(differ)}"
    return out


PATH = declared_path(
    TABLE,
    {
        v.name: v
        for v in (
            Variant(graph.NAME, graph.SUMMARY, graph.build, launches=1),
            Variant(eager.NAME, eager.SUMMARY, eager.build, launches=launches),
        )
    },
    shapes=shapes,
    make_inputs=make_inputs,
    outputs=outputs,
    reference=naive.reference,
    traffic=traffic,
    tolerance=TOL,
    notes="Launch-bound at small batches: the graph turns the step's launches into one.",
    extra={
        "model_sections": ("gdn", "attention"),
        "findings": findings,
        "derive": derive_slots,
        "profile_shape": profile_shape,
    },
)
