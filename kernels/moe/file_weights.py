"""Expert weights from a model file (``leverctl bench --weights``), as the
MoE paths' ``WeightUse.apply`` reads them.

A :class:`Stack` is one weight a kernel reads: the routed experts' gate
and up stacked (``[E, 2I, H]``, gate rows first, as ``wgu`` and
``up_fp4`` hold them), or one tensor alone (down, a non-gated up, the
shared expert's, ``[E, n, k]``; a 2-D shared-expert tensor is one expert).
It gives the weight in each format the kernels read, encoding only the
experts a run routes to (the file keeps all of its experts; the routing
draws over them), each expert once:

* int4 (W4A16): always made from the decoded values (``common.int4``'s
  round-to-nearest, an fp16 scale per 128 inputs), as drawn weights are;
* NVFP4: the file's packed E2M1 codes, E4M3 block scales and global scale
  *as stored* where every tensor of the stack is NVFP4 with one global
  scale per expert (gate and up stacked need the same one), otherwise
  encoded (``bits.nvfp4_encode_np``);
* FP8 with 128 x 128 block scales: the file's E4M3 bytes and block scales
  as stored where every tensor is FP8 in such blocks and a stack's tensors
  meet on a block boundary (gate's ``n`` a multiple of 128), otherwise
  encoded (``formats.fp8_encode``).

Every check of the tensors raises ``WeightMismatch`` with one line.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import numpy as np

from ..common import bits, int4
from ..common import weight_fit as fit
from ..common.model_weights import ModelTensor, WeightMismatch
from ._decode import FP8_BLOCK
from .formats import _DUMMY, fp8_encode, nvfp4_from


class Stack:
    """``tensors`` stacked along their output rows (all ``[E, n_j, k]``, or
    all ``[n_j, k]`` for one expert)."""

    def __init__(self, tensors: Sequence[ModelTensor], path: str, rank: int = 3):
        self.tensors = list(tensors)
        shapes = [fit.dims(t, rank, path) for t in self.tensors]
        first = self.tensors[0]
        for t, s in zip(self.tensors[1:], shapes[1:]):
            if rank == 3:
                fit.agree(first, "experts", shapes[0][0], t, "experts", s[0], "stacked experts are the same experts")
            fit.agree(first, "n", shapes[0][-2], t, "n", s[-2], "gate and up are multiplied element by element")
            fit.agree(first, "k", shapes[0][-1], t, "k", s[-1], "gate and up read the same x")
        for t, shape in zip(self.tensors, shapes):
            _stored_forms_fit(t, shape)
        self.rank = rank
        self.experts = shapes[0][0] if rank == 3 else 1
        self.n = sum(s[-2] for s in shapes)
        self.k = shapes[0][-1]
        self._int4: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self._nvfp4: dict[int, tuple[np.ndarray, np.ndarray, np.float32]] = {}
        self._fp8: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    # ── what the tensors are ────────────────────────────────────────────

    def names(self) -> str:
        return "+".join(t.name for t in self.tensors)

    def kinds(self) -> str:
        return "/".join(dict.fromkeys(t.stored for t in self.tensors))

    def _per_expert(self, a: Any, e: int) -> Any:
        return a if self.rank == 2 else a[e]

    def values(self, e: int) -> np.ndarray:
        """float32 ``[n, k]``: expert ``e``'s decoded values, stacked."""
        parts = [np.asarray(self._per_expert(t.values, e), np.float32) for t in self.tensors]
        return parts[0] if len(parts) == 1 else np.concatenate(parts, axis=0)

    def multiple(self, what: str, of: int, why: str) -> None:
        """``k`` (``what`` in the path's words) a multiple of ``of``."""
        fit.multiple(self.tensors[0], f"k ({what})", self.k, of, why)

    # ── int4 ────────────────────────────────────────────────────────────

    def int4_expert(self, e: int) -> tuple[np.ndarray, np.ndarray]:
        if e not in self._int4:
            self._int4[e] = int4.quantize_w4(self.values(e))
        return self._int4[e]

    def int4(self, touched) -> dict:
        """W4A16 ``[E, n, k]`` (``formats``' a/b/c), the touched experts
        quantised from their decoded values, the others zero."""
        qa = np.zeros((self.experts, self.n, int4.n_words(self.k)), np.uint32)
        sb = np.zeros((self.experts, self.n, int4.n_groups(self.k)), np.float16)
        for e in touched:
            qa[e], sb[e] = self.int4_expert(e)
        return {"a": qa, "b": sb, "c": _DUMMY}

    # ── NVFP4 ───────────────────────────────────────────────────────────

    def _global(self, t: ModelTensor) -> np.ndarray:
        """The global scale of each expert of ``t`` (float32 ``[E]``)."""
        g = np.asarray(t.nvfp4_global, np.float32)
        return np.broadcast_to(g, (self.experts,)) if g.ndim == 0 else g.reshape(self.experts)

    def nvfp4_stored(self) -> bool:
        """Whether the stack is the file's NVFP4 as stored: every tensor
        NVFP4, and one global scale per expert across the stack."""
        if not all(t.nvfp4 is not None and t.nvfp4_global is not None for t in self.tensors):
            return False
        g = [self._global(t) for t in self.tensors]
        return all(np.array_equal(g[0], x) for x in g[1:])

    def nvfp4_expert(self, e: int) -> tuple[np.ndarray, np.ndarray, np.float32]:
        """``(packed [n, k/2], block scales [n, k/16], global)`` of expert ``e``."""
        if e not in self._nvfp4:
            if self.nvfp4_stored():
                packed = [np.asarray(self._per_expert(t.nvfp4, e), np.uint8) for t in self.tensors]
                scales = [np.asarray(self._per_expert(t.nvfp4_scale, e), np.uint8) for t in self.tensors]
                self._nvfp4[e] = (
                    np.concatenate(packed, axis=0),
                    np.concatenate(scales, axis=0),
                    np.float32(self._global(self.tensors[0])[e]),
                )
            else:
                self._nvfp4[e] = bits.nvfp4_encode_np(self.values(e))
        return self._nvfp4[e]

    def nvfp4(self, touched) -> dict[str, np.ndarray]:
        """NVFP4 ``[E, n, k]`` as the prefill kernels read it (``fp4``,
        ``sc``, ``ts``): the touched experts', the others zero (unit
        global scale)."""
        fp4 = np.zeros((self.experts, self.n, self.k // 2), np.uint8)
        sc = np.zeros((self.experts, self.n, self.k // bits.NVFP4_BLOCK), np.uint8)
        ts = np.ones(self.experts, np.float32)
        for e in touched:
            fp4[e], sc[e], ts[e] = self.nvfp4_expert(e)
        return {"fp4": fp4, "sc": sc, "ts": ts}

    def nvfp4_or_from(self, w4: dict, touched) -> dict:
        """The decode kernels' NVFP4 (``formats``' a/b/c): as stored, or,
        as for drawn weights, the int4 weights ``w4`` re-encoded."""
        if not self.nvfp4_stored():
            return nvfp4_from(w4, touched)
        w = self.nvfp4(touched)
        return {"a": w["fp4"], "b": w["sc"], "c": w["ts"]}

    # ── FP8, 128 x 128 blocks ───────────────────────────────────────────

    def fp8_stored(self) -> bool:
        """Whether the stack is the file's FP8 as stored: every tensor E4M3
        with 128 x 128 block scales, each but the last a whole number of
        row blocks (so the stack's blocks are the tensors')."""
        if not all(t.fp8 is not None and t.fp8_scale_kind == "block128" for t in self.tensors):
            return False
        return all(t.n % FP8_BLOCK == 0 for t in self.tensors[:-1])

    def fp8_expert(self, e: int) -> tuple[np.ndarray, np.ndarray]:
        if e not in self._fp8:
            if self.fp8_stored():
                codes = [np.asarray(self._per_expert(t.fp8, e), np.uint8) for t in self.tensors]
                scales = [np.asarray(self._per_expert(t.fp8_scale, e), np.float32) for t in self.tensors]
                self._fp8[e] = (np.concatenate(codes, axis=0), np.concatenate(scales, axis=0))
            else:
                self._fp8[e] = fp8_encode(self.values(e))
        return self._fp8[e]

    def fp8(self, touched) -> dict:
        """FP8 ``[E, n, k]`` with block scales (``formats``' a/b/c), the
        touched experts', the others zero codes and unit scales."""
        codes = np.zeros((self.experts, self.n, self.k), np.uint8)
        scales = np.ones((self.experts, -(-self.n // FP8_BLOCK), -(-self.k // FP8_BLOCK)), np.float32)
        for e in touched:
            codes[e], scales[e] = self.fp8_expert(e)
        return {"a": codes, "b": scales, "c": _DUMMY}


def _stored_forms_fit(t: ModelTensor, shape: tuple[int, ...]) -> None:
    """The stored forms ``t`` carries cover its values: NVFP4 codes
    ``[..., n, k/2]`` and block scales ``[..., n, k/16]``; FP8 bytes
    ``[..., n, k]`` and 128 x 128 block scales ``[..., ceil(n/128),
    ceil(k/128)]``."""
    *lead, n, k = shape
    want = []
    if t.nvfp4 is not None:
        fit.multiple(t, "k", k, bits.NVFP4_BLOCK, "an NVFP4 block scale covers 16 inputs")
        want += [("NVFP4 codes", t.nvfp4, (*lead, n, k // 2)), ("NVFP4 scales", t.nvfp4_scale, (*lead, n, k // 16))]
    if t.fp8 is not None and t.fp8_scale_kind == "block128":
        blocks = (*lead, -(-n // FP8_BLOCK), -(-k // FP8_BLOCK))
        want += [("FP8 bytes", t.fp8, (*lead, n, k)), ("FP8 block scales", t.fp8_scale, blocks)]
    for what, a, expected in want:
        got = tuple(int(x) for x in np.shape(a))
        if got != expected:
            raise WeightMismatch(
                f"{t.name}: {what} have shape {list(got)}, not {list(expected)} for values {list(shape)}"
            )


def routed(
    tensors: Mapping[str, ModelTensor], path: str, gated: bool, k_multiple: int, why: str
) -> tuple[Stack, Stack]:
    """``(up, down)`` of a layer's routed experts: ``up`` gate+up stacked
    (``gated``) or up alone, ``[E, I, H]`` each, and down ``[E, H, I]``,
    the same experts; ``H`` and ``I`` multiples of ``k_multiple`` (``why``)."""
    ups = [fit.role(tensors, r, path) for r in (("ffn_gate_exps", "ffn_up_exps") if gated else ("ffn_up_exps",))]
    down = fit.role(tensors, "ffn_down_exps", path)
    return _pair(ups, down, path, 3, k_multiple, why)


def shared(tensors: Mapping[str, ModelTensor], path: str, k_multiple: int, why: str) -> tuple[Stack, Stack]:
    """``(up, down)`` of the shared expert: up ``[S, H]``, down ``[H, S]``."""
    up, down = (fit.role(tensors, r, path) for r in ("ffn_up_shexp", "ffn_down_shexp"))
    return _pair([up], down, path, 2, k_multiple, why)


def _pair(ups, down, path: str, rank: int, k_multiple: int, why: str) -> tuple[Stack, Stack]:
    up, dn = Stack(ups, path, rank), Stack([down], path, rank)
    first = ups[0]
    inter = up.n // len(ups)
    if rank == 3:
        fit.agree(first, "experts", up.experts, down, "experts", dn.experts, "down runs on the same experts")
    fit.agree(first, "n (intermediate)", inter, down, "k", dn.k, "down reads the activated intermediate")
    fit.agree(first, "k (hidden)", up.k, down, "n", dn.n, "down writes the hidden state")
    up.multiple("hidden", k_multiple, why)
    dn.multiple("intermediate", k_multiple, why)
    return up, dn


def top_k(wanted: int, experts: int) -> int:
    """The routing's ``top_k`` on a file of ``experts`` experts: the
    recipe's (or the default model's), at most every expert."""
    return max(1, min(int(wanted), int(experts)))


Arms = Mapping[str, Callable[[Stack], bool]]


def describe(stacks: Sequence[Stack], arms: Arms | Sequence[Arms]) -> str:
    """A label fragment: each weight's tensors, their stored formats and,
    per format the path's arms read, whether it is read as stored or
    re-encoded (``arms``: format -> whether a stack holds it as stored,
    for every stack or one mapping per stack); then the file's expert count
    (``"blk.0.ffn_gate_exps.weight+blk.0.ffn_up_exps.weight[NVFP4: int4
    re-encoded, nvfp4 as stored] 512 experts"``)."""
    per = [arms] * len(stacks) if isinstance(arms, Mapping) else list(arms)
    parts = []
    for s, own in zip(stacks, per):
        how = ", ".join(f"{fmt} {'as stored' if stored(s) else 're-encoded'}" for fmt, stored in own.items())
        parts.append(f"{s.names()}[{s.kinds()}: {how}]")
    experts = f" {stacks[0].experts} experts" if stacks[0].rank == 3 else ""
    return " + ".join(parts) + experts


def never(_: Stack) -> bool:
    """An arm no file stores (int4): always re-encoded."""
    return False


def on_nvfp4_file(on, stack: Stack, cross, exact, reference):
    """``on`` (an FP4 stage path on a file's experts) where the file holds
    NVFP4: the model's weights are those, so the reference is their decoded
    values (``reference``), the NVFP4 arm (reading them exactly) is held to
    ``exact`` (its arithmetic's bound) and int4, now the re-encoded arm, to
    ``cross``, the cross-format budget the NVFP4 arm carries for drawn
    weights. Any other file keeps ``on`` as it is (the int4 reference)."""
    import dataclasses

    if not stack.nvfp4_stored():
        return on
    tol = {"int4": cross, "nvfp4": exact}
    variants = {n: dataclasses.replace(v, tolerance=tol[n]) for n, v in on.variants.items()}
    return dataclasses.replace(on, variants=variants, reference=reference)
