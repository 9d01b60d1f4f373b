"""``moe.prefill_sorted``: declared in ``spec``."""
