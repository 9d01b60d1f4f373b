"""``moe.gateup_fp4``: declared in ``spec``."""
