"""``moe.decode_multi_seq``: declared in ``spec``."""
