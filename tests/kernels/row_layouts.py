"""Rows laid out as the activation quantisers' fallbacks must take them
(``nvfp4_act``, ``rowquant``, ``q8_blocks``, whose wide paths read 16
bytes a lane): a C-contiguous view whose first element is not 16-byte
aligned (the kernels' own element loads), and a strided device view (the
launchers' element kernels)."""

from __future__ import annotations

import numpy as np


def odd_layouts(base: np.ndarray, k: int, off: int):
    """``(unaligned, strided, strided_host)`` of ``base``'s rows (at least
    ``off + k`` columns): ``unaligned`` its flat elements from the second
    on as ``[m, k]`` rows, 2 or 4 bytes past 16; ``strided`` columns ``off
    .. off + k`` of a device copy, a kernel argument as it is, and
    ``strided_host`` the same columns on the host."""
    from numba import cuda

    m = base.shape[0]
    unaligned = base.reshape(-1)[1 : 1 + m * k].reshape(m, k)
    assert unaligned.flags.c_contiguous and unaligned.ctypes.data % 16
    strided = cuda.to_device(base)[:, off : off + k]
    assert not strided.is_c_contiguous()
    return unaligned, strided, base[:, off : off + k]
