"""``moe.prefill_grouped``: declared in ``spec``."""
