"""``gdn.decode`` (Atlas): multi-sequence single-token decode over a state pool
indexed by slot."""

from __future__ import annotations

from typing import Any, Mapping

from ...common.path import Shape, Traffic, check_preset
from ...selection.gdn import DECODE as TABLE
from .. import family, naive
from ..family import F16, F32, I32
from . import batched, per_sequence


def decode_shapes(preset: str, model: Mapping[str, Any] | None) -> list[Shape]:
    check_preset(preset)
    if preset == "smoke":
        dims = [
            dict(n=1, slots=3, hk=2, hv=4, dk=8, dv=8),
            dict(n=3, slots=5, hk=2, hv=4, dk=12, dv=12),
            dict(n=3, slots=4, hk=3, hv=3, dk=8, dv=8),
        ]
    else:
        gdn, bench = family.model_dims(model)
        dims = [dict(n=int(n), slots=2 * int(n) + 1, **family.heads(gdn)) for n in bench["decode_batches"]]
    return [Shape(f"{preset} n{d['n']} {family.heads_label(d)}", d) for d in dims]


def profile_shape(shape: Shape) -> Shape:
    """The memory trace's shape: the model's state rows (dk, dv) and value
    heads per key head, one sequence and one key head."""
    d = {**shape.dims, "n": 1, "slots": 3, "hk": 1, "hv": shape["hv"] // shape["hk"]}
    return Shape(f"profile n1 {family.heads_label(d)}", d)


def decode_inputs(shape: Shape, rng) -> dict:
    """``q, k [N, Hk, dk]``, ``v [N, Hv, dv]``, ``g, beta [N, Hv]``, ``slots
    [N]`` (distinct, scattered over the pool), ``state [slots, Hv, dk, dv]``."""
    n, hk, hv, dk, dv = shape["n"], shape["hk"], shape["hv"], shape["dk"], shape["dv"]
    g, beta = family.random_gates(rng, n, hv)
    return {
        "q": family.random_f16(rng, (n, hk, dk)),
        "k": family.random_f16(rng, (n, hk, dk)),
        "v": family.random_f16(rng, (n, hv, dv)),
        "g": g,
        "beta": beta,
        "slots": family.random_slots(rng, n, shape["slots"]),
        "state": family.random_state(rng, (shape["slots"], hv, dk, dv)),
    }


def decode_outputs(shape: Shape):
    return {
        "o": ((shape["n"], shape["hv"], shape["dv"]), "float32"),
        "state": ((shape["slots"], shape["hv"], shape["dk"], shape["dv"]), "float32"),
    }


def decode_reference(shape: Shape, x: dict) -> dict:
    o, pool = naive.naive_decode(x["q"], x["k"], x["v"], x["g"], x["beta"], x["slots"], x["state"])
    return {"o": o, "state": pool}


def decode_traffic(shape: Shape) -> Traffic:
    n, hk, hv, dk, dv = shape["n"], shape["hk"], shape["hv"], shape["dk"], shape["dv"]
    per = family.state_bytes(shape)
    read = n * (2 * hk * dk * F16 + hv * dv * F16 + 2 * hv * F32 + I32 + per)
    write = n * (hv * dv * F32 + per)
    return Traffic(read, write, n * hv * family.step_flops(dk, dv))


def _per_sequence_launches(shape) -> int:
    return shape["n"]  # one launch per sequence


PATH = family.declare(
    TABLE,
    [family.variant(batched), family.variant(per_sequence, launches=_per_sequence_launches)],
    shapes=decode_shapes,
    make_inputs=decode_inputs,
    outputs=decode_outputs,
    reference=decode_reference,
    traffic=decode_traffic,
    tolerance=family.TOKEN_TOL,
    notes="Memory-bound: each sequence's state (64 KiB per head at d = 128) read and written once. "
    "Atlas only: Metrale's gdn_batched_fla steers multi-stream prefill, not this decode.",
    extra={"profile_shape": profile_shape, "derive": family.derive_slots},
)
