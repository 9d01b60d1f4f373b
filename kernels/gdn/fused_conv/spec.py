"""``gdn.fused_conv`` (Metrale): the decode step's conv1d + SiLU, GDN step and
gated RMSNorm, fused into one kernel or as three."""

from __future__ import annotations

import math
from typing import Any, Mapping

import numpy as np

from ...common.path import Shape, Traffic, check_preset
from ...selection.gdn import FUSED_CONV as TABLE
from ...selection.gdn import FUSED_HEAD_DIM
from .. import family, naive
from ..family import F16, F32, I32
from . import fused, separate


def fused_conv_shapes(preset: str, model: Mapping[str, Any] | None) -> list[Shape]:
    """Smoke shapes carry ``fused_head_dim`` (the head dim the fused kernel
    is eligible at, 128 at model shapes) equal to their own tiny head dim
    where the fused kernel should apply: d = 128 is too slow to simulate."""
    check_preset(preset)
    if preset == "smoke":
        dims = [
            dict(n=1, slots=2, hk=2, hv=4, dk=12, dv=12, conv_width=4, fused_head_dim=12),
            dict(n=3, slots=5, hk=2, hv=4, dk=12, dv=12, conv_width=4, fused_head_dim=12),
            dict(n=3, slots=4, hk=3, hv=3, dk=8, dv=8, conv_width=4, fused_head_dim=8),
        ]
    else:
        gdn, bench = family.model_dims(model)
        dims = [
            dict(n=int(n), slots=2 * int(n) + 1, conv_width=int(gdn["conv_width"]), **family.heads(gdn))
            for n in bench["decode_batches"]
        ]
    out = []
    for d in dims:
        fhd = d.get("fused_head_dim", FUSED_HEAD_DIM)
        tag = f" fused_hd{fhd}" if fhd != FUSED_HEAD_DIM else ""
        out.append(Shape(f"{preset} n{d['n']} {family.heads_label(d)} w{d['conv_width']}{tag}", d))
    return out


def profile_shape(shape: Shape) -> Shape:
    """The memory trace's shape: the model's head dims and conv width, one
    sequence and one q/k head with its value heads."""
    d = {**shape.dims, "n": 1, "slots": 3, "hk": 1, "hv": shape["hv"] // shape["hk"]}
    return Shape(f"profile n1 {family.heads_label(d)} w{d['conv_width']}", d)


def conv_channels(shape: Shape) -> int:
    return 2 * shape["hk"] * shape["dk"] + shape["hv"] * shape["dv"]


def fused_conv_inputs(shape: Shape, rng) -> dict:
    """``x [N, C]`` (C = 2 Hk dk + Hv dv, channels ``[q | k | v]``),
    ``conv_weight [C, W]``, ``conv_state [slots, W-1, C]`` (fp16), ``g,
    beta [N, Hv]``, ``z [N, Hv, dv]`` (fp16), ``norm_weight [dv]``,
    ``slots [N]``, ``state [slots, Hv, dk, dv]``."""
    n, hv, dv, w = shape["n"], shape["hv"], shape["dv"], shape["conv_width"]
    c = conv_channels(shape)
    g, beta = family.random_gates(rng, n, hv)
    return {
        "x": family.random_f16(rng, (n, c)),
        "conv_weight": (rng.standard_normal((c, w)) / math.sqrt(w)).astype(np.float16),
        "conv_state": family.random_f16(rng, (shape["slots"], w - 1, c)),
        "g": g,
        "beta": beta,
        "z": family.random_f16(rng, (n, hv, dv)),
        "norm_weight": (1.0 + 0.1 * rng.standard_normal(dv)).astype(np.float32),
        "slots": family.random_slots(rng, n, shape["slots"]),
        "state": family.random_state(rng, (shape["slots"], hv, shape["dk"], dv)),
    }


def fused_conv_outputs(shape: Shape):
    return {
        "out": ((shape["n"], shape["hv"], shape["dv"]), "float32"),
        "conv_state": ((shape["slots"], shape["conv_width"] - 1, conv_channels(shape)), "float16"),
        "state": ((shape["slots"], shape["hv"], shape["dk"], shape["dv"]), "float32"),
    }


def fused_conv_reference(shape: Shape, x: dict) -> dict:
    out, cs, pool = naive.naive_fused_conv(
        x["x"],
        x["conv_weight"],
        x["conv_state"],
        x["g"],
        x["beta"],
        x["z"],
        x["norm_weight"],
        x["slots"],
        x["state"],
        shape["hk"],
        shape["hv"],
        shape["dk"],
        shape["dv"],
    )
    return {"out": out, "conv_state": cs, "state": pool}


def fused_conv_traffic(shape: Shape) -> Traffic:
    n, hv, dk, dv, w = shape["n"], shape["hv"], shape["dk"], shape["dv"], shape["conv_width"]
    c, per = conv_channels(shape), family.state_bytes(shape)
    read = n * (c * F16 + (w - 1) * c * F16 + 2 * hv * F32 + hv * dv * F16 + I32 + per) + c * w * F16 + dv * F32
    write = n * ((w - 1) * c * F16 + hv * dv * F32 + per)
    flops = n * (c * (2 * w + 4) + hv * family.step_flops(dk, dv) + 8 * hv * dv)
    return Traffic(read, write, flops)


def fused_conv_separate_traffic(shape: Shape) -> Traffic:
    """The fused figure plus the intermediates: activations (``N*C`` fp32)
    and ``o`` (``N*Hv*dv`` fp32) written then read back, slots read twice more."""
    base = fused_conv_traffic(shape)
    n = shape["n"]
    inter = n * (conv_channels(shape) + shape["hv"] * shape["dv"]) * F32
    return Traffic(base.bytes_read + inter + 2 * n * I32, base.bytes_written + inter, base.flops)


PATH = family.declare(
    TABLE,
    [family.variant(fused), family.variant(separate, fused_conv_separate_traffic, launches=3)],
    shapes=fused_conv_shapes,
    make_inputs=fused_conv_inputs,
    outputs=fused_conv_outputs,
    reference=fused_conv_reference,
    traffic=fused_conv_traffic,
    tolerance=family.TOKEN_TOL,
    notes="Memory-bound on the state. The fused kernel needs Hv == 2*Hk and dk == dv == "
    "fused_head_dim (128 at model shapes; smoke shapes lower it to their own head dim).",
    extra={"fused_head_dim": FUSED_HEAD_DIM, "profile_shape": profile_shape, "derive": family.derive_slots},
)
