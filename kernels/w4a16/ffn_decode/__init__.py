"""``w4a16.ffn_decode``: declared in ``spec``."""
