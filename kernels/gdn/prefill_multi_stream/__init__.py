"""``gdn.prefill_multi_stream``: declared in ``spec``."""
