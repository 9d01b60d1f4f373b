"""Shapes, seeded inputs, outputs, references and traffic of the two
``mamba2.*`` paths (declared in ``__init__``).

Scan inputs (fresh draws per call), as a trained Mamba2 layer sees them
after its in-projection and causal conv:

* ``x [T, H, P]`` and ``B``, ``C [T, G, N]``: N(0, 1) in **fp16** (the
  engine's activations; the reference reads the same fp16 values);
* ``dt_raw [T, H]`` fp32 ~ 0.5 N(0, 1), ``dt_bias [H]`` the inverse
  softplus of steps log-uniform in [0.001, 0.1] (Mamba2's initialisation);
* ``A [H]`` = -U(1, 16) (its ``-exp(A_log)`` range), ``D [H]`` ~ U(0.5, 1.5);
* ``state [H, P, N]`` fp32 ~ 0.1 N(0, 1): a state carried in from a
  previous call, updated in place (the final state is an output);
* ``y [T, H, P]`` fp32, so the check sees the scan's error, not the
  output's rounding.

Shapes: ``model`` from a recipe's ``[model.mamba2]`` and
``[model.bench].prefill_tokens`` (Nemotron-H-8B's when absent); ``smoke``
tiny and odd: 2 groups, head dim 8, state 16, prompts of 37 and 13 tokens
in chunks of 16 and 8.
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from ..common.path import Shape, Traffic, check_preset
from . import naive

F16, F32 = 2, 4

# Nemotron-H-8B, the fallback when a recipe has no [model.mamba2].
NEMOTRON_H_8B = {"hidden": 4096, "heads": 128, "head_dim": 64, "state": 128, "groups": 8, "conv_width": 4,
                 "chunk": 128}
NEMOTRON_H_TOKENS = (512, 4096)



def _model(model: Mapping[str, Any] | None) -> tuple[dict, list[int], int]:
    """(the Mamba2 sizes, prompt lengths, hidden size) of a recipe's model
    with a ``[model.mamba2]`` table, else Nemotron-H-8B's."""
    model = model or {}
    if not model.get("mamba2"):
        return dict(NEMOTRON_H_8B), list(NEMOTRON_H_TOKENS), NEMOTRON_H_8B["hidden"]
    m2 = {**NEMOTRON_H_8B, **dict(model["mamba2"])}
    tokens = (model.get("bench") or {}).get("prefill_tokens") or NEMOTRON_H_TOKENS
    return m2, [int(t) for t in tokens], int(model.get("hidden") or NEMOTRON_H_8B["hidden"])


# ----------------------------------------------------------------- scan

def scan_label(preset: str, d: Mapping[str, int]) -> str:
    return f"{preset} t{d['t']} h{d['h']} p{d['p']} n{d['n']} g{d['g']} c{d['chunk']}"


def scan_shapes(preset: str, model: Mapping[str, Any] | None) -> list[Shape]:
    check_preset(preset)
    if preset == "smoke":
        dims = [dict(t=37, h=4, p=8, n=16, g=2, chunk=16), dict(t=13, h=2, p=8, n=16, g=2, chunk=8)]
    else:
        m2, tokens, _ = _model(model)
        dims = [dict(t=t, h=int(m2["heads"]), p=int(m2["head_dim"]), n=int(m2["state"]), g=int(m2["groups"]),
                     chunk=int(m2["chunk"])) for t in tokens]
    return [Shape(scan_label(preset, d), d) for d in dims]


def _dt_bias(rng: np.random.Generator, h: int) -> np.ndarray:
    dt = np.exp(rng.uniform(np.log(1e-3), np.log(1e-1), h))
    return (dt + np.log(-np.expm1(-dt))).astype(np.float32)  # softplus^-1(dt)


def scan_inputs(shape: Shape, rng: np.random.Generator) -> dict:
    t, h, p, n, g = (shape[k] for k in ("t", "h", "p", "n", "g"))
    f16 = lambda *s: rng.standard_normal(s, dtype=np.float32).astype(np.float16)  # noqa: E731
    return {
        "x": f16(t, h, p), "B": f16(t, g, n), "C": f16(t, g, n),
        "dt_raw": (0.5 * rng.standard_normal((t, h))).astype(np.float32),
        "dt_bias": _dt_bias(rng, h),
        "A": (-rng.uniform(1.0, 16.0, h)).astype(np.float32),
        "D": rng.uniform(0.5, 1.5, h).astype(np.float32),
        "state": (0.1 * rng.standard_normal((h, p, n))).astype(np.float32),
    }


def scan_outputs(shape: Shape) -> dict:
    t, h, p, n = (shape[k] for k in ("t", "h", "p", "n"))
    return {"y": ((t, h, p), "float32"), "state": ((h, p, n), "float32")}


SCAN_ARGS = ("x", "dt_raw", "dt_bias", "A", "B", "C", "D", "state")


def scan_reference(shape: Shape, inputs: dict) -> dict:
    y, state = naive.naive_mamba2_scan(*[inputs[a] for a in SCAN_ARGS])
    return {"y": y, "state": state}


def _scan_bytes(shape: Shape) -> tuple[int, int]:
    t, h, p, n, g = (shape[k] for k in ("t", "h", "p", "n", "g"))
    read = F16 * (t * h * p + 2 * t * g * n) + F32 * (2 * t * h + 3 * h) + F32 * h * p * n
    written = F32 * t * h * p + F32 * h * p * n
    return read, written


def scan_flops(shape: Shape) -> int:
    """The recurrence's: per token and state element a decay, an input and
    an output term (6 flops)."""
    t, h, p, n = (shape[k] for k in ("t", "h", "p", "n"))
    return 6 * t * h * p * n


def scan_traffic(shape: Shape) -> Traffic:
    """Inputs and outputs once, the state read and written once."""
    read, written = _scan_bytes(shape)
    return Traffic(bytes_read=read, bytes_written=written, flops=scan_flops(shape))


def sequential_traffic(shape: Shape) -> Traffic:
    """The state row read and written at every token, from global memory."""
    t, h, p, n = (shape[k] for k in ("t", "h", "p", "n"))
    read, written = _scan_bytes(shape)
    round_trip = F32 * h * p * n * (t - 1)
    return Traffic(bytes_read=read + round_trip, bytes_written=written + round_trip, flops=scan_flops(shape))


def ssd_traffic(shape: Shape) -> Traffic:
    """The chunked form's work and scratch: per chunk of ``Q`` the ``C.B``
    block (``Q^2 N / 2`` per head, 2 flops each) and its product with
    ``x`` (``Q^2 P / 2``), the chunk state (``Q P N``) and its read-out
    (``Q P N``); the chunk states written, passed (read and written) and
    read back, and ``cum``/``dt`` written and read."""
    t, h, p, n, q = (shape[k] for k in ("t", "h", "p", "n", "chunk"))
    nc = -(-t // q)
    read, written = _scan_bytes(shape)
    states = F32 * nc * h * p * n
    flops = h * (nc * q * q * (n + p) + 4 * t * p * n) + 3 * t * h * p
    return Traffic(bytes_read=read + 2 * states + F32 * 2 * h * t, bytes_written=written + 2 * states + F32 * 2 * h * t,
                   flops=flops)


# ----------------------------------------------------------------- projections

def proj_label(preset: str, d: Mapping[str, int]) -> str:
    return f"{preset} {d['proj']} m{d['m']} n{d['n']} k{d['k']}"


PROJ_NAMES = {0: "in_proj", 1: "out_proj"}


def proj_shapes(preset: str, model: Mapping[str, Any] | None) -> list[Shape]:
    """In-projection (``hidden -> 2 H P + 2 G N + H``: z, x, B, C and dt)
    and out-projection (``H P -> hidden``) at each prompt length. The FP8
    activation buffer (``fp8_act``, bytes) is sized for the longest prompt
    at the widest K; the W4A4 kernels are loaded (``w4a4_loaded``). Smoke
    shapes lower the W4A4 row threshold to 16 (``w4a4_min_rows``, in the
    label) so that the simulator runs that arm."""
    check_preset(preset)
    if preset == "smoke":
        dims = [dict(m=19, n=26, k=160, out=0, w4a4_min_rows=16), dict(m=5, n=19, k=256, out=1, w4a4_min_rows=16)]
    else:
        m2, tokens, hidden = _model(model)
        h, p, g, n = (int(m2[k]) for k in ("heads", "head_dim", "groups", "state"))
        inner = h * p
        dims = [dict(m=t, n=n_, k=k_, out=o) for t in tokens
                for o, (n_, k_) in enumerate(((2 * inner + 2 * g * n + h, hidden), (hidden, inner)))]
    fp8 = max(d["m"] for d in dims) * max(d["k"] for d in dims)
    out = []
    for d in dims:
        d = {**d, "w4a4_loaded": 1, "fp8_act": fp8}
        label = proj_label(preset, {**d, "proj": PROJ_NAMES[d["out"]]})
        if "w4a4_min_rows" in d:
            label += f" w4a4_from{d['w4a4_min_rows']}"
        out.append(Shape(label, d))
    return out
