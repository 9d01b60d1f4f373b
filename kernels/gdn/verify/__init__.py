"""``gdn.verify``: declared in ``spec``."""
