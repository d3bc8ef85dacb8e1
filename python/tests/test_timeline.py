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
