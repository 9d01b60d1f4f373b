"""``attention.paged_decode``: paged GQA decode attention; declared in ``spec``."""
