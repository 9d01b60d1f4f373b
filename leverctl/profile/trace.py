"""The memory half of a profile, in its own process: each variant run once
in the CUDA simulator at its profile shape, every global and shared access
traced (:mod:`.memtrace`). The parent (``profile``, or ``bench --profile``
on a GPU) may hold a real GPU, which a simulator cannot share a process
with; so this runs as ``python -m leverctl.profile.trace`` with the
simulator chosen, reading one JSON request on stdin and writing one answer:

    request  {"cache": DIR, "items": [{"path", "variant", "selected",
              "shape": {"label", "dims"}}, ...]}
    answer   {"items": [{"kernel", "variant", "selected", "shape",
              "profile_shape", ...figures or "error"}, ...]}

Items sharing a variant and profile shape are traced once; a trace is
cached under ``DIR/memory`` by the source of the kernels modules the
variant reaches, the tracer's own source, the variant and the shape.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

from .run import Item


def profile_shapes(path, shape) -> list:
    """The shapes a variant's memory behaviour may be simulated at, best
    first: the path's own ``extra["profile_shape"](model shape)`` where it
    declares one (the model's row lengths and strides, few rows), else its
    smoke shapes, smallest first (rows shorter than the model's: their
    sector figures are then a lower bound). The first one the variant
    builds at is used (WY-17 builds only at 17 tokens). A path whose
    launches' blocks are independent may declare ``extra["profile_blocks"]``
    = n: each launch is then traced at n of its blocks
    (:func:`.memtrace.trace`), so its profile shape can be the model's whole
    rows."""
    make = path.extra.get("profile_shape")
    if make:
        return [make(shape)]
    return sorted(path.shapes("smoke", None), key=lambda s: path.traffic(s).bytes)


def _buildable(it: Item, shapes: list):
    """The first of ``shapes`` the variant builds at (bound as the item's
    shape is: its own dimensions kept); the first when none does (the
    trace then says why)."""
    from leverctl_kernels.common.path import Shape

    extra = {k: v for k, v in it.shape.dims.items() if k not in shapes[0].dims}
    shapes = [Shape(s.label, {**s.dims, **extra}) for s in shapes]
    for s in shapes:
        try:
            it.path.variants[it.variant].build(s)
            return s
        except (ValueError, IndexError):
            continue
    return shapes[0]


def trace(items: list[Item], cache: Path) -> list[dict]:
    """Each item's memory figures (this process has chosen the simulator)."""
    from . import memtrace
    from .build import source_digest

    tracer = hashlib.sha256(Path(memtrace.__file__).read_bytes()).hexdigest()
    done: dict[tuple, dict] = {}
    out = []
    for it in items:
        ps = _buildable(it, profile_shapes(it.path, it.shape))
        key = (it.path.name, it.variant, ps.label)
        if key not in done:
            digest = source_digest(it.path.variants[it.variant].build, it.path.make_inputs, it.path.traffic)
            sample = it.path.extra.get("profile_blocks")
            text = "|".join((tracer, digest, it.path.name, it.variant, repr(sorted(ps.dims.items())), repr(sample)))
            cached = cache / "memory" / f"{hashlib.sha256(text.encode()).hexdigest()[:24]}.json"
            if cached.exists():
                done[key] = json.loads(cached.read_text())
            else:
                try:
                    mp = memtrace.profile_variant(it.path, it.variant, ps, sample=sample)
                    label = (
                        f"{ps.label}, {sample} block{'s' if sample > 1 else ''} a launch" if mp.sampled else ps.label
                    )
                    done[key] = {"profile_shape": label, **mp.to_json()}
                    cached.parent.mkdir(parents=True, exist_ok=True)
                    tmp = cached.with_suffix(f".{os.getpid()}.tmp")
                    tmp.write_text(json.dumps(done[key]))
                    os.replace(tmp, cached)
                except Exception as e:  # noqa: BLE001 - one variant that cannot be traced is a row
                    done[key] = {"profile_shape": ps.label, "error": f"{type(e).__name__}: {str(e)[:300]}"}
        out.append(
            {
                "kernel": it.path.name,
                "variant": it.variant,
                "selected": it.selected,
                "shape": it.shape.label,
                **done[key],
            }
        )
    return out


def main() -> None:
    from leverctl.bench import device

    device.choose("sim")
    import warnings

    warnings.simplefilter("ignore")  # numba's grid-size hints
    from leverctl_kernels.common.path import Shape
    from leverctl_kernels.registry import get_path

    req = json.loads(sys.stdin.read())
    items = [
        Item(get_path(i["path"]), i["variant"], Shape(i["shape"]["label"], i["shape"]["dims"]), i["selected"])
        for i in req["items"]
    ]
    json.dump({"items": trace(items, Path(req["cache"]))}, sys.stdout)


if __name__ == "__main__":
    main()
