"""Decision tables of the Mamba2 family (Nemotron-H SSM layers, Metrale;
``kernels/mamba2/``)."""

from __future__ import annotations

from ..mamba2.prefill_scan.geometry import SSD_MAX_STATE
from .rules import Rule, Table, compare, flag, relation

# The prefill scan: the chunked SSD scan when ``ssd`` is on and the state
# size fits it (the engine's ``ssd_scan_fits(state_size)``: the shared
# memory of this project's SSD kernels, ``mamba2/prefill_scan/geometry.py``),
# else the persistent kernel when ``ssm_persistent`` is on, else the
# sequential scan.
_SSD_FITS = compare(
    "n",
    "<=",
    SSD_MAX_STATE,
    symbol="state",
    why="state size {n} does not fit the SSD scan's shared memory (at most {bound})",
)

PREFILL_SCAN = Table(
    path="mamba2.prefill_scan",
    summary="Mamba2 selective-state prefill scan over a prompt, carried state in and out",
    levers=("ssd", "ssm_persistent"),
    variants=("ssd", "persistent", "sequential"),
    engines=("metrale",),
    rules=(
        Rule("ssd", {"ssd": True}, (_SSD_FITS,)),
        Rule("persistent", {"ssd": True, "ssm_persistent": True}, note="ssd is on but {unmet}: the persistent kernel"),
        Rule("persistent", {"ssm_persistent": True}),
        Rule("sequential", {"ssd": True}, note="ssd is on but {unmet}, and ssm_persistent is off: sequential scan"),
        Rule("sequential"),
    ),
)

# The prefill projections: the W4A4 GEMM from 512 rows up when its kernels
# are loaded and the FP8 activation buffer holds the activations; otherwise
# the engine's default projection GEMM, which its lever file does not name:
# leverctl takes the W4A16 GEMM (as for the dense FFN's default arm). Both
# conditions are the shape's (``w4a4_loaded``, ``fp8_act``: the buffer's
# bytes), so a record states them; ``w4a4_min_rows`` is 512 but at smoke
# shapes, which lower it so that the simulator runs the W4A4 arm.
SSM_W4A4_MIN_ROWS = 512


def w4a4_min_rows(d) -> int:
    return d.get("w4a4_min_rows", SSM_W4A4_MIN_ROWS)


_W4A4_ROWS = compare(
    "m", ">=", SSM_W4A4_MIN_ROWS, symbol="rows", bound_at=w4a4_min_rows, why="{m} rows, fewer than {bound}"
)
_W4A4_LOADED = flag(
    "w4a4_loaded",
    on="W4A4 kernels loaded",
    off="W4A4 kernels not loaded",
    default=1,
    why="the W4A4 kernels are not loaded",
)
_FP8_ACT_FITS = relation(
    "fp8_act buffer >= rows x k",
    lambda d: d.get("fp8_act", d["m"] * d["k"]) >= d["m"] * d["k"],
    defaults={"fp8_act": None},
    why="the fp8_act buffer ({fp8_act} bytes) is smaller than {m} x {k} activations",
)

PREFILL_PROJ = Table(
    path="mamba2.prefill_proj",
    summary="Mamba2 SSM prefill in/out projection GEMM c = a W^T: W4A4 (NVFP4 activations) vs the default W4A16",
    levers=("ssm_w4a4",),
    variants=("w4a4", "w4a16"),
    engines=("metrale",),
    rules=(
        Rule("w4a4", {"ssm_w4a4": True}, (_W4A4_ROWS, _W4A4_LOADED, _FP8_ACT_FITS)),
        Rule("w4a16", {"ssm_w4a4": True}, note="ssm_w4a4 is on but {unmet}: the default W4A16 GEMM"),
        Rule("w4a16"),
    ),
)

TABLES = (PREFILL_SCAN, PREFILL_PROJ)
