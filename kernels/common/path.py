"""The kernel-path contract.

A *kernel path* is one place in the engine's forward pass where levers choose
between kernels (the decode GEMV, the GDN verify step...). Each family folder
declares its paths with :class:`KernelPath`; the bench plans, runs, checks and
times them through this declaration alone and knows nothing else about them.

Levers reach a path only as resolved values (``field -> value``), handed to
``select`` and, through the chosen :class:`Variant`, to a kernel factory as
compile-time constants. Nothing here or under ``kernels/`` reads the process
environment.

This module imports neither numba nor numpy at import time, so the CLI can
describe paths cheaply; the families import them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Callable, Mapping

from ..selection.rules import Choice, Table  # what select() returns; declared beside the decision tables


@dataclass(frozen=True)
class Shape:
    """One problem size. ``label`` is a readable id (``"m1-n37-k256"``);
    ``dims`` the named sizes the family's makers read."""

    label: str
    dims: Mapping[str, int]

    def __post_init__(self) -> None:
        object.__setattr__(self, "dims", MappingProxyType(dict(self.dims)))

    def __getitem__(self, key: str) -> int:
        return self.dims[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self.dims.get(key, default)

    def as_dict(self) -> dict[str, Any]:
        return {"label": self.label, **dict(self.dims)}

    def __hash__(self) -> int:  # MappingProxyType is unhashable
        return hash((self.label, tuple(sorted(self.dims.items()))))


@dataclass(frozen=True)
class Tolerance:
    """Pass when ``||y - ref||_2 / ||ref||_2 <= rel`` and, per output,
    ``max|y - ref| <= abs + abs_of_max * max|ref|``.

    The relative bound is a norm: at model shapes one wrong element, row or
    token among millions barely moves it. The absolute bound is what catches
    those, and it only can if it follows the output's scale at each shape
    (GDN's outputs are ~0.05 at model shapes; a fixed 5e-3 is 10 % of that).
    So a path declares ``abs_of_max``: the largest error any one element may
    have, as a fraction of the output's largest reference magnitude. ``abs``
    is a fixed floor (0 for the families; an all-zero output then has to be
    exact)."""

    rel: float
    abs: float = 0.0
    abs_of_max: float = 0.0

    def abs_bound(self, ref: Any) -> float:
        """The absolute bound for one output whose reference is ``ref`` (an
        array or its largest magnitude)."""
        scale = ref if isinstance(ref, (int, float)) else _max_magnitude(ref)
        return self.abs + self.abs_of_max * scale


def _max_magnitude(a: Any) -> float:
    import numpy as np  # not at import time: the CLI describes paths without numpy

    a = np.asarray(a, dtype=np.float64)
    return float(np.max(np.abs(a))) if a.size else 0.0


@dataclass(frozen=True)
class Traffic:
    """Per call: the fewest bytes the path must move through device memory
    (each input read once, each output written once, plus any state round
    trips the variant makes by design) and its floating-point operations."""

    bytes_read: int
    bytes_written: int
    flops: int
    # Of ``flops``, those a tensor-core variant runs on the tensor cores,
    # where it runs only some (the rest on FP32 FMAs); None: all of them.
    tc_flops: int | None = None

    @property
    def bytes(self) -> int:
        return self.bytes_read + self.bytes_written


# launch(bufs): enqueue the variant's kernel launch(es) on the default stream.
# ``bufs`` maps every input and output name to a device array.
#
# A variant that allocates device scratch in ``build`` (intermediates between
# its kernels) attaches it to the launch it returns, ``launch.workspace =
# {name: device array}``: the bench poisons it before every correctness run,
# like the outputs, so a kernel that reads scratch nobody wrote this call
# (last call's leftovers, say) fails instead of passing on stale values.
Launch = Callable[[dict], None]


PRESETS = ("smoke", "model")  # the shape presets every path's ``shapes`` takes


def check_preset(preset: str) -> None:
    """A ValueError unless ``preset`` is one of :data:`PRESETS`."""
    if preset not in PRESETS:
        raise ValueError(f"unknown shape preset {preset!r} (smoke or model)")


def workspace_of(launch: Launch) -> Mapping[str, Any]:
    """The device scratch ``launch`` declared (empty when none)."""
    return getattr(launch, "workspace", None) or {}


# The tensor-core instructions and input types a variant may declare.
TC_INSTRUCTIONS = ("mma.sync", "wgmma")
TC_DTYPES = ("f16", "bf16", "e4m3", "s8", "e4m3-via-f16")


def tensor_cores_of(launch: Launch, variant: "Variant") -> tuple[str | None, str | None]:
    """(instruction, input type) a built launch runs on: the launch's own
    attributes where it carries them (chosen at build time by device), else
    the variant's declaration."""
    return (getattr(launch, "tensor_cores", variant.tensor_cores), getattr(launch, "tc_dtype", variant.tc_dtype))


@dataclass(frozen=True)
class Variant:
    """One kernel (or fixed sequence of kernels) the levers can choose.

    ``build(shape)`` compiles through a factory cached by its compile-time
    key, allocates any scratch it needs on the device, and returns a
    :data:`Launch`. It is called outside any timed region.
    """

    name: str
    summary: str
    build: Callable[[Shape], Launch]
    tolerance: Tolerance | None = None  # overrides the path's when set
    # Bytes/FLOPs when they differ from the path's (e.g. a variant that
    # round-trips state through global memory); None uses the path's traffic.
    traffic: Callable[[Shape], Traffic] | None = None
    # Kernel launches one call makes: a number, or shape -> number (one per
    # sequence, say). The roofline floor pays a launch latency for each, and
    # where the variants of a path differ in it the bench also times the call
    # with the host's launch cost included.
    launches: int | Callable[[Shape], int] = 1
    # The tensor-core instruction the variant runs on: "mma.sync" (warp MMA),
    # "wgmma" (Hopper's warpgroup MMA), or None for FP32 CUDA cores. Every
    # record says it, so a timing is never taken for the engine's
    # tensor-core kernel when it is not one.
    tensor_cores: str | None = None
    # The tensor cores' input type: "f16", "bf16", "e4m3", "s8", or
    # "e4m3-via-f16" (mma.sync's E4M3 form, which sm_90 runs on the FP16
    # datapath). It picks the peak the roofline's compute floor is drawn at.
    # A variant that decides either at build time (by device) sets it on
    # the launch it returns instead (``launch.tensor_cores``,
    # ``launch.tc_dtype``); the record takes the launch's over these.
    tc_dtype: str | None = None

    def __post_init__(self) -> None:
        if self.tensor_cores not in (None, *TC_INSTRUCTIONS):
            raise ValueError(f"variant {self.name}: tensor_cores {self.tensor_cores!r}: one of {TC_INSTRUCTIONS}")
        if self.tc_dtype not in (None, *TC_DTYPES):
            raise ValueError(f"variant {self.name}: tc_dtype {self.tc_dtype!r}: one of {TC_DTYPES}")


@dataclass(frozen=True)
class KernelPath:
    name: str  # "w4a16.gemv": family.path
    family: str
    summary: str
    # Lever fields (catalog field names) that choose the variant, in the order
    # the sweep enumerates them.
    levers: tuple[str, ...]
    # Value a lever takes when the engine's catalog does not have it (Atlas
    # has no `decode_split_silu`, say): the engine's fixed behaviour there.
    lever_defaults: Mapping[str, Any]
    variants: Mapping[str, Variant]
    # (resolved lever values restricted to `levers`, shape) -> Choice
    select: Callable[[Mapping[str, Any], Shape], Choice]
    # (preset, recipe's [model] table or None) -> shapes. "smoke": tiny, odd,
    # simulator-sized; "model": from the recipe, falling back to a default model.
    shapes: Callable[[str, Mapping[str, Any] | None], list[Shape]]
    # (shape, numpy Generator) -> host input arrays, in the real layouts.
    make_inputs: Callable[[Shape, Any], dict]
    # shape -> {name: (shape tuple, numpy dtype str)} for outputs the bench
    # allocates and poisons with NaN before every run. An output whose name is
    # also an input is updated in place (a carried recurrent state) and is
    # checked after the run.
    outputs: Callable[[Shape], Mapping[str, tuple[tuple[int, ...], str]]]
    # (shape, host inputs) -> float64 expected outputs (the family's naive.py)
    reference: Callable[[Shape, dict], dict]
    traffic: Callable[[Shape], Traffic]
    tolerance: Tolerance
    # Engines that have this path at all ("atlas", "metrale"); empty = every
    # engine whose catalog has at least one of `levers`.
    engines: tuple[str, ...] = ()
    # Memory-bound paths are compared against the measured copy bandwidth,
    # compute-bound ones against the rate of the instruction their variant
    # runs on (FP32, or the BF16/FP8 tensor-core peak); the bench takes the
    # larger floor.
    notes: str = ""
    extra: Mapping[str, Any] = field(default_factory=dict)
    # Variants no lever selects that bench and sweep run beside whatever the
    # levers select, for contrast (a serving library's way of doing what the
    # engine does otherwise). Their records say ``baseline: true``.
    baselines: tuple[str, ...] = ()
    # (levers, shape, engine) -> the shape the run takes. Where a lever's value
    # reaches the run itself and not only the choice of variant (a split
    # count pinned to a serve setting, what fills a fresh KV block), ``bind``
    # adds it to the shape's dims (the label stays), where ``build``,
    # ``make_inputs`` and ``reference`` read it. None: levers only choose.
    bind: Callable[[Mapping[str, Any], Shape, str], Shape] | None = None

    def variant_tolerance(self, variant: str) -> Tolerance:
        return self.variants[variant].tolerance or self.tolerance

    def variant_traffic(self, variant: str, shape: Shape) -> Traffic:
        v = self.variants[variant]
        return (v.traffic or self.traffic)(shape)

    def variant_launches(self, variant: str, shape: Shape) -> int:
        n = self.variants[variant].launches
        return int(n(shape) if callable(n) else n)

    def launches_vary(self, shape: Shape) -> bool:
        """Whether the levers choose between different numbers of launches
        at ``shape`` (then the host's launch cost is part of the choice)."""
        return len({self.variant_launches(v, shape) for v in self.variants}) > 1


# A GEMM's memory trace (``extra["profile_shape"]``, ``extra["profile_blocks"]``):
# its rows and columns cut to 128, which holds a whole tile of every GEMM in
# the project (the tiles are 64 or 128 rows by 64 or 128 columns), its K and
# every other dimension the model's, and one block a launch traced: a tile
# walks the whole K, a few seconds of the simulator's time per 1024 of it.
GEMM_PROFILE_TILE = 128
GEMM_PROFILE_BLOCKS = 1


def gemm_profile_shape(shape: Shape, *, rows: str = "m", cols: str | None = "n") -> Shape:
    """The memory trace's shape for a GEMM at model ``shape``: its ``rows``
    (and ``cols``, where the GEMM's columns are a dimension of their own)
    cut to :data:`GEMM_PROFILE_TILE`, everything else kept: the row length
    ``K``, so the operands' strides and alignment are the model's, and the
    tile that is traced is whole, as the model's interior tiles are (the
    smoke shapes' tiles are partial by design). The label's first word
    becomes ``profile`` and the cut sizes are written into it."""
    cut = {d: min(int(shape[d]), GEMM_PROFILE_TILE) for d in (rows, cols) if d}
    words = shape.label.split()
    if words and words[0] in ("model", "smoke"):
        words = words[1:]
    for i, w in enumerate(words):
        for d, v in cut.items():
            if w.startswith(d) and w[len(d) :].isdigit():
                words[i] = f"{d}{v}"
    return Shape(" ".join(["profile", *words]), {**shape.dims, **cut})


def declared_path(table: Table, variants: Mapping[str, Variant], **fields: Any) -> KernelPath:
    """The one way a path is declared: the path ``table`` decides. Its name,
    family, summary, levers, the levers' fixed values, engines, baselines
    and ``select`` come from the table; ``variants`` (name -> Variant) must
    be exactly the table's, and are listed in its order; ``fields`` are the
    rest of the :class:`KernelPath` (shapes, inputs, reference, traffic...),
    with a ``bind`` exactly where the table says a lever binds the run."""
    if set(variants) != set(table.variants):
        raise ValueError(f"{table.path}: variants {sorted(variants)} are not the table's {sorted(table.variants)}")
    for name, v in variants.items():
        if v.name != name:
            raise ValueError(f"{table.path}: variant {name!r} is declared as {v.name!r}")
    if (fields.get("bind") is not None) != bool(table.binds):
        raise ValueError(
            f"{table.path}: the table says levers {sorted(table.binds)} bind the run; "
            f"the declaration {'has' if fields.get('bind') else 'has no'} bind"
        )
    for taken in ("name", "family", "summary", "levers", "lever_defaults", "select", "engines", "baselines"):
        if taken in fields:
            raise TypeError(f"{table.path}: {taken} comes from the decision table")
    return KernelPath(
        name=table.path,
        family=table.family,
        summary=table.summary,
        levers=table.levers,
        lever_defaults=table.fixed,
        variants={v: variants[v] for v in table.variants},
        select=table.select,
        engines=table.engines,
        baselines=table.baselines,
        **fields,
    )
