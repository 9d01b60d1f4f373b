"""``mamba2.prefill_scan``: the Mamba2 prefill scan (``spec``); the reference in ``naive``, the
variants ``ssd``, ``persistent`` and ``sequential``, the SSD kernels' shared memory in ``geometry``."""
