"""Expert-union statistics: which experts a batch's routing touches.

``union_count`` runs one block of 256 threads over the ``R x k`` routed
ids: every thread adds one to a shared per-expert counter for each id it
reads (shared atomics, exact), then the block writes ``expert_rows[e]`` (how
many rows routed to expert ``e``) and ``union[0]``, the number of distinct
experts (each warp's count summed by shuffles, then one shared atomic a
warp, where every thread's atomic on the one word queued behind the
others'). A batch of R rows touches at most ``min(E, R k)`` experts; each row
counts once per expert since its top-k ids are distinct. At most
``MAX_EXPERTS`` experts (4 KiB of shared counters).
"""

from __future__ import annotations

from functools import lru_cache

from numba import cuda, int32

from ..common.launch import check_block

MAX_EXPERTS = 1024
THREADS = 256
FULL_MASK = 0xFFFFFFFF


@lru_cache(maxsize=None)
def make_union_count():
    @cuda.jit
    def union_count(union, expert_rows, ids):
        cnt = cuda.shared.array(MAX_EXPERTS, int32)
        distinct = cuda.shared.array(1, int32)
        t = cuda.threadIdx.x
        ne = expert_rows.shape[0]
        for e in range(t, ne, THREADS):
            cnt[e] = 0
        if t == 0:
            distinct[0] = 0
        cuda.syncthreads()
        topk = ids.shape[1]
        total = ids.shape[0] * topk
        for i in range(t, total, THREADS):
            cuda.atomic.add(cnt, ids[i // topk, i % topk], 1)
        cuda.syncthreads()
        mine = int32(0)
        for e in range(t, ne, THREADS):
            c = cnt[e]
            expert_rows[e] = c
            if c > 0:
                mine += 1
        for d in (16, 8, 4, 2, 1):  # the warp's sum first: one atomic a warp, not one a thread on one word
            mine += cuda.shfl_xor_sync(FULL_MASK, mine, d)
        if t % 32 == 0:
            cuda.atomic.add(distinct, 0, mine)
        cuda.syncthreads()
        if t == 0:
            union[0] = distinct[0]

    return union_count


def union_count(experts: int):
    if experts > MAX_EXPERTS:
        raise ValueError(f"{experts} experts: the union kernel counts at most {MAX_EXPERTS}")
    kern = make_union_count()
    check_block(THREADS)

    def launch(union, expert_rows, ids):
        kern[1, THREADS](union, expert_rows, ids)

    return launch
