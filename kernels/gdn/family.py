"""What the ``gdn.*`` paths share: the model's GDN sizes, the seeded inputs,
the token paths' outputs and reference, the state and FLOP counts, the
tolerances and the declaration helper.

Inputs (every path; fresh draws per ``make_inputs`` call):

* ``q``, ``k``, ``v`` ~ N(0, 1) in **fp16** (engines keep activations in
  16 bits; fp16 rather than bf16 because Numba reads fp16 natively). The
  references read the same fp16 values, so only the kernels' fp32
  arithmetic is under test.
* ``g`` fp32 = ``-rate_h * softplus(N(0,1))``: per-token natural-log decay,
  always < 0, in the convention the references and kernels apply
  (``exp(g)``, as FLA's kernels and Qwen3-Next's ``g = -A softplus(a +
  dt_bias)`` have it), with per-head rates log-uniform in [0.02, 0.3] (a
  trained model's mix of slow and fast heads: an assumed spread, not read
  from a checkpoint). Mild enough that a state carried over a smoke-sized
  sequence still matters.
* ``beta`` fp32 = ``sigmoid(N(0, 1))``, in (0, 1).
* states fp32 ~ 0.1 N(0, 1): small, like a state a few tokens in.
* outputs ``o``/``out`` are fp32 so the check sees kernel error, not output
  rounding (an engine writes 16-bit outputs: half those bytes).

Shapes: ``model`` reads the recipe's ``[model.gdn]`` and ``[model.bench]``
(Qwen3-Next-80B-A3B's values when absent); ``smoke`` is tiny and odd for
the CUDA simulator (~1 ms per simulated thread): head dims 8 and 12, 2 q/k
heads over 4 value heads and a 1:1 grouping, prefill chunks that do not
divide the sequence, verify T = 17 and 5, decode batches 1 and 3.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Mapping

import numpy as np

from ..common.path import KernelPath, Shape, Tolerance, Traffic, Variant, declared_path
from ..selection.rules import Table
from . import naive
from ._chunk import chunk_flops, chunk_tc_flops
from ._mma_qk import TC_DTYPE

F16, F32, I32 = 2, 4, 4

# Qwen3-Next-80B-A3B, the fallback when a recipe has no [model.gdn]/[model.bench].
QWEN3_NEXT_GDN = {"qk_heads": 16, "v_heads": 32, "head_dim_k": 128, "head_dim_v": 128, "conv_width": 4, "chunk": 64}
QWEN3_NEXT_BENCH = {
    "prefill_tokens": [1024, 4096],
    "verify_tokens": [17, 5],
    "decode_batches": [1, 8, 32],
    # Multi-stream prefill (gdn.prefill_multi_stream): the lengths of the
    # prompts prefilled together, one list a shape. An assumption (four equal
    # prompts; a ragged mix down to one token), not the model's configuration.
    "prefill_streams": [[1024, 1024, 1024, 1024], [2048, 1024, 512, 300, 129, 64, 17, 1]],
}


def model_dims(model: Mapping[str, Any] | None) -> tuple[dict, dict]:
    model = model or {}
    gdn = {**QWEN3_NEXT_GDN, **dict(model.get("gdn") or {})}
    bench = {**QWEN3_NEXT_BENCH, **dict(model.get("bench") or {})}
    return gdn, bench


def derive_slots(dims: Mapping[str, Any], given: set) -> dict:
    """A decode shape refined along ``n`` (``--axis n=...``) keeps a pool of
    ``2 n + 1`` state slots, as the presets make it, unless ``slots`` was
    given too."""
    out = dict(dims)
    if "n" in given and "slots" not in given:
        out["slots"] = 2 * int(out["n"]) + 1
    return out


def heads(gdn: dict) -> dict:
    return {
        "hk": int(gdn["qk_heads"]),
        "hv": int(gdn["v_heads"]),
        "dk": int(gdn["head_dim_k"]),
        "dv": int(gdn["head_dim_v"]),
    }


def heads_label(d: Mapping[str, int]) -> str:
    dims = f"d{d['dk']}" if d["dk"] == d["dv"] else f"dk{d['dk']} dv{d['dv']}"
    return f"hk{d['hk']} hv{d['hv']} {dims}"


def random_f16(rng, shape) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float16)


def random_gates(rng, t: int, hv: int) -> tuple[np.ndarray, np.ndarray]:
    rate = np.exp(rng.uniform(math.log(0.02), math.log(0.3), hv))
    g = -rate * np.logaddexp(0.0, rng.standard_normal((t, hv)))  # natural log: the kernels apply exp(g)
    beta = 1.0 / (1.0 + np.exp(-rng.standard_normal((t, hv))))
    return g.astype(np.float32), beta.astype(np.float32)


def random_state(rng, shape) -> np.ndarray:
    return (0.1 * rng.standard_normal(shape)).astype(np.float32)


def token_inputs(shape: Shape, rng) -> dict:
    """prefill / verify: ``q, k [T, Hk, dk]``, ``v [T, Hv, dv]``, ``g, beta
    [T, Hv]``, ``state [Hv, dk, dv]``."""
    t, hk, hv, dk, dv = shape["t"], shape["hk"], shape["hv"], shape["dk"], shape["dv"]
    g, beta = random_gates(rng, t, hv)
    return {
        "q": random_f16(rng, (t, hk, dk)),
        "k": random_f16(rng, (t, hk, dk)),
        "v": random_f16(rng, (t, hv, dv)),
        "g": g,
        "beta": beta,
        "state": random_state(rng, (hv, dk, dv)),
    }


def random_slots(rng, n: int, pool: int) -> np.ndarray:
    if pool < n:
        raise ValueError(f"a pool of {pool} state slots cannot hold {n} sequences")
    return rng.permutation(pool)[:n].astype(np.int32)


def token_outputs(shape: Shape):
    return {
        "o": ((shape["t"], shape["hv"], shape["dv"]), "float32"),
        "state": ((shape["hv"], shape["dk"], shape["dv"]), "float32"),
    }


def token_reference(shape: Shape, x: dict) -> dict:
    o, s = naive.naive_recurrent(x["q"], x["k"], x["v"], x["g"], x["beta"], x["state"])
    return {"o": o, "state": s}


def state_bytes(shape: Shape) -> int:
    """One sequence's GDN state for one layer: ``Hv * dk * dv * 4``."""
    return shape["hv"] * shape["dk"] * shape["dv"] * F32


def step_flops(dk: int, dv: int) -> int:
    """One token, one value head, as the recurrent kernels do it: S^T k and
    S^T q (2 dk dv each), a S + k delta (3 dk dv), the norms (6 dk)."""
    return 7 * dk * dv + 6 * dk


def token_bytes(shape: Shape) -> tuple[int, int]:
    t, hk, hv, dk, dv = shape["t"], shape["hk"], shape["hv"], shape["dk"], shape["dv"]
    read = t * (2 * hk * dk * F16 + hv * dv * F16 + 2 * hv * F32) + state_bytes(shape)
    write = t * hv * dv * F32 + state_bytes(shape)
    return read, write


def chunked_flops(t: int, C: int, hv: int, dk: int, dv: int) -> int:
    full, tail = divmod(t, C)
    return hv * (full * chunk_flops(C, dk, dv) + (chunk_flops(tail, dk, dv) if tail else 0))


def chunked_tc_flops(t: int, C: int, hv: int, dk: int) -> int:
    """Of :func:`chunked_flops`, the ``A`` and ``P`` products (tensor cores)."""
    full, tail = divmod(t, C)
    return hv * (full * chunk_tc_flops(C, dk) + (chunk_tc_flops(tail, dk) if tail else 0))


def chunked(r: int, w: int, t: int, C: int, shape: Shape, extra_flops: int = 0) -> Traffic:
    hv, dk, dv = shape["hv"], shape["dk"], shape["dv"]
    return Traffic(r, w, chunked_flops(t, C, hv, dk, dv) + extra_flops, tc_flops=chunked_tc_flops(t, C, hv, dk))


# fp32 kernels against a float64 reference on the same fp16 inputs. Prefill
# accumulates over thousands of tokens and chunk-sized solves: more room.
# The absolute bounds follow each output's scale (``o`` is ~0.05-0.1 at
# model shapes, the state ~1): no element may be off by more than 1e-4
# (prefill 2e-4) of its output's largest magnitude. Correct fp32 arithmetic
# stays near 1e-6 of it (the simulator's kernels at smoke shapes, a float32
# recurrence at model shapes); one token skipped or one head's decay wrong
# is orders of magnitude over it, though the norm-wise bound, diluted over
# every head and token, misses the first.
TOKEN_TOL = Tolerance(rel=5e-4, abs_of_max=1e-4)
PREFILL_TOL = Tolerance(rel=1e-3, abs_of_max=2e-4)


def variant(mod, traffic: Callable[[Shape], Traffic] | None = None, launches=1) -> Variant:
    """The variant a variant module declares (``NAME``, ``SUMMARY``,
    ``build``, and ``TENSOR_CORES`` where it has tensor-core products), with
    its own traffic where it moves more than the path's and its kernel
    launches per call where there are several."""
    return Variant(
        mod.NAME,
        mod.SUMMARY,
        mod.build,
        traffic=traffic,
        launches=launches,
        tensor_cores=getattr(mod, "TENSOR_CORES", None),
        tc_dtype=TC_DTYPE if getattr(mod, "TENSOR_CORES", None) else None,
    )


def declare(table: Table, variants: list[Variant], **fields) -> KernelPath:
    """The path ``table`` decides, ``variants`` in the order the bench lists
    them. A model without a ``[model.gdn]`` table (a dense one) has none of
    the family's paths."""
    fields["extra"] = {"model_sections": ("gdn",), **fields.get("extra", {})}
    return declared_path(table, {v.name: v for v in variants}, **fields)
