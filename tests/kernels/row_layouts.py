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
    on as ``[m, k]`` rows of a device copy, 2 or 4 bytes past 16
    (``unaligned.copy_to_host()`` the same rows on the host); ``strided``
    columns ``off .. off + k`` of a device copy, and ``strided_host`` the
    same columns on the host. Both are device views, kernel arguments as
    they are: the simulator copies a host array it is given into a buffer
    of its own, which starts on 16 bytes, so a host view would reach a
    kernel aligned after all."""
    from numba import cuda

    from leverctl_kernels.common import vload

    m = base.shape[0]
    unaligned = cuda.to_device(base.reshape(-1))[1 : 1 + m * k].reshape(m, k)
    assert unaligned.is_c_contiguous() and not vload.aligned16(unaligned)
    strided = cuda.to_device(base)[:, off : off + k]
    assert not strided.is_c_contiguous()
    return unaligned, strided, base[:, off : off + k]
