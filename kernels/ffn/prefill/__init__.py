"""``ffn.prefill``: the dense-FFN prefill arms; declared in ``spec``."""
