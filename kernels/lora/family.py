"""What the two LoRA projection paths share: shapes, inputs, traffic, lever
binding and the swap check.

A shape is one projection with one adapter: ``m`` rows (tokens), ``n``
outputs, ``k`` inputs, rank ``r`` and ``alpha`` (scale ``s = alpha / r``);
``bind`` adds ``rotate`` (``lora_rotate``: whether a swap is permitted).
"""

from __future__ import annotations

import dataclasses
import time
import zlib
from typing import Any, Mapping

import numpy as np

from ..common import weight_fit as fit
from ..common.model_weights import WeightUse
from ..common.path import KernelPath, Shape, Tolerance, Traffic, Variant, check_preset, declared_path
from . import naive
from ._adapter import SwapRefused
from .naive import scale

# Qwen3-8B (recipes/qwen3-8b.toml) when the recipe gives no sizes.
DEFAULT_HIDDEN = 4096
DEFAULT_INTERMEDIATE = 12288
RANKS = (16, 64)
ROWS = (1, 8, 512)  # decode of one and of eight sequences, a prefill of 512 tokens
ALPHA_PER_RANK = 2  # alpha = 2 r: s = 2, the common LoRA setting

# fp32 sums and an fp16 output: ~2^-11 per element. The merged weights are
# rounded to fp16 once more (~2^-12 of the output in norm). Dropping the
# adapter, or using last adapter's, is off by ~30 % of the output.
TOLERANCE = Tolerance(rel=2e-3, abs_of_max=3e-3)

# Tiny and odd: K ends mid-warp, m = 9 crosses a row group (8), ranks 3 and 2.
_SMOKE = (dict(m=3, n=13, k=37, r=3, alpha=4), dict(m=9, n=6, k=70, r=2, alpha=3))

SWAP_TIMES = 20  # swaps timed (on a GPU) for the record's swap_ms, median


def _label(d: Mapping[str, int]) -> str:
    return f"m{d['m']} n{d['n']} k{d['k']} r{d['r']}"


def shapes(preset: str, model: Mapping[str, Any] | None) -> list[Shape]:
    if preset == "smoke":
        return [Shape(_label(d), d) for d in _SMOKE]
    check_preset(preset)
    model = model or {}
    if model.get("hidden"):
        hidden = int(model["hidden"])
        inter = (model.get("ffn") or {}).get("intermediate")
        ns = (hidden, int(inter)) if inter else (hidden,)  # a model without a dense FFN: q/o only
    else:
        hidden, ns = DEFAULT_HIDDEN, (DEFAULT_HIDDEN, DEFAULT_INTERMEDIATE)
    out = []
    for n in ns:  # the q/o projection (hidden -> hidden) and the FFN up (hidden -> intermediate)
        for r in RANKS:
            for m in ROWS:
                d = dict(m=m, n=n, k=hidden, r=r, alpha=ALPHA_PER_RANK * r)
                out.append(Shape(_label(d), d))
    return out


def bind(levers: Mapping[str, Any], shape: Shape, engine: str = "") -> Shape:
    """``lora_rotate`` joins the dims as ``rotate`` (0 or 1); the label stays."""
    return Shape(shape.label, {**shape.dims, "rotate": int(bool(levers.get("lora_rotate")))})


BASE_RMS = 0.02  # the drawn base weights' standard deviation


def adapter(rng: np.random.Generator, shape, base_rms: float = BASE_RMS) -> tuple[np.ndarray, np.ndarray]:
    """fp16 ``A[r, k]`` (``N(0, 1/k)``: ``x A^T`` is about unit size) and
    ``B[n, r]``, sized so the adapter moves the output by about 30 % of the
    base projection's size (base weights of RMS ``base_rms``)."""
    n, k, r = shape["n"], shape["k"], shape["r"]
    a = rng.standard_normal((r, k), dtype=np.float32) / np.float32(np.sqrt(k))
    b_std = 0.3 * base_rms * np.sqrt(k) / (scale(shape) * np.sqrt(r))
    b = rng.standard_normal((n, r), dtype=np.float32) * np.float32(b_std)
    return a.astype(np.float16), b.astype(np.float16)


def make_inputs(shape, rng: np.random.Generator) -> dict:
    """fp16 ``x[m, k]`` (``N(0, 1)``), base weights ``w[n, k]``
    (``N(0, 0.02^2)``) and the loaded adapter ``a``, ``b``."""
    m, n, k = shape["m"], shape["n"], shape["k"]
    x = rng.standard_normal((m, k), dtype=np.float32).astype(np.float16)
    w = (rng.standard_normal((n, k), dtype=np.float32) * np.float32(0.02)).astype(np.float16)
    a, b = adapter(rng, shape)
    return {"x": x, "w": w, "a": a, "b": b}


# The projections an adapter may sit on: attention's and the dense FFN's,
# each on its own.
WEIGHT_ROLES = (
    ("attn_q",),
    ("attn_k",),
    ("attn_v",),
    ("attn_qkv",),
    ("attn_output",),
    ("ffn_gate",),
    ("ffn_up",),
    ("ffn_down",),
)


def on_weights(path: KernelPath, tensors) -> KernelPath:
    """The projection on one base weight matrix from a model file: ``n x
    k`` its own, at every rank and row count of the ``model`` preset (the
    first smoke shape's for ``smoke``); the base weights are the decoded
    values in fp16, the kernels' type (exact from an F16 file, rounded
    once from any other, which the label says); the adapter stays drawn,
    sized to the tensor's RMS as it is to the drawn weights'."""
    t = fit.only(tensors, path.name)
    n, k = fit.dims(t, 2, path.name)
    with np.errstate(over="ignore"):  # past fp16's range: inf, which finite_in refuses
        w = fit.finite_in(t, np.asarray(t.values, np.float32).astype(np.float16), "fp16")
    rms = float(np.sqrt(np.mean(np.square(w, dtype=np.float64)))) or BASE_RMS
    tag = fit.read_as([t], "fp16", stored=t.stored == "F16")

    def shapes_on_file(preset: str, model: Mapping[str, Any] | None) -> list[Shape]:
        check_preset(preset)
        if preset == "smoke":
            runs = [(_SMOKE[0]["m"], _SMOKE[0]["r"], _SMOKE[0]["alpha"])]
        else:
            runs = [(m, r, ALPHA_PER_RANK * r) for r in RANKS for m in ROWS]
        dims = [dict(m=m, n=n, k=k, r=r, alpha=alpha) for m, r, alpha in runs]
        return [Shape(f"{tag} {_label(d)}", d) for d in dims]

    def inputs_on_file(shape, rng: np.random.Generator) -> dict:
        x = rng.standard_normal((shape["m"], k), dtype=np.float32).astype(np.float16)
        a, b = adapter(rng, shape, rms)
        return {"x": x, "w": w, "a": a, "b": b}

    return dataclasses.replace(path, shapes=shapes_on_file, make_inputs=inputs_on_file)


def outputs(shape) -> dict:
    return {"y": ((shape["m"], shape["n"]), "float16")}


def traffic_per_forward(shape) -> Traffic:
    """x, W, A, B read once, y written, the fp32 ``t`` written and read back."""
    m, n, k, r = shape["m"], shape["n"], shape["k"], shape["r"]
    return Traffic(
        bytes_read=2 * (m * k + n * k + r * k + n * r) + 4 * m * r,
        bytes_written=2 * m * n + 4 * m * r,
        flops=2 * m * n * k + 2 * m * r * k + 2 * m * n * r,
    )


def traffic_merged(shape) -> Traffic:
    """x and the merged W read once, y written: the base projection's cost."""
    m, n, k = shape["m"], shape["n"], shape["k"]
    return Traffic(bytes_read=2 * (m * k + n * k), bytes_written=2 * m * n, flops=2 * m * n * k)


def within(got, ref, tol: Tolerance = TOLERANCE) -> tuple[bool, float]:
    """(whether ``got`` passes ``ref`` at ``tol``, its relative L2 error)."""
    g, r = np.asarray(got, np.float64), np.asarray(ref, np.float64)
    if not np.all(np.isfinite(g)):
        return False, float("inf")
    rel = float(np.linalg.norm(g - r) / np.linalg.norm(r))
    return rel <= tol.rel and float(np.abs(g - r).max()) <= tol.abs_bound(r), rel


def second_adapter(shape) -> tuple[np.ndarray, np.ndarray]:
    """The adapter the swap check installs: drawn like the loaded one, from
    a seed of its own."""
    return adapter(np.random.default_rng([zlib.crc32(shape.label.encode()), 7]), shape)


def swap_check(variant: str, shape, launch, bufs, cuda, on_gpu: bool = False) -> dict:
    """The record's ``findings``: with rotation permitted, swap in a second
    adapter between two calls and require the next call to match the
    reference with the NEW adapter (and not the old one), then time the
    swap on a GPU (``swap_ms``: host clock around the swap and a device
    synchronise, median of ``SWAP_TIMES``) and swap the loaded adapter back.
    Without rotation the swap must be refused. Raises (the record fails)
    when a swap does not take effect or is not refused."""
    out: dict[str, Any] = {"rotate": bool(launch.rotate), "swap": launch.swap_kind, "swap_ms": None}
    a2, b2 = second_adapter(shape)
    da2, db2 = cuda.to_device(a2), cuda.to_device(b2)
    if not launch.rotate:
        try:
            launch.swap(da2, db2)
        except SwapRefused:
            out["swap"] = "refused"
            return out
        raise AssertionError("lora_rotate is off but the swap was not refused")
    host = {name: bufs[name].copy_to_host() for name in ("x", "w", "a", "b")}
    loaded = launch.adapter
    launch.swap(da2, db2)
    launch(bufs)
    cuda.synchronize()
    y = bufs["y"].copy_to_host()
    s = scale(shape)
    ok, rel = within(y, naive.naive_lora(host["x"], host["w"], a2, b2, s))
    stale, rel_old = within(y, naive.naive_lora(host["x"], host["w"], host["a"], host["b"], s))
    out.update(takes_effect=ok and not stale, rel_after_swap=rel)
    if not out["takes_effect"]:
        raise AssertionError(
            f"{variant}: the call after the swap does not use the new adapter "
            f"(rel {rel:.3g} to the new adapter's reference, {rel_old:.3g} to the old one's)"
        )
    if on_gpu:
        times = []
        for i in range(SWAP_TIMES):
            pair = loaded if i % 2 else (da2, db2)
            t0 = time.perf_counter()
            launch.swap(*pair)
            cuda.synchronize()
            times.append(time.perf_counter() - t0)
        out["swap_ms"] = float(np.median(times) * 1e3)
    launch.swap(*loaded)  # back to the loaded adapter: the timing and the recheck expect it
    return out


def profile_shape(shape: Shape) -> Shape:
    """The memory trace's shape: the model's row length ``k`` and rank
    ``r``, one decode row and eight output rows (where LoRA is memory-bound;
    a simulated prefill row of 4096 costs a minute)."""
    d = {**shape.dims, "m": 1, "n": min(8, shape["n"])}
    return Shape(f"profile m1 n{d['n']} k{d['k']} r{d['r']}", d)


def declare(table, variants: Mapping[str, Variant]) -> KernelPath:
    """A LoRA projection path: ``table``'s, with ``variants``; everything
    else as above."""
    return declared_path(
        table,
        variants,
        shapes=shapes,
        make_inputs=make_inputs,
        outputs=outputs,
        reference=naive.reference,
        traffic=traffic_per_forward,
        tolerance=TOLERANCE,
        notes="memory-bound at decode (m = 1, 8: the weights dominate), compute-bound at prefill; "
        "per_forward adds r/k of the work and a launch, merged pays at load and at every swap",
        extra={
            "model_sections": ("attention", "ffn"),
            "findings": swap_check,
            "profile_shape": profile_shape,
            "weights": WeightUse(WEIGHT_ROLES, on_weights),
        },
        bind=bind,
    )
