"""``w4a16.gemv_dual``: declared in ``spec``."""
