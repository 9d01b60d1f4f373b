"""The compile cache's key: the source a kernel reaches, not the whole
kernels package (editing one path's spec recompiles that path alone)."""

from __future__ import annotations

import shutil

from leverctl.profile import build
from leverctl_kernels.registry import all_paths, get_path


def _modules(*objects) -> frozenset:
    return build._reached(tuple(sorted({build._module_of(o) for o in objects} - {None})))


def test_a_kernels_key_reaches_its_own_family_and_the_common_helpers_only():
    all_paths()  # every family imported, as in the compiling child
    gemv = get_path("w4a16.gemv")
    reached = _modules(gemv.variants["gemv_sw"].build, gemv.make_inputs)
    assert "leverctl_kernels.w4a16.gemv.gemv_sw" in reached and "leverctl_kernels.common.int4_device" in reached
    assert not any(m.startswith(("leverctl_kernels.attention", "leverctl_kernels.gdn")) for m in reached), reached


def test_the_digest_changes_with_a_reached_modules_source_and_not_with_another(tmp_path, monkeypatch):
    import leverctl_kernels.attention.paged_decode.spec as other
    import leverctl_kernels.w4a16.gemv.gemv_sw as mine

    gemv = get_path("w4a16.gemv").variants["gemv_sw"].build  # a closure over the module's builder
    before = build.source_digest(gemv)
    for mod in (mine, other):
        copy = tmp_path / f"{mod.__name__}.py"
        shutil.copyfile(mod.__file__, copy)
        monkeypatch.setattr(mod, "__file__", str(copy))
    assert build.source_digest(gemv) == before
    (tmp_path / f"{other.__name__}.py").write_text("# edited\n")
    assert build.source_digest(gemv) == before
    (tmp_path / f"{mine.__name__}.py").write_text("# edited\n")
    assert build.source_digest(gemv) != before
