"""``attention.mla_decode``: MLA decode; declared in ``spec``."""
