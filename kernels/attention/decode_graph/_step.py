"""One decode step of a batch as the engine launches it layer by layer:
for each GDN layer the batched GDN decode kernel (``gdn.decode``'s ``batched``),
for each attention layer the paged decode's split and merge kernels
(``attention._paged``, split count pinned to ``max_decode_seqs`` = 1),
all on one stream. Each layer has its own inputs, recurrent state and KV
cache (stacked on a leading layer axis); the block table, lengths and
state slots are the batch's. The partials are shared scratch: the layers
run in order on the stream.

``make_step(shape)`` returns ``step(bufs, stream)`` that enqueues the
whole step, and the scratch it declared. The eager variant calls it each
step; the graph variant captures it once (``_cuda_graph``) and replays.
"""

from __future__ import annotations

import numpy as np
from numba import cuda

from ...common.launch import check_block, check_grid, check_shared
from ...gdn.decode import batched as decode_batched
from .._paged import V_TILES, make_merge, make_split, max_splits, merge_threads, split_shared_bytes, threads_for

REF_SEQS = 1  # max_decode_seqs at its default


def make_step(shape):
    n, hq, hkv, d = shape["n"], shape["hq"], shape["hkv"], shape["d"]
    target, minb = shape["target_ctas"], shape["min_split_blocks"]
    ggrid, gthreads = decode_batched.launch_config(shape)
    gdn = decode_batched.make_decode_batched(shape["dk"], shape["dv"])
    split = make_split(hkv, hq // hkv, d, target, minb)
    merge = make_merge(hkv, d, target, minb)
    smax = max_splits(shape["ctx"], REF_SEQS, hkv, target, minb)
    nt = check_block(threads_for(d), warps=False)
    mt = check_block(merge_threads(d), warps=False)
    check_grid((smax, hkv, n))
    check_grid((hq, n))
    check_shared(split_shared_bytes(hq // hkv, d, V_TILES))
    part_o = cuda.device_array((n, hq, smax, d), np.float32)
    part_ml = cuda.device_array((n, hq, smax, 2), np.float32)
    ref, seq0 = np.int64(REF_SEQS), np.int64(0)

    def step(b, stream):
        for layer in range(shape["gdn_layers"]):
            st = b["state"][layer]
            gdn[ggrid, gthreads, stream](
                b["q"][layer],
                b["k"][layer],
                b["v"][layer],
                b["g"][layer],
                b["beta"][layer],
                b["slots"],
                st.reshape(st.size),
                b["o"][layer],
            )
        for layer in range(shape["attn_layers"]):
            split[(smax, hkv, n), nt, stream](
                b["aq"][layer],
                b["k_cache"][layer],
                b["v_cache"][layer],
                b["block_table"],
                b["context_lens"],
                ref,
                seq0,
                part_o,
                part_ml,
            )
            merge[(hq, n), mt, stream](b["context_lens"], ref, seq0, part_o, part_ml, b["ao"][layer])

    return step, {"part_o": part_o, "part_ml": part_ml}


def launches(shape) -> int:
    return shape["gdn_layers"] + 2 * shape["attn_layers"]
