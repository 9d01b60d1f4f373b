"""``lora.proj_pool`` (Metrale): declared in ``spec``."""
