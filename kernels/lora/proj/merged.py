"""``merged``: the adapter folded into the weights once, at load (Atlas
``lora_eager``): ``W' = W + s B A`` by one merge kernel, in fp16 (the base
weights' format; fp32 sums, one rounding per weight), after which every
call is the plain base GEMV/GEMM on ``W'`` -- one launch, no adapter work.

A swap (``lora_rotate`` on) re-merges: ``W' = W + s B_new A_new`` from the
base weights, which a rotatable merged model has to keep (un-merging by
subtraction would leave one more fp16 rounding in the weights at every
swap). That costs a pass over the whole weight matrix per projection
(read ``W``, write ``W'``). Had the base weights been int4 (W4A16), the
merge would go into a dequantised fp16 copy: merging into int4 would
requantise the adapter away.
"""

from __future__ import annotations

import numpy as np
from numba import cuda, float32

from .. import _kernels as K
from .._adapter import AdapterLaunch

SWAP = "remerge"


class Merged(AdapterLaunch):
    swap_kind = SWAP

    def __init__(self, shape, rotate: bool):
        super().__init__(shape, rotate)
        m, n, k = shape["m"], shape["n"], shape["k"]
        self._merge, self._proj = K.make_merge(), K.make_proj(False)
        self._merge_cfg, self._proj_cfg = K.merge_grid(n, k), K.proj_grid(m, n)
        # The merged weights live as long as the loaded model: not scratch.
        self.merged = cuda.device_array((n, k), dtype=np.float16)
        self._unused_t = cuda.device_array((1, 1), dtype=np.float32)  # the fused epilogue's operand, not read
        self._base = None

    def _remerge(self, a, b) -> None:
        self._merge[self._merge_cfg](self.merged, self._base, a, b, float32(self.scale))

    def _load(self, w, a, b) -> None:
        self._base = w
        self._remerge(a, b)

    def _swap(self, a, b) -> None:
        self._remerge(a, b)

    def _forward(self, bufs) -> None:
        self._proj[self._proj_cfg](bufs["y"], bufs["x"], self.merged, self._unused_t, self.adapter[1], float32(0.0))


def build(shape) -> Merged:
    return Merged(shape, bool(shape.get("rotate", 0)))
