"""``leakscope.load_series``: state-only snapshots, one per step, read as windows. The
bytes kept per snapshot are checked against CPython's reading of the pickles (the blocks
at the kept site, summed file by file with the standard library alone), and against the
generator's truth."""

from __future__ import annotations

import json
import pickle
import shutil
from pathlib import Path

import pytest

import leakscope

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = ROOT / "fixtures" / "scenarios"


def _truth(name):
    return json.loads((SCENARIOS / name / "truth.json").read_text())


def _site_bytes_per_file(name, site):
    """Requested bytes of the active blocks whose innermost Python frame is ``site``, per
    file, read with ``pickle`` alone."""
    out = []
    for f in _truth(name)["files"]:
        with open(SCENARIOS / name / f, "rb") as fh:
            snap = pickle.load(fh)
        total = 0
        for seg in snap["segments"]:
            for b in seg["blocks"]:
                if not b["state"].startswith("active"):
                    continue
                py = [fr for fr in b.get("frames") or [] if fr["filename"].endswith(".py")]
                if py and f"{py[0]['filename']}:{py[0]['line']}:{py[0]['name']}" == site:
                    total += b["requested_size"]
        out.append(total)
    return out


def test_kept_logits_are_a_leak_per_snapshot():
    t = _truth("series_kept_per_step")
    files = [SCENARIOS / "series_kept_per_step" / f for f in t["files"]]
    r = leakscope.load_series(files).leaks()
    d = r.to_dict()
    assert d["schema"] == "leakscope.leaks/8"
    dev = d["devices"][0]
    assert dev["windows"]["source"] == "snapshots"
    top = dev["suspects"][0]
    assert top["site"]["label"] == t["kept_site"]
    per_file = _site_bytes_per_file("series_kept_per_step", t["kept_site"])
    steps = [b - a for a, b in zip(per_file, per_file[1:])]
    assert top["bytes_per_window"] == sorted(steps)[len(steps) // 2]
    assert top["kind"] == "leak"
    assert top["onset_name"].endswith(t["files"][t["onset_file_index"]])
    df = r.to_pandas()
    assert list(df["site"])[0] == t["kept_site"]


def test_control_and_warmup_have_no_suspect():
    for name in ("series_control", "series_warmup"):
        t = _truth(name)
        files = [SCENARIOS / name / f for f in t["files"]]
        dev = leakscope.load_series(files).leaks().to_dict()["devices"][0]
        assert dev["suspects"] == [], name
    dev = leakscope.load_series(
        [SCENARIOS / "series_warmup" / f for f in _truth("series_warmup")["files"]]
    ).leaks().to_dict()["devices"][0]
    kinds = {g["site"]["label"]: g["kind"] for g in dev["not_suspects"]}
    assert kinds[_truth("series_warmup")["warmup_site"]] == "warmup"


def test_a_run_directory_needs_a_rank_when_it_holds_several(tmp_path):
    t = _truth("series_kept_per_step")
    for i, f in enumerate(t["files"]):
        step = tmp_path / f"step{i + 1}"
        step.mkdir()
        shutil.copy(SCENARIOS / "series_kept_per_step" / f, step / "mem_rank0.pickle")
        shutil.copy(SCENARIOS / "series_control" / f, step / "mem_rank1.pickle")
    with pytest.raises(ValueError, match="--rank"):
        leakscope.load_series(tmp_path)
    top = leakscope.load_series(tmp_path, rank=0).leaks().to_dict()["devices"][0]["suspects"][0]
    assert top["site"]["label"] == t["kept_site"]
    assert top["bytes_per_window"] == t["bytes_per_snapshot_requested"]
    series = leakscope.ranks(tmp_path).to_dict()["series"]
    assert {s["rank"]: s["suspects"] for s in series} == {0: 1, 1: 0}


def test_one_file_is_no_series():
    t = _truth("series_control")
    with pytest.raises(ValueError, match="at least 2 files"):
        leakscope.load_series([SCENARIOS / "series_control" / t["files"][0]])


def test_two_run_directories_compare_step_by_step(tmp_path):
    kept, control = _truth("series_kept_per_step"), _truth("series_control")
    for run, name, t in (("a", "series_control", control), ("b", "series_kept_per_step", kept)):
        for i, f in enumerate(t["files"]):
            step = tmp_path / run / f"step{i + 1}"
            step.mkdir(parents=True)
            shutil.copy(SCENARIOS / name / f, step / "mem_rank0.pickle")
    r = leakscope.compare(tmp_path / "a", tmp_path / "b", at="end")
    assert r.to_dict()["schema"] == "leakscope.compare_steps/1"
    df = r.to_pandas()
    want = [b["requested_bytes"] - a["requested_bytes"]
            for a, b in zip(control["per_file"], kept["per_file"])]
    assert list(df["difference"]) == want
    assert set(df["largest_change_site"]) == {kept["kept_site"]}
    with pytest.raises(leakscope.UsageError, match="at="):
        leakscope.compare(tmp_path / "a", tmp_path / "b")
    # A directory beside a file is refused as the command line refuses it.
    with pytest.raises(leakscope.UsageError, match="two run directories"):
        leakscope.compare(tmp_path / "a", SCENARIOS / "series_control" / control["files"][0],
                          at="end")
