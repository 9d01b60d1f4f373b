"""``attention.proj_bf16_tc``: prefill projection, NVFP4 weights; declared in ``spec``."""
