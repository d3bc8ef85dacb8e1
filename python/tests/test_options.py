"""Every option of each command is a keyword of its Python call: the list is read from the
command line's own ``--help`` (its definition), so an option added there and not here
fails this test."""

import inspect
import json
import re
import subprocess

import pytest

import leakscope
from cli import ROOT, cli

#: What only the command line has, and where Python has it instead.
CLI_ONLY = {
    "help": "Python's help()",
    "json": "every result's to_dict()",
    "max-decompressed-bytes": "leakscope.load(max_decompressed_bytes=...)",
    "rank": "leakscope.load_series(directory, rank=...)",
    "junit": "CheckResult.junit",
}
#: Options whose keyword has another name.
RENAMED = {"output": "path"}

CALLS = {
    "summary": leakscope.Snapshot.summary,
    "leaks": leakscope.Snapshot.leaks,
    "windows": leakscope.Snapshot.windows,
    "phases": leakscope.Snapshot.phases,
    "top": leakscope.Snapshot.top,
    "tree": leakscope.Snapshot.tree,
    "segments": leakscope.Snapshot.segments,
    "timeline": leakscope.Snapshot.timeline,
    "oom": leakscope.Snapshot.oom,
    "flamegraph": leakscope.Snapshot.flamegraph,
    "report": leakscope.Snapshot.report,
    "compare": leakscope.compare,
    "ranks": leakscope.ranks,
    "check": leakscope.check,
}


def options_of(command: str) -> list:
    text = subprocess.run(cli() + [command, "--help"], capture_output=True, text=True,
                          check=True).stdout
    return re.findall(r"^\s+(?:-\w, )?--([a-z][a-z-]*)", text, re.M)


@pytest.mark.parametrize("command", sorted(CALLS))
def test_every_option_is_a_keyword(command):
    params = inspect.signature(CALLS[command]).parameters
    missing = [o for o in options_of(command)
               if o not in CLI_ONLY and RENAMED.get(o, o.replace("-", "_")) not in params]
    assert not missing, f"{command}: the command takes {missing}, its Python call does not"


#: `export`'s outputs: each is a function, which takes the options of its output and the
#: shared ones (an option `requires` names its output in the command's definition).
EXPORTS = {"parquet": leakscope.export_parquet, "perfetto": leakscope.export_perfetto,
           "pprof": leakscope.export_pprof}
EXPORT_OWN = {"top-sites": "perfetto", "at": "pprof", "growth": "pprof"}


def test_every_export_option_is_a_keyword_of_its_output():
    options = [o for o in options_of("export") if o not in CLI_ONLY and o not in EXPORTS]
    assert set(EXPORT_OWN) <= set(options)
    for output, call in EXPORTS.items():
        params = inspect.signature(call).parameters
        wanted = [o for o in options if EXPORT_OWN.get(o, output) == output]
        missing = [o for o in wanted if o.replace("-", "_") not in params]
        assert not missing, f"export --{output} takes {missing}, {call.__name__} does not"
        # What another output needs is no keyword of this one.
        foreign = [o for o, own in EXPORT_OWN.items() if own != output]
        assert not [o for o in foreign if o.replace("-", "_") in params], call.__name__


def test_the_library_reads_every_keyword_and_refuses_what_is_none():
    """The keywords reach the library's own option fields: a value is parsed there (the
    error names the keyword, as the flag's would), and a name it does not know is an
    error, never dropped."""
    snap = leakscope.load(ROOT / "fixtures" / "scenarios" / "control_no_leak.pickle")
    with pytest.raises(leakscope.UsageError, match=r'^exclude="\(": '):
        snap.top(exclude="(")
    with pytest.raises(leakscope.UsageError, match="`windos` is no option"):
        snap._native.run("leaks", {"windos": "auto"})
    # A device given as a number or as its text is the same device.
    assert snap.top(device=0).to_dict() == snap.top(device="0").to_dict()


def test_an_export_keyword_does_what_its_flag_does(tmp_path):
    """`device=` of an export selects the device `--device` does: the same written
    summary from Python and from the command line."""
    f = str(ROOT / "fixtures" / "scenarios" / "devices_in_different_units.pickle")
    py = leakscope.export_pprof(f, tmp_path / "py.pb.gz", at="peak", device=1)
    out = subprocess.run(cli() + ["export", f, "--pprof", str(tmp_path / "cli.pb.gz"), "--at",
                                  "peak", "--device", "1", "--json"],
                         capture_output=True, text=True, check=True).stdout
    cli_summary = json.loads(out)
    for d in (py, cli_summary):
        d.pop("written", None)
        d.pop("out", None)
    assert py == cli_summary
    everything = leakscope.export_pprof(f, tmp_path / "all.pb.gz", at="peak")
    assert py["total"] < everything["total"]


def test_keywords_come_with_the_command_lines_defaults_and_help():
    """A call's signature and help are its command's: its description, the defaults `--help` prints, each
    keyword's help line, and a keyword no command takes is Python's own `TypeError`."""
    text = subprocess.run(cli() + ["top", "--help"], capture_output=True, text=True,
                          check=True).stdout
    params = inspect.signature(leakscope.Snapshot.top).parameters
    for flag, default in re.findall(r"--([a-z-]+) <[A-Z_]+>\s+.*?\[default: ([^\]]+)\]", text):
        name = flag.replace("-", "_")
        if name in params:
            assert str(params[name].default) == default, name
    assert params["limit"].default == int(re.search(r"--limit.*?\[default: (\d+)\]", text,
                                                    re.S).group(1))
    assert "Drop C++ frames" in leakscope.Snapshot.top.__doc__
    assert leakscope.Snapshot.top.__doc__.startswith(text.splitlines()[0])  # the description
    snap = leakscope.load(ROOT / "fixtures" / "scenarios" / "control_no_leak.pickle")
    with pytest.raises(TypeError, match="windos"):
        snap.leaks(windos="auto")
