"""What the W4A16 family's four paths share: the tolerance, the default
model and its FFN sizes, and the input makers."""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from ..common.int4 import random_w4
from ..common.path import KernelPath, Shape, Tolerance, Variant, declared_path
from ..selection.rules import Table

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


def ffn_sizes(model: Mapping[str, Any] | None) -> tuple[int, list[tuple[str, int]], list[int]]:
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
        return ffn_sizes(DEFAULT_MODEL)  # which has both
    merged: dict[int, list[str]] = {}
    for tag, inter in found:
        merged.setdefault(inter, []).append(tag)
    ffns = [("/".join(tags), inter) for inter, tags in merged.items()]
    rows = (model.get("bench") or {}).get("gemm_rows") or DEFAULT_GEMM_ROWS
    return int(hidden), ffns, [int(r) for r in rows]


def mk(label: str, **dims: int) -> Shape:
    return Shape(label, dims)


def fp16_normal(rng: np.random.Generator, shape) -> np.ndarray:
    return rng.standard_normal(shape, dtype=np.float32).astype(np.float16)


def w4(rng: np.random.Generator, n: int, k: int, qname: str, sname: str) -> dict:
    """One packed ``n x k`` weight as ``{qname: qweight, sname: scales}``."""
    qweight, scales = random_w4(rng, n, k)
    return {qname: qweight, sname: scales}


def args(inputs: dict, *names: str) -> list:
    return [inputs[n] for n in names]


def declare(table: Table, variants: list[Variant], **fields) -> KernelPath:
    """The path ``table`` decides, with the family's tolerance; ``variants``
    in the order the bench lists them."""
    if tuple(v.name for v in variants) != table.variants:
        raise ValueError(f"{table.path}: variants {[v.name for v in variants]} are not the table's {table.variants}")
    return declared_path(table, {v.name: v for v in variants}, tolerance=TOLERANCE, **fields)
