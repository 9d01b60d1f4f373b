"""The GEMM engine: one pipeline, read by one mainloop per instruction family.

pipeline.py     the stages: operands copied asynchronously (cp.async) into
                128-byte-swizzled K-major tiles, S stages in dynamic shared
                memory, a transformed operand staged from registers, the
                per-stage fold hook, the scaled epilogue
wgmma_async.py  wgmma (sm_90a) through 128-byte-swizzle descriptors, the
                accumulators tied to the wait
mma_sync.py     mma.sync (sm_80 and later) from ldmatrix on the same stages
grouped.py      either form over rows sorted by group (an MoE's experts):
                gathered A rows, a B per group, gate/up halves in one
                tile, an epilogue hook; bounded and walking tile schedules;
                a 16-row decode tile (mma.sync, split-K over the warps)
                for launches of a few rows a group
mmq.py          the MMQ stagers (doubled E2M1, Q4_K) and their per-step folds
warp_rows.py    products of stored fp16 rows inside a fused kernel (a GDN
                chunk's k.k and q.k, the SSD scan's C.B): mma.sync tiles of a
                block or its lower triangle, each result to the caller's hook
"""
