"""``mamba2.prefill_proj``: the SSM layer's prefill projection GEMMs (``spec``)."""
