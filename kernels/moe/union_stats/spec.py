"""``moe.union_stats``: top-k routing of a batch, with or without counting the distinct
experts it touches (the count binds into the outputs)."""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from ...common.path import Shape, Tolerance, Traffic, check_preset, declared_path
from ...selection.moe import UNION_STATS as TABLE
from .. import _builds, naive, routing
from .. import family as F


def union_shapes(preset: str, model) -> list[Shape]:
    if preset == "smoke":
        return [F.shape_of(dict(rows=5, experts=8, top_k=2))]
    check_preset(preset)
    dims, decode, prefill = F.sizes(model)
    return [F.shape_of(dict(rows=r, experts=dims["experts"], top_k=dims["top_k"])) for r in (*decode, *prefill)]


def union_profile_shape(shape: Shape) -> Shape:
    """The memory trace's shape: the model's experts (each row's logits,
    their length and stride) and ``k``, four rows (four top-k blocks)."""
    d = {**shape.dims, "rows": 4}
    return Shape(f"profile rows{d['rows']} e{d['experts']} k{d['top_k']}", d)


def union_inputs(shape: Shape, rng: np.random.Generator) -> dict:
    """Router logits (FP32), spread about 2."""
    return {"logits": (rng.standard_normal((shape["rows"], shape["experts"])) * 2).astype(np.float32)}


def union_outputs(shape: Shape) -> dict:
    out = F.topk_outputs(shape)
    if shape.get("stats", 0):
        out.update(union=((1,), "int32"), expert_rows=((shape["experts"],), "int32"))
    return out


def union_reference(shape: Shape, inputs: dict) -> dict:
    logits = np.asarray(inputs["logits"], np.float64)
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    ids = np.argsort(-p, axis=1, kind="stable")[:, : shape["top_k"]]
    w = np.take_along_axis(p, ids, axis=1)
    out = {"ids": ids, "weights": w / w.sum(axis=1, keepdims=True)}
    if shape.get("stats", 0):
        n, rows = naive.naive_union(ids, shape["experts"])
        out.update(union=np.array([n]), expert_rows=rows)
    return out


def union_align(shape: Shape, inputs: dict, got: dict, ref: dict):
    got = dict(got)
    for name in ("union", "expert_rows"):  # never written: the poison is all ones, -1
        if name in got:
            got[name] = np.where(got[name] == -1, np.nan, got[name].astype(np.float64))
    return routing.align(inputs["logits"], shape["top_k"], got, ref)


def union_bind(levers: Mapping[str, Any], shape: Shape, engine: str) -> Shape:
    return Shape(shape.label, {**shape.dims, "stats": int(bool(levers.get("moe_union_stats")))})


def union_traffic(shape: Shape) -> Traffic:
    r, e, k = shape["rows"], shape["experts"], shape["top_k"]
    stats = shape.get("stats", 0)
    return Traffic(
        bytes_read=4 * r * e + (4 * r * k if stats else 0),
        bytes_written=8 * r * k + (4 * e + 4 if stats else 0),
        flops=4 * r * e,
    )


# Counts are integers: a miscount of one is over the bound (1e-4 of the
# largest count); the weights are float32 softmaxes of the same logits.
UNION_TOLERANCE = Tolerance(rel=1e-5, abs_of_max=1e-4)

PATH = declared_path(
    TABLE,
    F.variants(
        {
            "off": dict(summary="the top-k kernel alone", build=_builds.union(False), launches=1),
            "on": dict(
                summary="the top-k kernel, then the union count (shared-memory atomics, one block)",
                build=_builds.union(True),
                launches=2,
            ),
        }
    ),
    shapes=union_shapes,
    make_inputs=union_inputs,
    outputs=union_outputs,
    reference=union_reference,
    traffic=union_traffic,
    tolerance=UNION_TOLERANCE,
    bind=union_bind,
    notes="the counting kernel's cost is the diagnostic's: on against off at the same shape",
    extra={"align": union_align, "model_sections": ("moe",), "profile_shape": union_profile_shape},
)
