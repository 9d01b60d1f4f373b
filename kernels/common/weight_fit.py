"""Whether model tensors fit a path, and how a path on them says so: the
checks every ``WeightUse.apply`` makes (rank, a dimension's multiple, two
tensors that must agree) raise :class:`~.model_weights.WeightMismatch` with
one line naming the tensor, the dimension and what the path needs; the
label fragment names the tensors and what was re-encoded.

Imports no numpy at import time (paths are declared cheaply).
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Mapping, Sequence

from .model_weights import ModelTensor, WeightMismatch


def role(tensors: Mapping[str, ModelTensor], name: str, path: str) -> ModelTensor:
    """The tensor of role ``name``; a mismatch when the group lacks it."""
    t = tensors.get(name)
    if t is None:
        raise WeightMismatch(f"{path}: no {name} tensor among {sorted(tensors)}")
    return t


def dims(t: ModelTensor, rank: int, path: str) -> tuple[int, ...]:
    """``t``'s shape, which must have ``rank`` dimensions (2: ``[n, k]``,
    3: ``[experts, n, k]``)."""
    shape = tuple(int(x) for x in t.values.shape)
    if len(shape) != rank:
        want = "[n, k]" if rank == 2 else "[experts, n, k]"
        raise WeightMismatch(f"{t.name}: shape {list(shape)} has rank {len(shape)}; {path} needs {want}")
    if min(shape) <= 0:
        raise WeightMismatch(f"{t.name}: shape {list(shape)} is empty")
    return shape


def multiple(t: ModelTensor, what: str, value: int, of: int, why: str) -> None:
    """``value`` (dimension ``what`` of ``t``) must be a multiple of ``of``."""
    if value % of:
        raise WeightMismatch(f"{t.name}: {what}={value} is not a multiple of {of} ({why})")


def agree(a: ModelTensor, what_a: str, va: int, b: ModelTensor, what_b: str, vb: int, why: str) -> None:
    """Dimension ``what_a`` of ``a`` must equal ``what_b`` of ``b``."""
    if va != vb:
        raise WeightMismatch(f"{b.name}: {what_b}={vb} but {a.name} has {what_a}={va} ({why})")


def finite_in(t: ModelTensor, values: Any, fmt: str) -> Any:
    """``values`` (``t`` converted to ``fmt``), which must all be finite
    (a value past fp16's range, say, is not this path's model)."""
    import numpy as np

    if not np.all(np.isfinite(values)):
        raise WeightMismatch(
            f"{t.name}: holds values {fmt} cannot represent (largest |w| {np.abs(t.values).max():.4g})"
        )
    return values


def read_as(tensors: Sequence[ModelTensor], fmt: str, stored: bool | Sequence[bool] = False) -> str:
    """A label fragment: each tensor's name, its stored type and how the
    arm got ``fmt`` from it, read as stored or re-encoded from the decoded
    values (``"blk.0.ffn_gate.weight[Q4_K: int4 re-encoded] +
    blk.0.ffn_up.weight[NVFP4: int4 re-encoded]"``), as the MoE paths word
    theirs; ``stored`` for all of them or one flag per tensor."""
    flags = [stored] * len(tensors) if isinstance(stored, bool) else list(stored)
    return " + ".join(
        f"{t.name}[{t.stored}: {fmt} {'as stored' if s else 're-encoded'}]" for t, s in zip(tensors, flags)
    )


def int4_matrix(t: ModelTensor, path: str) -> tuple[int, int, Callable[[], tuple[Any, Any]]]:
    """``(n, k, encode)`` of a 2-D tensor a W4A16 path reads: ``k`` a
    multiple of 8 (eight int4 values a packed word); ``encode()`` is the
    engine's int4 weights made from the decoded values (``common.int4``'s
    symmetric round-to-nearest, an fp16 scale per 128 inputs), computed once
    on first use, as the drawn weights are: ``(qweight, scales)``."""
    from .int4 import PACK

    n, k = dims(t, 2, path)
    multiple(t, "k", k, PACK, f"{path} packs {PACK} int4 values a word")

    @functools.cache
    def encode() -> tuple[Any, Any]:
        from .int4 import quantize_w4

        return quantize_w4(t.values)

    return n, k, encode


def only(tensors: Mapping[str, ModelTensor], path: str) -> ModelTensor:
    """The one tensor of a one-role group."""
    if len(tensors) != 1:
        raise WeightMismatch(f"{path}: runs on one tensor at a time, given {sorted(tensors)}")
    return next(iter(tensors.values()))


def tokens(model: Mapping[str, Any] | None, key: str, default: Sequence[int]) -> list[int]:
    """The recipe's ``[model.bench]`` counts under ``key`` (``prefill_tokens``,
    ``decode_batches``, ``gemm_rows``), or ``default``."""
    return [int(v) for v in ((model or {}).get("bench") or {}).get(key) or default]
