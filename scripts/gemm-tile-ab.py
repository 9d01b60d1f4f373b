#!/usr/bin/env python3
"""The dense GEMM engine's 64-row tile on one warpgroup against two (one on
each column half: ``kernels/common/gemm/pipeline.py``'s ``wn``), each with
its activations copied by TMA and by ``cp.async`` (``pipeline.COPIES``), on
a GPU: the same inputs through the four builds of an int4-weight GEMM (``bf16_v1``'s
int4 -> bf16, the BF16 arm the peak-share target is set for, by default;
``--gemm w4a16`` for ``w4a16.gemm`` ``default_tiles``' int4 -> fp16, or
``all``; 64 x 128 tiles, wgmma), timed by the bench's rig (L2 flushed
before each sample, gated batches), each output compared between the
layouts.

    scripts/gemm-tile-ab.py [-m 4096] [-n 24576] [-k 4096] [--gemm bf16_v1|w4a16|all]
                            [-o tiles.json] [--device gpu|sim]

Each line: the GEMM, its layout and copies, the median microseconds,
TFLOP/s and its share of the measured BF16 tensor-core peak, and whether
the builds' outputs are the same bits (each output element is one
thread's sum over the same K steps in every build: how the operands reach
shared memory changes no value). ``--device sim`` runs every build once in
the CUDA simulator, at a small shape, untimed: the comparison alone.
Without a GPU (``--device gpu``), one line on stderr, exit 2.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LAYOUTS = {"one warpgroup": (1, 1), "two warpgroups, one a column half": (2, 2)}  # (warpgroups, along BN)
COPIES = ("tma", "cp.async")
BN = 128


def _args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-m", type=int, default=4096)
    ap.add_argument("-n", type=int, default=24576)
    ap.add_argument("-k", type=int, default=4096)
    ap.add_argument("-o", "--out", type=Path, default=None)
    ap.add_argument("--device", choices=("gpu", "sim"), default="gpu")
    ap.add_argument("--gemm", choices=("bf16_v1", "w4a16", "all"), default="bf16_v1")
    a = ap.parse_args(argv)
    if min(a.m, a.n, a.k) <= 0 or a.k % 128:
        ap.error(f"m, n, k positive and k a multiple of 128 (a scale group), not {a.m} x {a.n} x {a.k}")
    return a


def _gemms(m: int, n: int, k: int, rng):
    """key -> (the GEMM's name, build(wgs, wn, copy) -> launch(c)), on shared random inputs."""
    import numpy as np
    from numba import cuda

    from leverctl_kernels.common import bits
    from leverctl_kernels.common.gemm import wgmma_async as G
    from leverctl_kernels.ffn.prefill import _wgmma_bf16
    from leverctl_kernels.w4a16.gemm import gemm_tc

    x = rng.standard_normal((m, k)).astype(np.float32)
    q = cuda.to_device(rng.integers(0, 2**32, (n, k // 8), dtype=np.uint64).astype(np.uint32))
    scales = cuda.to_device((rng.uniform(0.5, 1.5, (n, k // 128)) / 64).astype(np.float16))
    a_bf16 = cuda.to_device(bits.f32_to_bf16_np(x))
    a_f16 = cuda.to_device(x.astype(np.float16))
    shape = {"m": m, "n": n, "k": k}

    def bf16_v1(wgs, wn, copy):
        kern = G.kernel("bf16", wgs, BN, _wgmma_bf16.STAGES, b_kind="int4_bf16", wn=wn, copy=copy)
        run = _wgmma_bf16.build_with(shape, wgs, BN, kern=kern, wn=wn)
        return lambda c: run({"c": c, "a_bf16": a_bf16, "qweight": q, "scales": scales})

    def w4a16(wgs, wn, copy):
        kern = G.kernel("f16", wgs, BN, 4, b_kind="int4_f16", wn=wn, copy=copy)
        run = gemm_tc.make_launch(m, n, k, kern)
        return lambda c: run(c, a_f16, q, scales)

    return {"bf16_v1": ("bf16_v1 (int4 -> bf16)", bf16_v1), "w4a16": ("w4a16.gemm default_tiles (int4 -> f16)", w4a16)}


def main(argv=None) -> int:
    a = _args(argv)
    if a.device == "sim":
        os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
    sys.path.insert(0, str(ROOT))
    import numpy as np
    from numba import cuda

    if a.device == "gpu" and not cuda.is_available():
        print("gemm-tile-ab: no CUDA GPU here (--device sim runs the comparison in the simulator)", file=sys.stderr)
        return 2
    if a.device == "sim":
        from leverctl_kernels.common import simwarp

        simwarp.install()
    rig = None
    if a.device == "gpu":
        from leverctl.bench.timing import GpuRig, StopRule

        rig, rule = GpuRig(), StopRule(max_seconds=3.0)
        peak = rig.bf16_tflops()
    rows, flops = [], 2.0 * a.m * a.n * a.k
    gemms = _gemms(a.m, a.n, a.k, np.random.default_rng(0))
    for key in gemms if a.gemm == "all" else (a.gemm,):
        name, build = gemms[key]
        outs = []
        for layout, (wgs, wn) in LAYOUTS.items():
            for copy in COPIES:
                c = cuda.device_array((a.m, a.n), np.float16)
                launch = build(wgs, wn, copy)
                launch(c)
                cuda.synchronize()
                outs.append(c.copy_to_host())
                row = {"gemm": name, "layout": layout, "copies": copy, "m": a.m, "n": a.n, "k": a.k}
                if rig is not None:
                    us = rig.time(lambda launch=launch, c=c: launch(c), rule).median_us
                    tflops = flops / us / 1e6
                    row.update(us=us, tflops=tflops, peak_share=tflops / peak if peak else None)
                rows.append(row)
        first = outs[0]
        builds = rows[-len(outs) :]
        for row, out in zip(builds, outs):  # each build against the first (one warpgroup, TMA)
            row.update(
                same_bits=bool(np.array_equal(first.view(np.uint16), out.view(np.uint16))),
                max_abs_diff=float(np.nanmax(np.abs(first.astype(np.float64) - out.astype(np.float64)))),
            )
        for row in builds:
            timing = ""
            if "us" in row:
                share = f", {row['peak_share']:.0%} of the BF16 peak" if row["peak_share"] else ""
                timing = f": {row['us']:.1f} us, {row['tflops']:.1f} TFLOP/s{share}"
            print(f"{row['gemm']}, {row['layout']}, copies by {row['copies']}{timing}")
        same, diff = all(r["same_bits"] for r in builds), max(r["max_abs_diff"] for r in builds)
        print(
            f"{name}: the {len(builds)} builds' outputs {'are the same bits' if same else f'differ, at most {diff:g}'}"
        )
    if a.out:
        tmp = a.out.with_suffix(a.out.suffix + ".tmp")
        tmp.write_text(json.dumps({"device": a.device, "rows": rows}, indent=1))
        tmp.replace(a.out)
    return 0 if all(r["same_bits"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
