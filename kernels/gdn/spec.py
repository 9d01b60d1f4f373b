"""Shapes, seeded inputs, outputs, references, traffic and variant choice
for the four ``gdn.*`` kernel paths (declared in ``__init__``).

Inputs (every path; fresh draws per ``make_inputs`` call):

* ``q``, ``k``, ``v`` ~ N(0, 1) in **fp16** (engines keep activations in
  16 bits; fp16 rather than bf16 because Numba reads fp16 natively). The
  references read the same fp16 values, so only the kernels' fp32
  arithmetic is under test.
* ``g`` fp32 = ``-rate_h * softplus(N(0,1)) / ln 2``: per-token log-decay,
  always < 0, with per-head rates log-uniform in [0.02, 0.3] (a trained
  model's mix of slow and fast heads). Mild enough that a state carried over
  a smoke-sized sequence still matters.
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
from typing import Any, Mapping

import numpy as np

from .. import selection
from ..common.path import Shape, Traffic, check_preset
from . import naive
from ._chunk import chunk_flops, chunk_tc_flops
from .conv_fused import DEFAULT_FUSED_HEAD_DIM, eligible

F16, F32, I32 = 2, 4, 4

# Qwen3-Next-80B-A3B, the fallback when a recipe has no [model.gdn]/[model.bench].
QWEN3_NEXT_GDN = {"qk_heads": 16, "v_heads": 32, "head_dim_k": 128, "head_dim_v": 128,
                  "conv_width": 4, "chunk": 64}
QWEN3_NEXT_BENCH = {"prefill_tokens": [1024, 4096], "verify_tokens": [17, 5],
                    "decode_batches": [1, 8, 32]}


# ----------------------------------------------------------------- shapes

def _model(model: Mapping[str, Any] | None) -> tuple[dict, dict]:
    model = model or {}
    gdn = {**QWEN3_NEXT_GDN, **dict(model.get("gdn") or {})}
    bench = {**QWEN3_NEXT_BENCH, **dict(model.get("bench") or {})}
    return gdn, bench


def _heads(gdn: dict) -> dict:
    return {"hk": int(gdn["qk_heads"]), "hv": int(gdn["v_heads"]),
            "dk": int(gdn["head_dim_k"]), "dv": int(gdn["head_dim_v"])}


def _hd(d: Mapping[str, int]) -> str:
    dims = f"d{d['dk']}" if d["dk"] == d["dv"] else f"dk{d['dk']} dv{d['dv']}"
    return f"hk{d['hk']} hv{d['hv']} {dims}"



def prefill_shapes(preset: str, model: Mapping[str, Any] | None) -> list[Shape]:
    check_preset(preset)
    if preset == "smoke":
        dims = [dict(t=37, chunk=16, hk=2, hv=4, dk=8, dv=8),
                dict(t=23, chunk=8, hk=3, hv=3, dk=12, dv=12)]
    else:
        gdn, bench = _model(model)
        dims = [dict(t=int(t), chunk=int(gdn["chunk"]), **_heads(gdn)) for t in bench["prefill_tokens"]]
    return [Shape(f"{preset} t{d['t']} {_hd(d)} c{d['chunk']}", d) for d in dims]


def verify_shapes(preset: str, model: Mapping[str, Any] | None) -> list[Shape]:
    check_preset(preset)
    if preset == "smoke":
        dims = [dict(t=17, hk=2, hv=4, dk=12, dv=12), dict(t=5, hk=2, hv=4, dk=8, dv=8),
                dict(t=17, hk=3, hv=3, dk=8, dv=8)]
    else:
        gdn, bench = _model(model)
        dims = [dict(t=int(t), **_heads(gdn)) for t in bench["verify_tokens"]]
    return [Shape(f"{preset} t{d['t']} {_hd(d)}", d) for d in dims]


def decode_shapes(preset: str, model: Mapping[str, Any] | None) -> list[Shape]:
    check_preset(preset)
    if preset == "smoke":
        dims = [dict(n=1, slots=3, hk=2, hv=4, dk=8, dv=8), dict(n=3, slots=5, hk=2, hv=4, dk=12, dv=12),
                dict(n=3, slots=4, hk=3, hv=3, dk=8, dv=8)]
    else:
        gdn, bench = _model(model)
        dims = [dict(n=int(n), slots=2 * int(n) + 1, **_heads(gdn)) for n in bench["decode_batches"]]
    return [Shape(f"{preset} n{d['n']} {_hd(d)}", d) for d in dims]


def fused_conv_shapes(preset: str, model: Mapping[str, Any] | None) -> list[Shape]:
    """Smoke shapes carry ``fused_head_dim`` (the head dim the fused kernel
    is eligible at, 128 at model shapes) equal to their own tiny head dim
    where the fused kernel should apply: d = 128 is too slow to simulate."""
    check_preset(preset)
    if preset == "smoke":
        dims = [dict(n=1, slots=2, hk=2, hv=4, dk=12, dv=12, conv_width=4, fused_head_dim=12),
                dict(n=3, slots=5, hk=2, hv=4, dk=12, dv=12, conv_width=4, fused_head_dim=12),
                dict(n=3, slots=4, hk=3, hv=3, dk=8, dv=8, conv_width=4, fused_head_dim=8)]
    else:
        gdn, bench = _model(model)
        dims = [dict(n=int(n), slots=2 * int(n) + 1, conv_width=int(gdn["conv_width"]), **_heads(gdn))
                for n in bench["decode_batches"]]
    out = []
    for d in dims:
        fhd = d.get("fused_head_dim", DEFAULT_FUSED_HEAD_DIM)
        tag = f" fused_hd{fhd}" if fhd != DEFAULT_FUSED_HEAD_DIM else ""
        out.append(Shape(f"{preset} n{d['n']} {_hd(d)} w{d['conv_width']}{tag}", d))
    return out


# ----------------------------------------------------------------- inputs

def _f16(rng, shape) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float16)


def _gates(rng, t: int, hv: int) -> tuple[np.ndarray, np.ndarray]:
    rate = np.exp(rng.uniform(math.log(0.02), math.log(0.3), hv))
    g = -rate * np.logaddexp(0.0, rng.standard_normal((t, hv))) / math.log(2.0)
    beta = 1.0 / (1.0 + np.exp(-rng.standard_normal((t, hv))))
    return g.astype(np.float32), beta.astype(np.float32)


def _state(rng, shape) -> np.ndarray:
    return (0.1 * rng.standard_normal(shape)).astype(np.float32)


def token_inputs(shape: Shape, rng) -> dict:
    """prefill / verify: ``q, k [T, Hk, dk]``, ``v [T, Hv, dv]``, ``g, beta
    [T, Hv]``, ``state [Hv, dk, dv]``."""
    t, hk, hv, dk, dv = shape["t"], shape["hk"], shape["hv"], shape["dk"], shape["dv"]
    g, beta = _gates(rng, t, hv)
    return {"q": _f16(rng, (t, hk, dk)), "k": _f16(rng, (t, hk, dk)), "v": _f16(rng, (t, hv, dv)),
            "g": g, "beta": beta, "state": _state(rng, (hv, dk, dv))}


def _slots(rng, n: int, pool: int) -> np.ndarray:
    if pool < n:
        raise ValueError(f"a pool of {pool} state slots cannot hold {n} sequences")
    return rng.permutation(pool)[:n].astype(np.int32)


def decode_inputs(shape: Shape, rng) -> dict:
    """``q, k [N, Hk, dk]``, ``v [N, Hv, dv]``, ``g, beta [N, Hv]``, ``slots
    [N]`` (distinct, scattered over the pool), ``state [slots, Hv, dk, dv]``."""
    n, hk, hv, dk, dv = shape["n"], shape["hk"], shape["hv"], shape["dk"], shape["dv"]
    g, beta = _gates(rng, n, hv)
    return {"q": _f16(rng, (n, hk, dk)), "k": _f16(rng, (n, hk, dk)), "v": _f16(rng, (n, hv, dv)),
            "g": g, "beta": beta, "slots": _slots(rng, n, shape["slots"]),
            "state": _state(rng, (shape["slots"], hv, dk, dv))}


def conv_channels(shape: Shape) -> int:
    return 2 * shape["hk"] * shape["dk"] + shape["hv"] * shape["dv"]


def fused_conv_inputs(shape: Shape, rng) -> dict:
    """``x [N, C]`` (C = 2 Hk dk + Hv dv, channels ``[q | k | v]``),
    ``conv_weight [C, W]``, ``conv_state [slots, W-1, C]`` (fp16), ``g,
    beta [N, Hv]``, ``z [N, Hv, dv]`` (fp16), ``norm_weight [dv]``,
    ``slots [N]``, ``state [slots, Hv, dk, dv]``."""
    n, hv, dv, w = shape["n"], shape["hv"], shape["dv"], shape["conv_width"]
    c = conv_channels(shape)
    g, beta = _gates(rng, n, hv)
    return {
        "x": _f16(rng, (n, c)),
        "conv_weight": (rng.standard_normal((c, w)) / math.sqrt(w)).astype(np.float16),
        "conv_state": _f16(rng, (shape["slots"], w - 1, c)),
        "g": g, "beta": beta,
        "z": _f16(rng, (n, hv, dv)),
        "norm_weight": (1.0 + 0.1 * rng.standard_normal(dv)).astype(np.float32),
        "slots": _slots(rng, n, shape["slots"]),
        "state": _state(rng, (shape["slots"], hv, shape["dk"], dv)),
    }


# ---------------------------------------------------- outputs, references

def token_outputs(shape: Shape):
    return {"o": ((shape["t"], shape["hv"], shape["dv"]), "float32"),
            "state": ((shape["hv"], shape["dk"], shape["dv"]), "float32")}


def decode_outputs(shape: Shape):
    return {"o": ((shape["n"], shape["hv"], shape["dv"]), "float32"),
            "state": ((shape["slots"], shape["hv"], shape["dk"], shape["dv"]), "float32")}


def fused_conv_outputs(shape: Shape):
    return {"out": ((shape["n"], shape["hv"], shape["dv"]), "float32"),
            "conv_state": ((shape["slots"], shape["conv_width"] - 1, conv_channels(shape)), "float16"),
            "state": ((shape["slots"], shape["hv"], shape["dk"], shape["dv"]), "float32")}


def token_reference(shape: Shape, x: dict) -> dict:
    o, s = naive.naive_recurrent(x["q"], x["k"], x["v"], x["g"], x["beta"], x["state"])
    return {"o": o, "state": s}


def decode_reference(shape: Shape, x: dict) -> dict:
    o, pool = naive.naive_decode(x["q"], x["k"], x["v"], x["g"], x["beta"], x["slots"], x["state"])
    return {"o": o, "state": pool}


def fused_conv_reference(shape: Shape, x: dict) -> dict:
    out, cs, pool = naive.naive_fused_conv(
        x["x"], x["conv_weight"], x["conv_state"], x["g"], x["beta"], x["z"], x["norm_weight"],
        x["slots"], x["state"], shape["hk"], shape["hv"], shape["dk"], shape["dv"])
    return {"out": out, "conv_state": cs, "state": pool}


# ----------------------------------------------------------------- traffic

def state_bytes(shape: Shape) -> int:
    """One sequence's GDN state for one layer: ``Hv * dk * dv * 4``."""
    return shape["hv"] * shape["dk"] * shape["dv"] * F32


def step_flops(dk: int, dv: int) -> int:
    """One token, one value head, as the recurrent kernels do it: S^T k and
    S^T q (2 dk dv each), a S + k delta (3 dk dv), the norms (6 dk)."""
    return 7 * dk * dv + 6 * dk


def _token_bytes(shape: Shape) -> tuple[int, int]:
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


def _chunked(r: int, w: int, t: int, C: int, shape: Shape, extra_flops: int = 0) -> Traffic:
    hv, dk, dv = shape["hv"], shape["dk"], shape["dv"]
    return Traffic(r, w, chunked_flops(t, C, hv, dk, dv) + extra_flops, tc_flops=chunked_tc_flops(t, C, hv, dk))


def prefill_traffic(shape: Shape) -> Traffic:
    r, w = _token_bytes(shape)
    return _chunked(r, w, shape["t"], shape["chunk"], shape)


def prefill_global_traffic(shape: Shape) -> Traffic:
    """``regresident``'s bytes plus one state read and write per extra chunk."""
    base = prefill_traffic(shape)
    extra = (-(-shape["t"] // shape["chunk"]) - 1) * state_bytes(shape)
    return Traffic(base.bytes_read + extra, base.bytes_written + extra, base.flops, base.tc_flops)


def verify_traffic(shape: Shape) -> Traffic:  # wyn: one chunk of T
    r, w = _token_bytes(shape)
    return _chunked(r, w, shape["t"], shape["t"], shape)


def verify_wy17_traffic(shape: Shape) -> Traffic:
    r, w = _token_bytes(shape)
    hv, dk, dv = shape["hv"], shape["dk"], shape["dv"]
    return _chunked(r, w, 16, 16, shape, hv * (shape["t"] - 16) * step_flops(dk, dv))


def verify_recurrent_traffic(shape: Shape) -> Traffic:
    r, w = _token_bytes(shape)
    return Traffic(r, w, shape["t"] * shape["hv"] * step_flops(shape["dk"], shape["dv"]))


def verify_state_traffic(shape: Shape) -> dict:
    """State bytes of one verify call against ``T`` single-token decode steps
    (each of which reads and writes the whole state)."""
    s, t = state_bytes(shape), shape["t"]
    return {"verify_bytes": 2 * s, "single_steps_bytes": 2 * t * s, "saved_bytes": 2 * (t - 1) * s}


def decode_traffic(shape: Shape) -> Traffic:
    n, hk, hv, dk, dv = shape["n"], shape["hk"], shape["hv"], shape["dk"], shape["dv"]
    per = state_bytes(shape)
    read = n * (2 * hk * dk * F16 + hv * dv * F16 + 2 * hv * F32 + I32 + per)
    write = n * (hv * dv * F32 + per)
    return Traffic(read, write, n * hv * step_flops(dk, dv))


def fused_conv_traffic(shape: Shape) -> Traffic:
    n, hv, dk, dv, w = shape["n"], shape["hv"], shape["dk"], shape["dv"], shape["conv_width"]
    c, per = conv_channels(shape), state_bytes(shape)
    read = (n * (c * F16 + (w - 1) * c * F16 + 2 * hv * F32 + hv * dv * F16 + I32 + per)
            + c * w * F16 + dv * F32)
    write = n * ((w - 1) * c * F16 + hv * dv * F32 + per)
    flops = n * (c * (2 * w + 4) + hv * step_flops(dk, dv) + 8 * hv * dv)
    return Traffic(read, write, flops)


def fused_conv_separate_traffic(shape: Shape) -> Traffic:
    """The fused figure plus the intermediates: activations (``N*C`` fp32)
    and ``o`` (``N*Hv*dv`` fp32) written then read back, slots read twice more."""
    base = fused_conv_traffic(shape)
    n = shape["n"]
    inter = n * (conv_channels(shape) + shape["hv"] * shape["dv"]) * F32
    return Traffic(base.bytes_read + inter + 2 * n * I32, base.bytes_written + inter, base.flops)


# ------------------------------------------------------------------ select

# The decision tables live in ``leverctl_kernels.selection`` (plain data the
# lever commands read too); these are the tables' own ``select``.
select_prefill = selection.GDN_PREFILL.select
select_verify = selection.GDN_VERIFY.select
select_decode = selection.GDN_DECODE.select
select_fused_conv = selection.GDN_FUSED_CONV.select
