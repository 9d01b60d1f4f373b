"""``gdn.proj_gemv_batch``: declared in ``spec``."""
