"""What both variants share: the launch object that holds the loaded
adapter, and the refusal of a swap when rotation is not permitted.

A call is ``launch(bufs)`` with the bench's buffers: ``x``, ``w`` (base
weights), ``a``, ``b`` (the adapter loaded with them) and ``y``. A new set of
``w``/``a``/``b`` arrays is a new load: the variant takes that adapter (the
merged variant merges it, once). ``launch.swap(a, b)`` replaces the adapter
between calls, as the engine does on rotation: the next call must use the
new one. With rotation not permitted (``lora_rotate`` off) the swap is
refused (:class:`SwapRefused`) and the loaded adapter stays.
"""

from __future__ import annotations


class SwapRefused(RuntimeError):
    """A swap asked of a launch whose levers do not permit rotation."""


class AdapterLaunch:
    """Base of the two variants' launches. ``_load`` and ``_swap`` are the
    variant's; ``__call__`` runs ``_forward``."""

    swap_kind = ""  # what a swap costs: "pointer" (per-forward) or "remerge" (merged)

    def __init__(self, shape, rotate: bool):
        self.shape = shape
        self.rotate = bool(rotate)
        self.scale = float(shape["alpha"]) / float(shape["r"])
        self.workspace = {}
        self._loaded = None  # the (w, a, b) arrays of the current load, held so their ids stay theirs
        self.adapter = None  # the (a, b) device arrays in use

    def _ensure_loaded(self, bufs) -> None:
        key = (bufs["w"], bufs["a"], bufs["b"])
        if self._loaded is None or any(p is not q for p, q in zip(key, self._loaded)):
            self._loaded = key
            self.adapter = (bufs["a"], bufs["b"])
            self._load(bufs["w"], bufs["a"], bufs["b"])

    def load(self, bufs) -> None:
        """The load-time work for these buffers (the merge, for ``merged``),
        done once: a call on them then only runs the forward."""
        self._ensure_loaded(bufs)

    def __call__(self, bufs) -> None:
        self._ensure_loaded(bufs)
        self._forward(bufs)

    def swap(self, a, b) -> None:
        """Install adapter ``(a, b)`` (device arrays, ``[r, k]`` and
        ``[n, r]``) for the calls that follow."""
        if not self.rotate:
            raise SwapRefused("lora_rotate is off: the loaded adapter cannot be swapped at run time")
        if self._loaded is None:
            raise RuntimeError("swap before the first call: no adapter is loaded yet")
        self.adapter = (a, b)
        self._swap(a, b)

    def _load(self, w, a, b) -> None:  # pragma: no cover - the variants'
        raise NotImplementedError

    def _swap(self, a, b) -> None:  # pragma: no cover - the variants'
        raise NotImplementedError

    def _forward(self, bufs) -> None:  # pragma: no cover - the variants'
        raise NotImplementedError
