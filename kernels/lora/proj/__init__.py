"""``lora.proj`` (Atlas): declared in ``spec``."""
