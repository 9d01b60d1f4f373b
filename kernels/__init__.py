"""leverctl's Numba-CUDA kernel paths, installed as ``leverctl_kernels``.

Importing this package imports neither numba nor numpy; :func:`all_paths`
imports the families (and so numba), which must happen after the bench has
chosen between a real GPU and the CUDA simulator.
"""
