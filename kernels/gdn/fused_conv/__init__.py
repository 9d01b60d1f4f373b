"""``gdn.fused_conv``: declared in ``spec``."""
