"""The Python API against the command line: every result's ``to_dict()`` is what
``leakscope <command> --json`` prints for the same arguments, on every shipped scenario
and (with ``LEAKSCOPE_CORPUS``) every real fixture; a snapshot built from CPython's own
``pickle.load`` gives what the file gives; errors, notebook views and pandas tables."""

import html.parser
import json
import os
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import leakscope
from cli import cli

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = sorted((ROOT / "fixtures" / "scenarios").glob("*.pickle"))


def _corpus():
    root = os.environ.get("LEAKSCOPE_CORPUS")
    if not root:
        return []
    files = sorted(p for p in Path(root).rglob("*") if p.suffix in (".pickle", ".pkl", ".json"))
    return [p for p in files if p.name != "PROVENANCE.md"]


FILES = SCENARIOS + _corpus()


def cli_json(*args):
    out = subprocess.run(cli() + list(args) + ["--json"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def _id(p):
    return p.name


@pytest.mark.parametrize("path", FILES, ids=_id)
def test_results_equal_the_cli_json(path):
    snap = leakscope.load(path)
    f = str(path)
    assert snap.summary().to_dict() == cli_json("summary", f)
    assert snap.top().to_dict() == cli_json("top", f)
    assert snap.top(at="peak").to_dict() == cli_json("top", f, "--at", "peak")
    assert snap.leaks().to_dict() == cli_json("leaks", f)
    if any(d.get("trace_events", 0) and d["actions"].get("oom") for d in snap.summary().to_dict()["devices"]):
        assert snap.oom().to_dict() == cli_json("oom", f)


@pytest.mark.parametrize("path", [p for p in FILES if p.suffix != ".json"], ids=_id)
def test_a_snapshot_object_gives_what_its_file_gives(path):
    with open(path, "rb") as fh:
        obj = pickle.load(fh)
    a = leakscope.load(path)
    b = leakscope.from_snapshot(obj)
    sa, sb = a.summary().to_dict(), b.summary().to_dict()
    assert sa["totals"] == sb["totals"]
    assert sa["devices"] == sb["devices"]
    la, lb = a.leaks().to_dict(), b.leaks().to_dict()
    assert [d["suspects"] for d in la["devices"]] == [d["suspects"] for d in lb["devices"]]


def test_options_are_the_command_lines():
    f = ROOT / "fixtures" / "scenarios" / "pp_last_stage_recv_pinned.pickle"
    snap = leakscope.load(f)
    assert snap.leaks(windows="every:200", by="file").to_dict() == cli_json(
        "leaks", str(f), "--windows", "every:200", "--by", "file")
    assert snap.top(at="event:100", limit=3, by="stack").to_dict() == cli_json(
        "top", str(f), "--at", "event:100", "--limit", "3", "--by", "stack")
    assert snap.segments(at="peak").to_dict() == cli_json("segments", str(f), "--at", "peak")
    with pytest.raises(ValueError, match="windows"):
        snap.leaks(windows="nonsense:1")


def test_bytes_and_paths_load_alike():
    f = ROOT / "fixtures" / "scenarios" / "control_no_leak.pickle"
    a = leakscope.load(f).summary().to_dict()
    b = leakscope.load(f.read_bytes()).summary().to_dict()
    assert a["totals"] == b["totals"]


def test_a_truncated_file_names_the_byte(tmp_path):
    raw = (ROOT / "fixtures" / "encodings" / "tiny_protocol4.pickle").read_bytes()
    cut = tmp_path / "cut.pickle"
    cut.write_bytes(raw[: len(raw) // 2])
    with pytest.raises(leakscope.SnapshotError) as e:
        leakscope.load(cut)
    assert isinstance(e.value, ValueError)
    assert isinstance(e.value, leakscope.LeakscopeError)
    assert e.value.kind == "truncated"
    # Shown where users see it, not as a private module's class.
    assert f"{type(e.value).__module__}.{type(e.value).__qualname__}" == "leakscope.SnapshotError"
    assert "cut.pickle" in str(e.value)
    assert f"byte {len(raw) // 2}" in str(e.value)


def test_each_kind_of_failure_is_its_class(tmp_path):
    """A file that is not there is a ReadError (an OSError), a pickle that would call code
    an unsafe SnapshotError, a device the file lacks a UsageError (a ValueError): all under
    LeakscopeError, each with the library's kind."""
    with pytest.raises(leakscope.ReadError) as e:
        leakscope.load(tmp_path / "missing.pickle")
    assert isinstance(e.value, OSError) and e.value.kind == "io"
    evil = tmp_path / "evil.pickle"
    evil.write_bytes(b"\x80\x04cos\nsystem\n.")
    with pytest.raises(leakscope.SnapshotError) as e:
        leakscope.load(evil)
    assert e.value.kind == "unsafe"
    snap = leakscope.load(ROOT / "fixtures" / "scenarios" / "control_no_leak.pickle")
    with pytest.raises(leakscope.UsageError) as e:
        snap.top(device=7)
    assert isinstance(e.value, ValueError) and e.value.kind == "usage"
    for cls in (leakscope.ReadError, leakscope.SnapshotError, leakscope.UsageError,
                leakscope.WriteError):
        assert issubclass(cls, leakscope.LeakscopeError)


def test_an_object_that_is_not_a_snapshot_is_refused():
    with pytest.raises(leakscope.SnapshotError):
        leakscope.from_snapshot({"segments": "not a list"})


class _Checker(html.parser.HTMLParser):
    VOID = {"br", "hr", "img", "meta", "input", "link"}

    def __init__(self):
        super().__init__()
        self.stack = []

    def handle_starttag(self, tag, attrs):
        if tag not in self.VOID:
            self.stack.append(tag)

    def handle_endtag(self, tag):
        assert self.stack and self.stack[-1] == tag, (tag, self.stack)
        self.stack.pop()


def test_notebook_views_are_html():
    snap = leakscope.load(ROOT / "fixtures" / "scenarios" / "loss_accum_no_detach.pickle")
    for r in (snap.summary(), snap.leaks(), snap.top(at="peak"), snap.segments(), snap.tree()):
        text = r._repr_html_()
        p = _Checker()
        p.feed(text)
        p.close()
        # The view is the command's text: all it says, in its sizes.
        assert p.stack == [] and str(r) in html.unescape(text)
    assert "loss_accum_no_detach" in repr(snap)


def test_to_pandas_or_a_clear_import_error(monkeypatch):
    snap = leakscope.load(ROOT / "fixtures" / "scenarios" / "loss_accum_no_detach.pickle")
    rows = snap.leaks().rows()
    truth = json.loads((ROOT / "fixtures" / "scenarios" / "loss_accum_no_detach.truth.json").read_text())
    assert rows, truth
    try:
        import pandas  # noqa: F401
    except ImportError:
        pandas = None
    if pandas is not None:
        df = snap.leaks().to_pandas()
        assert len(df) == len(rows) and list(df.columns) == list(rows[0])
    monkeypatch.setitem(sys.modules, "pandas", None)
    with pytest.raises(ImportError, match="pip install pandas"):
        snap.leaks().to_pandas()


def test_check_and_compare(tmp_path):
    leak = ROOT / "fixtures" / "scenarios" / "pp_last_stage_recv_pinned.pickle"
    control = ROOT / "fixtures" / "scenarios" / "pp_last_stage_forward_only.pickle"
    budget = tmp_path / "b.toml"
    budget.write_text('[leaks]\nmax_bytes_per_window = "1 MiB"\n')
    r = leakscope.check([leak], budget)
    out = subprocess.run(cli() + ["check", str(leak), "--budget", str(budget), "--json"],
                         capture_output=True, text=True)
    assert out.returncode == 1
    assert r.to_dict() == json.loads(out.stdout)
    assert not r.passed and r.failures()
    assert "<testsuite" in r.junit
    # Results cross processes whole (multiprocessing, a cache): the CLI's JSON and text.
    back = pickle.loads(pickle.dumps(r))
    assert type(back) is leakscope.CheckResult and back.to_dict() == json.loads(out.stdout)
    assert (str(back), back.junit, back.passed) == (str(r), r.junit, False)
    leaks = pickle.loads(pickle.dumps(leakscope.load(leak).leaks()))
    assert leaks.to_dict() == cli_json("leaks", str(leak)) and leaks.command == "leaks"
    c = leakscope.compare(control, leak)
    assert c.to_dict() == cli_json("compare", str(control), str(leak))


def test_the_command_runs_from_python(tmp_path):
    f = ROOT / "fixtures" / "scenarios" / "control_no_leak.pickle"
    out = subprocess.run([sys.executable, "-m", "leakscope", "summary", str(f), "--json"],
                         capture_output=True, text=True)
    assert out.returncode == 0
    assert json.loads(out.stdout) == leakscope.load(f).summary().to_dict()
    bad = tmp_path / "bad.pickle"
    bad.write_bytes(b"\x80\x04\x95\x00")
    out = subprocess.run([sys.executable, "-m", "leakscope", "summary", str(bad)],
                         capture_output=True, text=True)
    assert out.returncode == 2 and "bad.pickle" in out.stderr


def test_flamegraph_and_report_files(tmp_path):
    snap = leakscope.load(ROOT / "fixtures" / "scenarios" / "control_no_leak.pickle")
    svg = snap.flamegraph(tmp_path / "f.svg", at="peak")
    assert svg.startswith("<?xml") or svg.startswith("<svg")
    assert (tmp_path / "f.svg").read_text() == svg
    folded = snap.flamegraph(at="peak", folded=True)
    total = sum(int(line.rsplit(" ", 1)[1]) for line in folded.splitlines() if line)
    assert total == snap.top(at="peak").to_dict()["devices"][0]["total_bytes"]
    data = snap.report(tmp_path / "r.html")
    assert data.schema == "leakscope.report/7"
    assert (tmp_path / "r.html").read_text().startswith("<!DOCTYPE html>")


def test_the_installed_command_prints_what_the_cargo_binary_prints():
    """The wheel's `leakscope` command runs the library's command line in process: its
    output is the cargo-built binary's, byte for byte."""
    script = shutil.which("leakscope", path=str(Path(sys.executable).parent))
    cargo = [b for b in (ROOT / "target" / "release" / "leakscope",
                         ROOT / "target" / "debug" / "leakscope") if b.exists()]
    if script is None or not cargo:
        pytest.skip("needs both the installed command and a cargo-built binary")
    cargo = [max(cargo, key=lambda b: b.stat().st_mtime)]  # the newest, as cli() takes it
    f = str(ROOT / "fixtures" / "scenarios" / "pp_last_stage_recv_pinned.pickle")
    for args in (["leaks", "--json", f], ["leaks", f], ["top", "--at", "peak", f]):
        ours = subprocess.run([script] + args, capture_output=True, env={**os.environ, "NO_COLOR": "1"})
        theirs = subprocess.run([str(cargo[0])] + args, capture_output=True, env={**os.environ, "NO_COLOR": "1"})
        assert ours.returncode == theirs.returncode == 0
        assert ours.stdout == theirs.stdout, args


def test_names_and_phases_equal_the_generators_truth():
    """The names' groupings and the phases of the scenario that carries names, through the
    package, against the generator's ground truth (not leakscope's output)."""
    path = ROOT / "fixtures" / "scenarios" / "named_compiled_leak.pickle"
    truth = json.loads(path.with_suffix(".truth.json").read_text())
    snap = leakscope.load(path)
    for kind in ("annotation", "metadata", "compile"):
        rows = snap.top(by=kind, limit=1000).to_pandas()
        got = dict(zip(rows["site"], rows["bytes"]))
        assert got == {k: v["bytes"] for k, v in truth["names"]["end"][kind].items()}, kind
    phases = snap.phases().to_pandas()
    assert list(phases["name"]) == [p["name"] for p in truth["phases"]]
    assert list(phases["peak_bytes"]) == [p["peak_bytes"] for p in truth["phases"]]
    suspect = snap.leaks().to_dict()["devices"][0]["suspects"][0]
    assert suspect["names"]["metadata"] == "all_logits step{n}"   # three steps' labels, one family
