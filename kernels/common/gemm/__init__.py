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
                tile, an epilogue hook; bounded and walking tile schedules
"""
