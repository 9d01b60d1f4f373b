"""``moe.down_fp4``: declared in ``spec``."""
