"""``gdn.decode``: declared in ``spec``."""
