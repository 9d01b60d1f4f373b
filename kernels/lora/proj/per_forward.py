"""``per_forward``: the adapter applied at every call (Atlas with
``lora_eager`` off; Metrale always). Two launches: ``t = x A^T`` into a
small fp32 ``[m, r]`` buffer, then the base GEMV/GEMM with the adapter's
up-projection ``s t B^T`` fused into its dot products. The base weights are
never touched, so a swap is a pointer swap: the next call reads the new
``A`` and ``B``."""

from __future__ import annotations

import numpy as np
from numba import cuda, float32

from .. import _kernels as K
from .._adapter import AdapterLaunch

SWAP = "pointer"


class PerForward(AdapterLaunch):
    swap_kind = SWAP

    def __init__(self, shape, rotate: bool):
        super().__init__(shape, rotate)
        m, n, r = shape["m"], shape["n"], shape["r"]
        self._xa, self._proj = K.make_xa(), K.make_proj(True)
        self._xa_cfg, self._proj_cfg = K.xa_grid(m, r), K.proj_grid(m, n)
        self.workspace = {"t": cuda.device_array((m, r), dtype=np.float32)}

    def _load(self, w, a, b) -> None:
        pass  # nothing to do at load: the adapter is applied per call

    def _swap(self, a, b) -> None:
        pass  # the next call reads self.adapter

    def _forward(self, bufs) -> None:
        a, b = self.adapter
        t = self.workspace["t"]
        self._xa[self._xa_cfg](t, bufs["x"], a)
        self._proj[self._proj_cfg](bufs["y"], bufs["x"], bufs["w"], t, b, float32(self.scale))


def build(shape) -> PerForward:
    return PerForward(shape, bool(shape.get("rotate", 0)))
