"""``leverctl profile`` run end to end at model shapes on sm_90a, with this
machine's tools, on one path that holds both kinds of warpgroup MMA
(HGMMA, QGMMA) on the GEMM engine's two-warpgroup tiles: every kernel
compiles without a spill or local memory, and every tensor-core claim is
backed by its SASS (the warp MMA's, HMMA/IMMA, are checked on the compile
tests' SASS: ``tests/kernels/tc_claims.py``). Every path and
variant is held to the same in the committed profiles
(tests/profile/test_roofline.py: ``make profiles``); compiling all of them
here (some 250 s cold on two cores) would not fit CI's budget."""

from __future__ import annotations

import json
import os

import pytest

from leverctl.profile import machine

pytestmark = pytest.mark.skipif(
    not (machine.find_tool("ptxas") and machine.find_tool("nvdisasm")), reason="ptxas or nvdisasm not found"
)

REPRESENTATIVE = {
    "atlas": ("attention.proj_bf16_tc",),  # HGMMA (bf16_tc) and QGMMA (fp8_e4m3)
}


@pytest.fixture(scope="module")
def rows(tmp_path_factory) -> list[dict]:
    from leverctl.cli.app import main

    cache = tmp_path_factory.mktemp("xdg")
    got = []
    old = os.environ.get("XDG_CACHE_HOME")
    os.environ["XDG_CACHE_HOME"] = str(cache)
    try:
        for engine, paths in REPRESENTATIVE.items():
            out = tmp_path_factory.mktemp("p") / f"{engine}.json"
            ks = [a for p in paths for a in ("-k", p)]
            with pytest.raises(SystemExit) as e:
                main(["profile", "--no-env", "-e", engine, *ks, "--all-variants", "--no-memory", "-o", str(out)])
            assert e.value.code in (0, None)
            got += json.loads(out.read_text())["rows"]
    finally:
        if old is None:
            os.environ.pop("XDG_CACHE_HOME", None)
        else:
            os.environ["XDG_CACHE_HOME"] = old
    return got


def problems(r: dict) -> list[str]:
    """What a profile row shows wrong: no machine code, any spill or local
    memory, a block that cannot run, any flag but low occupancy."""
    if "resources" not in r:
        return [f"not compiled: {r.get('error')}"]
    res = r["resources"]
    out = [f"{k} {res[k]}" for k in ("spill_stores", "spill_loads", "local", "stack") if res[k]]
    if r["occupancy"]["blocks"] == 0:
        out.append("cannot run")
    allowed = r["flags"][-1:] if r["occupancy_flag"] else []
    out += [f for f in r["flags"] if f not in allowed]
    return out


def test_every_kernel_of_every_variant_compiles_clean_at_model_shapes(rows):
    bad = {(r["kernel"], r["variant"], r["shape"], r.get("name")): problems(r) for r in rows if problems(r)}
    assert not bad, bad
    assert {r["kernel"] for r in rows} == {p for ps in REPRESENTATIVE.values() for p in ps}


def test_the_set_holds_each_kind_of_tensor_core_and_its_claims(rows):
    kinds = {k for r in rows for k, n in (r["mix"] or {}).get("tensor_cores", {}).items() if n}
    assert {"HGMMA", "QGMMA"} <= kinds, kinds
    claimed = {(r["kernel"], r["variant"]): r["claim"]["tensor_cores"] for r in rows}
    assert claimed[("attention.proj_bf16_tc", "fp8_e4m3")] == claimed[("attention.proj_bf16_tc", "bf16_tc")] == "wgmma"


def test_the_check_fails_on_a_spill_local_memory_or_an_unbacked_claim(rows):
    row = next(r for r in rows if r["kernel"] == "attention.proj_bf16_tc" and r["variant"] == "bf16_tc")
    spilled = {**row, "resources": {**row["resources"], "spill_stores": 8}}
    local = {**row, "resources": {**row["resources"], "local": 16}}
    unbacked = {**row, "flags": ["claims wgmma but the SASS has no HGMMA"], "occupancy_flag": False}
    assert problems(row) == []
    assert problems(spilled) == ["spill_stores 8"] and problems(local) == ["local 16"]
    assert problems(unbacked) == ["claims wgmma but the SASS has no HGMMA"]
