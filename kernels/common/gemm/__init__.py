"""The GEMM mainloops, one module per instruction family (issue in progress):

wgmma_async.py  wgmma (sm_90a) on operands copied asynchronously (cp.async)
                into 128-byte-swizzled tiles, S stages in dynamic shared memory
"""
