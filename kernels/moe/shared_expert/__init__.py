"""``moe.shared_expert``: declared in ``spec``."""
