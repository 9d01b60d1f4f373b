"""What the MoE variants declare about themselves against what they do, at
every smoke shape, without running a kernel: the launches one call makes
and the device scratch ``build`` allocates (all of it the launch's
workspace, which the check poisons). The helpers and their own proofs are
``test_path_declarations``'s."""
from __future__ import annotations

import os

import pytest
from test_path_declarations import count_launches, fake_bufs, scratch_allocated

from leverctl_kernels.common.path import workspace_of

pytestmark = pytest.mark.skipif(os.environ.get("NUMBA_ENABLE_CUDASIM") != "1", reason="counts simulator launches")


def _cases():
    from leverctl_kernels.moe import PATHS

    out = []
    for path in PATHS:
        for shape in path.shapes("smoke", None):
            for variant in path.variants:
                if path.bind is not None:
                    shape = path.bind({"moe_union_stats": variant == "on"}, shape, "atlas")
                out.append((path, variant, shape))
    return out


CASES = _cases()


def _id(case) -> str:
    p, v, s = case
    return f"{p.name}/{v}/{s.label}"


@pytest.mark.parametrize("case", CASES, ids=_id)
def test_a_moe_variant_makes_the_launches_it_declares(case, monkeypatch):
    path, variant, shape = case
    launch = path.variants[variant].build(shape)
    assert count_launches(monkeypatch, launch, fake_bufs(path, shape)) == path.variant_launches(variant, shape)


@pytest.mark.parametrize("case", CASES, ids=_id)
def test_all_the_scratch_a_moe_variant_allocates_is_its_declared_workspace(case, monkeypatch):
    path, variant, shape = case
    allocated, launch = scratch_allocated(monkeypatch, path.variants[variant].build, shape)
    assert allocated == len(workspace_of(launch))


def test_the_per_token_path_pays_a_launch_pair_per_token():
    from leverctl_kernels.moe import MULTI_SEQ

    shape = MULTI_SEQ.shapes("smoke", None)[0]
    assert MULTI_SEQ.variant_launches("per_token", shape) == 2 * shape["rows"]
    assert MULTI_SEQ.launches_vary(shape)
