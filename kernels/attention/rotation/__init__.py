"""``attention.rotation``: Q/K/V pre-rotation and the FP8 KV-cache write; declared in ``spec``."""
