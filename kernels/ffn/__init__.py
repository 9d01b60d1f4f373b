"""The dense FFN's prefill GEMMs (Metrale's arms), one path:
``ffn.prefill`` (``prefill/``). The decode side of the dense FFN is
``w4a16.ffn_decode``."""
