"""``w4a16.gemm``: declared in ``spec``."""
