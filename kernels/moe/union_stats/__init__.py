"""``moe.union_stats``: declared in ``spec``."""
