"""The decode step both ``decode.per_sequence`` variants launch, and the
batch-1 views the per-sequence variant launches it on.

A step is the decode of a group of layers for a batch of ``n`` sequences:

* a model without MLA (Qwen3-Next): ``attention.decode_graph``'s eager
  step, the batched GDN decode of each GDN layer, then the paged decode's
  split and merge kernels of each attention layer (split count pinned to
  ``max_decode_seqs`` = 1, so it follows from each sequence's own length);
* an MLA model (DeepSeek-V3): ``attention.mla_decode``'s batched kernel,
  one launch per layer.

Buffers (``spec``): every layer's own inputs and outputs stacked on a
leading layer axis, ``[layer, n, ...]``; the batch's per-sequence tables
(GDN state ``slots``, the paged ``block_table``, ``context_lens``) are
``[n, ...]``; the pools they address (GDN ``state``, ``k_cache``,
``v_cache``) are shared by the batch.

``batched`` runs the step once, built for ``n``. ``per_sequence`` builds
the same step for a batch of one and runs it once per sequence ``i`` on
views: row ``i`` of each layer's inputs and outputs and of each table
(``x[layer][i:i+1]``, C-contiguous like the batch's arrays, so the same
compiled kernels serve them), the shared pools whole. Every block's work
depends on its own sequence alone and the split count on its own length,
so both variants write the same bits; what ``per_sequence`` adds is ``n``
times the launches, each of a grid ``n`` times smaller.

The views are made once per set of buffers (creating a device-array view
costs host time a real engine does not spend per step) and the buffers
held while they are in use.
"""

from __future__ import annotations

from typing import Any, Callable

from ...attention.decode_graph import eager
from ...attention.mla_decode import batched as mla_batched
from ...common.path import Shape

GDN_LAYERED = ("q", "k", "v", "g", "beta", "o")  # [gdn layer, n, ...]
ATTN_LAYERED = ("aq", "ao")  # [attention layer, n, ...]
MLA_LAYERED = ("q_nope", "q_pe", "c_kv", "k_pe", "o")  # [mla layer, n, ...]
TABLES = ("slots", "block_table", "context_lens")  # [n, ...], per sequence
POOLS = ("state", "k_cache", "v_cache")  # addressed through the tables, shared


def launches(shape) -> int:
    """Kernel launches of one step for the whole batch."""
    if shape["mla"]:
        return shape["mla_layers"]
    return shape["gdn_layers"] + 2 * shape["attn_layers"]


def _hybrid(shape: Shape, n: int):
    run = eager.build(Shape(shape.label, {**shape.dims, "n": n}))

    def view(b: dict, rows: slice, table_rows: Callable[[str], slice]) -> dict:
        out = {name: b[name] for name in POOLS}
        for names, count in ((GDN_LAYERED, shape["gdn_layers"]), (ATTN_LAYERED, shape["attn_layers"])):
            for nm in names:
                out[nm] = [b[nm][layer][rows] for layer in range(count)]
        out.update({name: b[name][table_rows(name)] for name in TABLES})
        return out

    return run, view, run.workspace


def _mla(shape: Shape, n: int):
    one = mla_batched.build(Shape(shape.label, {**shape.dims, "n": n}))

    def run(layers: list) -> None:
        for bufs in layers:
            one(bufs)

    def view(b: dict, rows: slice, table_rows: Callable[[str], slice]) -> list:
        lens = b["context_lens"][table_rows("context_lens")]
        return [
            {**{nm: b[nm][layer][rows] for nm in MLA_LAYERED}, "context_lens": lens}
            for layer in range(shape["mla_layers"])
        ]

    return run, view, one.workspace


def launcher(shape: Shape, per_sequence: bool, row_of: Callable[[str, int], int] | None = None):
    """``launch(bufs)``: the step once for the batch, or (``per_sequence``)
    once per sequence on its batch-1 views. ``row_of(table, i)`` (tests
    only) is the row of ``table`` (one of :data:`TABLES`) sequence ``i`` is
    handed: a broken variant that gives every sequence the first sequence's
    state slot, say, must fail the check."""
    n = shape["n"]
    run, view, workspace = (_mla if shape["mla"] else _hybrid)(shape, 1 if per_sequence else n)
    held: dict[str, Any] = {"key": None}

    def views(b: dict) -> list:
        if not per_sequence:
            return [view(b, slice(None), lambda table: slice(None))]
        return [view(b, slice(i, i + 1), _rows(i, row_of)) for i in range(n)]

    def launch(b: dict) -> None:
        key = tuple(id(b[k]) for k in sorted(b))
        if held["key"] != key:
            held.update(key=key, bufs=dict(b), views=views(b))  # the views address these: keep them alive
        for v in held["views"]:
            run(v)

    launch.workspace = workspace
    return launch


def _rows(i: int, row_of: Callable[[str, int], int] | None) -> Callable[[str], slice]:
    """Table name -> the rows of it sequence ``i`` reads: its own."""
    if row_of is None:
        return lambda table: slice(i, i + 1)
    return lambda table: slice(row_of(table, i), row_of(table, i) + 1)
