"""``moe.decode_fp8_grouped``: declared in ``spec``."""
