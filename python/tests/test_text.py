"""``str()`` of every result is what the command prints for the same arguments
(``NO_COLOR=1``): every command on every shipped scenario, the run directories, the
comparisons and the gate. Python renders nothing itself."""

import os
import subprocess

import pytest

import leakscope
from cli import ROOT, cli

SCENARIOS = ROOT / "fixtures" / "scenarios"
FILES = sorted(p.stem for p in SCENARIOS.glob("*.pickle"))


def printed(*args: str) -> str:
    p = subprocess.run(cli() + list(args), capture_output=True, text=True,
                       env={**os.environ, "NO_COLOR": "1"})
    assert p.returncode in (0, 1), p.stderr
    return p.stdout


@pytest.mark.parametrize("name", FILES)
def test_every_command_prints_as_the_cli(name):
    path = str(SCENARIOS / f"{name}.pickle")
    snap = leakscope.load(path)
    assert str(snap.summary()) == printed("summary", path)
    assert str(snap.leaks()) == printed("leaks", path)
    assert str(snap.windows()) == printed("windows", path)
    assert str(snap.top()) == printed("top", path)
    assert str(snap.top(at="peak", by="role")) == printed("top", path, "--at", "peak",
                                                          "--by", "role")
    assert str(snap.tree()) == printed("tree", path)
    assert str(snap.segments()) == printed("segments", path)
    assert str(snap.timeline()) == printed("timeline", path)
    assert str(snap.phases()) == printed("phases", path)
    assert str(snap.top(by="annotation")) == printed("top", path, "--by", "annotation")
    if "oom" in name:
        assert str(snap.oom()) == printed("oom", path)


def test_runs_comparisons_and_the_gate_print_as_the_cli(tmp_path):
    a = str(SCENARIOS / "pp_last_stage_forward_only.pickle")
    b = str(SCENARIOS / "pp_last_stage_recv_pinned.pickle")
    assert str(leakscope.compare(a, b)) == printed("compare", a, b)
    assert str(leakscope.compare(a, b, at="peak")) == printed("compare", a, b, "--at", "peak")
    run = str(SCENARIOS / "verl_ranks")
    assert str(leakscope.ranks(run)) == printed("ranks", run)
    budget = tmp_path / "budget.toml"
    budget.write_text('[leaks]\nmax_bytes_per_window = "1 MiB"\n')
    assert str(leakscope.check(b, budget)) == printed("check", b, "--budget", str(budget))


def test_the_oom_view_names_the_request_fragmentation_and_advice():
    r = leakscope.load(SCENARIOS / "fragmentation_oom.pickle").oom()
    page = r._repr_html_()
    oom = r.to_dict()["devices"][0]["oom"]
    # The request and the driver's free memory as every output writes sizes (94.5 MiB:
    # 99,062,272 / 2^20 = 94.47), the fragmentation line and the advice.
    assert f"asking for {leakscope.testing.format_size(oom['request_bytes'])}" in page
    assert f"the driver had {leakscope.testing.format_size(oom['device_free_bytes'])} free" in page
    assert "fragmentation " in page
    assert "advice: fragmentation" in page and "expandable_segments:True" in page


def test_repr_counts_devices_as_the_reports_do():
    snap = leakscope.load(SCENARIOS / "two_devices_recv_leak.pickle")
    devices = snap.summary().to_dict()["devices"]
    busy = [d for d in devices if d["segments"] or d["trace_events"]]
    want = f"{len(busy)} devices" if len(busy) == len(devices) else f"{len(busy)} devices with memory"
    assert want in repr(snap)
