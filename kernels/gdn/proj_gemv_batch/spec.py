"""``gdn.proj_gemv_batch`` (Metrale): the
GDN layer's projections in a multi-sequence decode, ``Y[m, n] = X[m, k]
W[n, k]^T`` with ``m`` decode rows (one token per sequence), W4A16 weights
(``common.int4``), fp16 activations and outputs.

Qwen3-Next's GDN layer, from a recipe's ``hidden`` and ``[model.gdn]``
(its own sizes when absent): ``in_proj_qkvz`` (``hidden -> 2 Hk dk +
2 Hv dv``: q, k, v and the output gate z), ``in_proj_ba`` (``hidden ->
2 Hv``: beta and the decay's input) and ``out_proj`` (``Hv dv ->
hidden``), at decode batches of 1, 4 and 16 rows: the tier's domain, one
batch for each of its kernels and its largest. Smoke shapes: 3 and 5 rows,
a partial scale group, and a K past the 16-row kernel's 512-input chunk.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

import numpy as np

from ...common import weight_fit as fit
from ...common.int4 import packed_bytes, random_w4
from ...common.model_weights import WeightUse
from ...common.path import KernelPath, Shape, Tolerance, Traffic, check_preset
from ...selection.gdn import PROJ_GEMV_BATCH as TABLE
from ...w4a16.naive import naive_gemm
from .. import family
from ..family import QWEN3_NEXT_GDN
from . import batch4, batch16, per_row

QWEN3_NEXT_HIDDEN = 2048
DECODE_ROWS = (1, 4, 16)


def shapes(preset: str, model: Mapping[str, Any] | None) -> list[Shape]:
    check_preset(preset)
    if preset == "smoke":
        dims = [("qkvz", dict(m=3, n=9, k=264)), ("out", dict(m=5, n=7, k=520))]
    else:
        model = model or {}
        gdn = {**QWEN3_NEXT_GDN, **dict(model.get("gdn") or {})}
        hidden = int(model.get("hidden") or QWEN3_NEXT_HIDDEN) if model.get("gdn") else QWEN3_NEXT_HIDDEN
        hk, hv, dk, dv = (int(gdn[k]) for k in ("qk_heads", "v_heads", "head_dim_k", "head_dim_v"))
        projs = (("qkvz", 2 * hk * dk + 2 * hv * dv, hidden), ("ba", 2 * hv, hidden), ("out", hidden, hv * dv))
        dims = [(name, dict(m=m, n=n, k=k)) for m in DECODE_ROWS for name, n, k in projs]
    # The tier's kernel resolved (the table's other condition), stated in every record's shape.
    return [Shape(f"{preset} {name} m{d['m']} n{d['n']} k{d['k']}", {**d, "gemv_tier_loaded": 1}) for name, d in dims]


def profile_shape(shape: Shape) -> Shape:
    """The memory trace's shape: the model's row length ``k`` and decode
    rows ``m`` (which pick the tier), eight output rows."""
    n = min(8, shape["n"])
    d = {**shape.dims, "n": n}
    return Shape(f"profile m{d['m']} n{n} k{d['k']}", d)


def make_inputs(shape: Shape, rng: np.random.Generator) -> dict:
    m, n, k = shape["m"], shape["n"], shape["k"]
    qweight, scales = random_w4(rng, n, k)
    x = rng.standard_normal((m, k), dtype=np.float32).astype(np.float16)
    return {"x": x, "qweight": qweight, "scales": scales}


SMOKE_ROWS = 3  # the smoke shapes' first row count


def on_weights(path: KernelPath, tensors) -> KernelPath:
    """The projection on one GDN (linear-attention) matrix from a model
    file, ``ssm_in`` (Qwen3-Next's ``in_proj_qkvz`` or ``in_proj_ba``) or
    ``ssm_out`` (``out_proj``): ``n x k`` its own at the decode batches (3
    rows for smoke), its int4 weights made from the decoded values as the
    drawn weights are (the label says so)."""
    t = fit.only(tensors, path.name)
    n, k, encode = fit.int4_matrix(t, path.name)
    tag = fit.read_as([t], "int4", stored=False)

    def shapes_on_file(preset: str, model: Mapping[str, Any] | None) -> list[Shape]:
        check_preset(preset)
        rows = (SMOKE_ROWS,) if preset == "smoke" else DECODE_ROWS
        return [Shape(f"{preset} {tag} m{m} n{n} k{k}", dict(m=m, n=n, k=k, gemv_tier_loaded=1)) for m in rows]

    def inputs_on_file(shape: Shape, rng: np.random.Generator) -> dict:
        qweight, scales = encode()
        x = rng.standard_normal((shape["m"], k), dtype=np.float32).astype(np.float16)
        return {"x": x, "qweight": qweight, "scales": scales}

    return dataclasses.replace(path, shapes=shapes_on_file, make_inputs=inputs_on_file)


def outputs(shape: Shape) -> dict:
    return {"y": ((shape["m"], shape["n"]), "float16")}


def reference(shape: Shape, inputs: dict) -> dict:
    return {"y": naive_gemm(inputs["x"], inputs["qweight"], inputs["scales"])}


def traffic(shape: Shape, weight_reads: int = 1) -> Traffic:
    m, n, k = shape["m"], shape["n"], shape["k"]
    return Traffic(
        bytes_read=weight_reads * packed_bytes(n, k) + 2 * m * k, bytes_written=2 * m * n, flops=2 * m * n * k
    )


def per_row_traffic(shape: Shape) -> Traffic:
    """The weights read once per row."""
    return traffic(shape, weight_reads=shape["m"])


# The projections around the recurrence in a multi-sequence decode: W4A16
# GEMVs, held to the W4A16 family's bound (fp16 outputs of fp32 sums).
PATH = family.declare(
    TABLE,
    [
        family.variant(batch4),
        family.variant(batch16),
        family.variant(per_row, per_row_traffic, launches=per_row.launches),
    ],
    shapes=shapes,
    make_inputs=make_inputs,
    outputs=outputs,
    reference=reference,
    traffic=traffic,
    tolerance=Tolerance(rel=2e-3, abs_of_max=2e-3),
    notes="The batch tiers read the int4 weights once for all rows, per_row once per row. Memory-bound on "
    "the weights up to 3 rows; from 4 rows the tiers' FP32 FMAs bind: each weight byte feeds 4m flops "
    "(16 at m = 4, 64 at m = 16) against an H200 ridge of about 14 flop/B (67 TFLOP/s FP32 over "
    "4.8 TB/s), so batch16 at 16 rows is capped near 1 TB/s of weights by its design (an FFMA for every "
    "decoded weight and row), not by its loads.",
    extra={"profile_shape": profile_shape, "weights": WeightUse((("ssm_in",), ("ssm_out",)), on_weights)},
)
