"""``attention.proj_fp8``: the FP8 projection GEMM; declared in ``spec``."""
