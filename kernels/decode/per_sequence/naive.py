"""The float64 reference of ``decode.per_sequence``: the step's layers
decoded by the references of the paths it is built from, composed:
``attention.decode_graph``'s (each GDN layer's decode, each attention
layer's paged decode) for a model without MLA, ``attention.mla_decode``'s
for each MLA layer."""

from __future__ import annotations

import numpy as np

from ...attention.decode_graph import naive as step_naive
from ...attention.mla_decode import spec as mla_spec

LAYERED = ("q_nope", "q_pe", "c_kv", "k_pe")


def reference(shape, x: dict) -> dict:
    if not shape["mla"]:
        return step_naive.reference(shape, x)
    per_layer = [
        mla_spec.reference(shape, {**{k: x[k][layer] for k in LAYERED}, "context_lens": x["context_lens"]})["o"]
        for layer in range(shape["mla_layers"])
    ]
    return {"o": np.stack(per_layer)}
