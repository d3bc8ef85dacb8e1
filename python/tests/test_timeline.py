"""``Snapshot.timeline()``: the allocations drawn one by one and the summarized rest add up
to the requested bytes CPython's bookkeeping gives (tests/expected/replay_points.py, which
reads the pickle with the standard library alone) after every event, and ``to_pandas()``
has a row per drawn allocation."""

from __future__ import annotations

import bisect
import pickle
import sys
from pathlib import Path

import leakscope

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "expected"))
from replay_points import series  # noqa: E402

FILE = ROOT / "fixtures" / "scenarios" / "two_devices_recv_leak.pickle"


def test_timeline_adds_up_to_cpythons_requested_bytes():
    with open(FILE, "rb") as f:
        snap = pickle.load(f)
    t = leakscope.load(FILE).timeline(max_allocations=25)
    d = t.to_dict()
    assert d["schema"] == "leakscope.timeline/1"
    assert [x["device"] for x in d["devices"]] == [0, 1]
    for dev in d["devices"]:
        trace = snap["device_traces"][dev["device"]]
        start, _, _, requested = series(snap, dev["device"], trace)
        bands = dev["allocations"]
        assert len(bands) == 25
        s = dev["summarized"]
        for k in range(len(trace)):
            drawn = sum(b["bytes"] for b in bands
                        if (b["first_event"] is None or b["first_event"] <= k)
                        and (b["free_event"] is None or b["free_event"] > k))
            i = bisect.bisect_right(s["events"], k)
            rest = s["before_first_event"] if i == 0 else s["bytes"][i - 1]
            assert drawn + rest == requested[k], (dev["device"], k)
    df = t.to_pandas()
    assert len(df) == 50
    assert set(df["device"]) == {0, 1}
    assert {"bytes", "first_event", "free_event", "role", "site"} <= set(df.columns)


def test_compare_at_peak_adds_up_to_the_truths_difference():
    """``compare(at="peak")``: the rows' differences add up to B's peak minus A's, both
    from the generator's truth, and the kept logits lead."""
    import json
    scen = ROOT / "fixtures" / "scenarios"
    ta = json.loads((scen / "plain_loop_control.truth.json").read_text())
    tb = json.loads((scen / "plain_loop_kept_logits.truth.json").read_text())
    r = leakscope.compare(scen / "plain_loop_control.pickle",
                          scen / "plain_loop_kept_logits.pickle", at="peak")
    assert r.to_dict()["schema"] == "leakscope.compare_at/2"
    df = r.to_pandas()
    assert int(df["difference"].sum()) == (tb["peak"]["live_requested_bytes"]
                                          - ta["peak"]["live_requested_bytes"])
    assert df.iloc[0]["site"] == tb["leaks"][0]["site"]
