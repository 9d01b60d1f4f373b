"""``moe.router``: declared in ``spec``."""
