"""``w4a16.gemv``: declared in ``spec``."""
