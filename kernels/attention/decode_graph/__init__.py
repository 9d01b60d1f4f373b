"""``attention.decode_graph``: the decode step as a CUDA graph; declared in ``spec``."""
