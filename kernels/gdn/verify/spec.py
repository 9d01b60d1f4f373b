"""``gdn.verify``: speculative verify, T tokens against one carried state."""

from __future__ import annotations

from typing import Any, Mapping

from ...common.path import Shape, Traffic, check_preset
from ...selection.gdn import VERIFY as TABLE
from .. import family
from . import recurrent, wy17, wyn


def verify_shapes(preset: str, model: Mapping[str, Any] | None) -> list[Shape]:
    check_preset(preset)
    if preset == "smoke":
        dims = [
            dict(t=17, hk=2, hv=4, dk=12, dv=12),
            dict(t=5, hk=2, hv=4, dk=8, dv=8),
            dict(t=17, hk=3, hv=3, dk=8, dv=8),
        ]
    else:
        gdn, bench = family.model_dims(model)
        dims = [dict(t=int(t), **family.heads(gdn)) for t in bench["verify_tokens"]]
    return [Shape(f"{preset} t{d['t']} {family.heads_label(d)}", d) for d in dims]


def profile_shape(shape: Shape) -> Shape:
    """The memory trace's shape: the model's state rows (dk, dv), token count
    and value heads per key head, one key head."""
    d = {**shape.dims, "hk": 1, "hv": shape["hv"] // shape["hk"]}
    return Shape(f"profile t{d['t']} {family.heads_label(d)}", d)


def verify_traffic(shape: Shape) -> Traffic:  # wyn: one chunk of T
    r, w = family.token_bytes(shape)
    return family.chunked(r, w, shape["t"], shape["t"], shape)


def verify_wy17_traffic(shape: Shape) -> Traffic:
    r, w = family.token_bytes(shape)
    hv, dk, dv = shape["hv"], shape["dk"], shape["dv"]
    return family.chunked(r, w, 16, 16, shape, hv * (shape["t"] - 16) * family.step_flops(dk, dv))


def verify_recurrent_traffic(shape: Shape) -> Traffic:
    r, w = family.token_bytes(shape)
    return Traffic(r, w, shape["t"] * shape["hv"] * family.step_flops(shape["dk"], shape["dv"]))


def verify_state_traffic(shape: Shape) -> dict:
    """State bytes of one verify call against ``T`` single-token decode steps
    (each of which reads and writes the whole state)."""
    s, t = family.state_bytes(shape), shape["t"]
    return {"verify_bytes": 2 * s, "single_steps_bytes": 2 * t * s, "saved_bytes": 2 * (t - 1) * s}


_STATE_NOTE = (
    "Qwen3-Next (Hv = 32, dk = dv = 128): 2 MiB of fp32 state per sequence and layer; "
    "one verify call reads and writes it once (4 MiB), T single-token steps would move "
    "T times that (17 tokens: 68 MiB)."
)

PATH = family.declare(
    TABLE,
    [
        family.variant(wy17, verify_wy17_traffic),
        family.variant(wyn),
        family.variant(recurrent, verify_recurrent_traffic),
    ],
    shapes=verify_shapes,
    make_inputs=family.token_inputs,
    outputs=family.token_outputs,
    reference=family.token_reference,
    traffic=verify_traffic,
    tolerance=family.TOKEN_TOL,
    notes="Bandwidth-bound on the state (the fp32 arithmetic catches up around T = 17); wy17 and wyn "
    "make their k.k and q.k products on mma.sync (fp16). " + _STATE_NOTE,
    extra={"state_traffic": verify_state_traffic, "profile_shape": profile_shape},
)
