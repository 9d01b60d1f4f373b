"""``attention.proj_bf16_tc_w4a16``: prefill projection, int4 weights; declared in ``spec``."""
