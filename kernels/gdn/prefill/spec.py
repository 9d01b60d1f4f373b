"""``gdn.prefill``: the chunked GDN prefill (WY form), carried state in and out."""

from __future__ import annotations

from typing import Any, Mapping

from ...common.path import Shape, Traffic, check_preset
from ...selection.gdn import PREFILL as TABLE
from .. import family
from . import global_state, regresident


def prefill_shapes(preset: str, model: Mapping[str, Any] | None) -> list[Shape]:
    check_preset(preset)
    if preset == "smoke":
        dims = [dict(t=37, chunk=16, hk=2, hv=4, dk=8, dv=8), dict(t=23, chunk=8, hk=3, hv=3, dk=12, dv=12)]
    else:
        gdn, bench = family.model_dims(model)
        dims = [dict(t=int(t), chunk=int(gdn["chunk"]), **family.heads(gdn)) for t in bench["prefill_tokens"]]
    return [Shape(f"{preset} t{d['t']} {family.heads_label(d)} c{d['chunk']}", d) for d in dims]


PROFILE_BLOCKS = 2  # blocks a launch the memory trace runs: the first and the last


def profile_shape(shape: Shape) -> Shape:
    """The memory trace's shape: the model's rows (``dk``, ``dv``) and
    chunk, two chunks of tokens (the state carried from the first into the
    second, and written back between them by ``global_state``), one key
    head and its value heads. Its blocks (a value head's column slice each)
    are alike and independent, so the trace runs :data:`PROFILE_BLOCKS` of
    them and scales their counts to the grid."""
    d = {**shape.dims, "t": 2 * shape["chunk"], "hk": 1, "hv": shape["hv"] // shape["hk"]}
    return Shape(f"profile t{d['t']} {family.heads_label(d)} c{d['chunk']}", d)


def prefill_traffic(shape: Shape) -> Traffic:
    r, w = family.token_bytes(shape)
    return family.chunked(r, w, shape["t"], shape["chunk"], shape)


def prefill_global_traffic(shape: Shape) -> Traffic:
    """``regresident``'s bytes plus one state read and write per extra chunk."""
    base = prefill_traffic(shape)
    extra = (-(-shape["t"] // shape["chunk"]) - 1) * family.state_bytes(shape)
    return Traffic(base.bytes_read + extra, base.bytes_written + extra, base.flops, base.tc_flops)


PATH = family.declare(
    TABLE,
    [family.variant(regresident), family.variant(global_state, prefill_global_traffic)],
    shapes=prefill_shapes,
    make_inputs=family.token_inputs,
    outputs=family.token_outputs,
    reference=family.token_reference,
    traffic=prefill_traffic,
    tolerance=family.PREFILL_TOL,
    notes="Compute-bound at model shapes: the chunk's k.k and q.k products on mma.sync (fp16 q, k "
    "as stored, f32 accumulators), the fp32 products on CUDA cores. global_state adds one "
    "state read+write per extra chunk.",
    extra={"profile_shape": profile_shape, "profile_blocks": PROFILE_BLOCKS},
)
