"""``gdn.prefill``: declared in ``spec``."""
