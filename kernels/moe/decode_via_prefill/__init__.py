"""``moe.decode_via_prefill``: declared in ``spec``."""
