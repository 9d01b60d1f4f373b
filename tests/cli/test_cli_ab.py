"""The A/B loop a user runs with ``bench --set``, as the README writes it:
``bench -o base.json``; ``bench --set ATLAS_GDN_WY17=0 -o new.json``;
``compare base.json new.json``. In the simulator every record pairs by
kernel path and shape, the 17-token verify shapes show both variants (wy17
in BASE, wyn in NEW), and compare exits 0 when no status got worse and 1
when one did."""

from __future__ import annotations

import json

import pytest


@pytest.mark.sim
def test_the_readme_ab_loop_pairs_every_record_and_shows_both_variants(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for var in ("ATLAS_GDN_WY17", "ATLAS_GDN_WYN"):
        monkeypatch.delenv(var, raising=False)
    r = cli("bench", "-k", "gdn.verify", "-o", "base.json")
    assert r.code == 0, r.err
    r = cli("bench", "-k", "gdn.verify", "--set", "ATLAS_GDN_WY17=0", "-o", "new.json")
    assert r.code == 0, r.err
    r = cli("compare", "base.json", "new.json")
    assert r.code == 0, r.out + r.err
    assert "matched by kernel path and shape" in r.out and "0 only in BASE; 0 only in NEW" in r.out
    assert r.out.count("wy17 → wyn") == 2  # the two 17-token smoke shapes
    r = cli("compare", "base.json", "new.json", "--format", "json")
    doc = json.loads(r.out)
    assert doc["matched_by"] == "path" and doc["matched"] == 3 and doc["counts"] == {"PASS": 3}
    # A status that got worse gates the loop: exit 1.
    new = json.loads((tmp_path / "new.json").read_text())
    new["results"][0]["status"] = "fail"
    (tmp_path / "worse.json").write_text(json.dumps(new))
    r = cli("compare", "base.json", "worse.json")
    assert r.code == 1 and "NEW FAIL" in r.out
