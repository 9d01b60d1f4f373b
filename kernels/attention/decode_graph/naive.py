"""The float64 reference of ``attention.decode_graph``: every GDN layer's
decode (``gdn.naive``) and every attention layer's paged decode
(``attention.naive``), layer by layer, as the step runs them."""

from __future__ import annotations

import numpy as np

from ...gdn import naive as gdn_naive
from .. import naive as attn_naive


def reference(shape, x: dict) -> dict:
    os_, states = [], []
    for layer in range(shape["gdn_layers"]):
        o, pool = gdn_naive.naive_decode(
            x["q"][layer], x["k"][layer], x["v"][layer], x["g"][layer], x["beta"][layer], x["slots"], x["state"][layer]
        )
        os_.append(o)
        states.append(pool)
    ao = [
        attn_naive.naive_paged_decode(
            x["aq"][layer], x["k_cache"][layer], x["v_cache"][layer], x["block_table"], x["context_lens"]
        )
        for layer in range(shape["attn_layers"])
    ]
    return {"o": np.stack(os_), "state": np.stack(states), "ao": np.stack(ao)}
