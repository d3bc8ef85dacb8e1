"""Tests of the pytest plugin ``leakscope.pytest_plugin``, without torch or a GPU.

The markers' whole path runs in pytester sessions against a stub ``torch`` module whose
``torch.cuda.memory._snapshot()`` returns a shipped scenario: recording, repeats, the
snapshot, the leak check and ``--leakscope-report``. The analysis step,
``check_leaks``, is also called directly on the scenarios. What must be found comes from
the scenarios' ground truth (``.truth.json``).
"""

from __future__ import annotations

import json
import pickle
from importlib import metadata
from pathlib import Path

import pytest

from leakscope.pytest_plugin import ANNOTATION, DEFAULT_WINDOWS, check_leaks, report_paths
from leakscope.testing import format_size

# Here rather than in conftest.py: pytest refuses ``pytest_plugins`` in a conftest.py below
# the rootdir that it meets while collecting, as it meets python/tests/conftest.py when run
# from the repository root without arguments.
pytest_plugins = ["pytester"]

# Load the plugin by its module name, and keep the entry point (when leakscope is
# installed) from loading the same module a second time under its own name. The sessions
# run in this process, where the plugin is already imported: its asserts (it has none)
# cannot be rewritten, which pytest would warn about.
PLUGIN = (
    "-p",
    "no:leakscope",
    "-p",
    "leakscope.pytest_plugin",
    "-W",
    "ignore::pytest.PytestAssertRewriteWarning",
)

# A conftest.py for pytester sessions: a stub ``torch`` with what the plugin calls, each
# call logged to torch_calls.jsonl beside it.
TORCH_STUB = """
import contextlib, json, pickle, re, sys, types
from pathlib import Path

LOG = Path(__file__).with_name("torch_calls.jsonl")
SCENARIO = {scenario!r}
CUDA = {cuda!r}
PEAK = {peak!r}
RENAME = {rename!r}  # (regex, name): annotations whose name matches get this name


def log(*call):
    with LOG.open("a") as f:
        f.write(json.dumps(call) + "\\n")


def _record_memory_history(enabled="all", **kwargs):
    log("record_memory_history", enabled, kwargs)


def _snapshot(device=None):
    log("snapshot")
    with open(SCENARIO, "rb") as f:
        snapshot = pickle.load(f)
    if RENAME:
        for annotation in snapshot.get("external_annotations", []):
            if re.search(RENAME[0], annotation["name"]):
                annotation["name"] = RENAME[1]
    return snapshot


@contextlib.contextmanager
def record_function(name, args=None):
    log("enter", name)
    yield
    log("exit", name)


torch = types.ModuleType("torch")
torch.cuda = types.SimpleNamespace(
    is_available=lambda: CUDA,
    current_device=lambda: 0,
    memory_allocated=lambda device=None: 0,
    reset_peak_memory_stats=lambda device=None: log("reset_peak_memory_stats", device),
    max_memory_allocated=lambda device=None: PEAK,
    memory=types.SimpleNamespace(
        _record_memory_history=_record_memory_history, _snapshot=_snapshot
    ),
)
torch.profiler = types.SimpleNamespace(record_function=record_function)
sys.modules["torch"] = torch
"""


def stub_torch(pytester, scenario: Path | None = None, cuda=True, peak=0, rename=None) -> None:
    """Give ``pytester``'s sessions the stub ``torch``.

    Its snapshot is ``scenario``'s, with the annotations matching ``rename[0]`` renamed
    ``rename[1]``; its peak allocated memory is ``peak``.
    """
    pytester.makeconftest(
        TORCH_STUB.format(scenario=str(scenario), cuda=cuda, peak=peak, rename=rename)
    )


def torch_calls(pytester) -> list:
    """The calls the stub ``torch`` logged, in order."""
    log = pytester.path / "torch_calls.jsonl"
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def load(path: Path) -> dict:
    """Unpickle ``path``, as the plugin's user would."""
    with open(path, "rb") as f:
        return pickle.load(f)


def test_markers_are_listed(pytester):
    """``pytest --markers`` lists both markers with their signatures."""
    result = pytester.runpytest(*PLUGIN, "--markers")
    result.stdout.fnmatch_lines(
        ["@pytest.mark.limit_cuda_memory(limit*", "@pytest.mark.limit_cuda_leaks(limit*"]
    )
    # Each signature is whole (pytest splits a line at its first colon) and the default
    # windows are spelled without a stray space.
    text = result.stdout.str()
    assert ("limit_cuda_leaks(limit, windows=DEFAULT_WINDOWS, repeat=3, within=None, "
            "max_entries=100000): run") in text
    assert "annotation:^leakscope_repeat$" in text
    assert result.ret == 0


def test_entry_point():
    """When leakscope is installed, pytest finds the plugin through its entry point."""
    try:
        dist = metadata.distribution("leakscope")
    except metadata.PackageNotFoundError:
        pytest.skip("leakscope is not installed as a distribution")
    found = [ep for ep in dist.entry_points if ep.group == "pytest11"]
    assert [(ep.name, ep.value) for ep in found] == [("leakscope", "leakscope.pytest_plugin")]


MARKED_TESTS = """
import pytest

@pytest.mark.limit_cuda_leaks("1 MiB")
def test_leaks():
    pass

@pytest.mark.limit_cuda_memory("1 GiB")
def test_memory():
    pass

def test_unmarked():
    pass
"""


def test_skipped_without_torch(pytester):
    """Without torch, marked tests are skipped with the reason; others run."""
    pytester.makeconftest("import sys\nsys.modules['torch'] = None\n")
    pytester.makepyfile(MARKED_TESTS)
    result = pytester.runpytest(*PLUGIN, "-rs")
    result.assert_outcomes(passed=1, skipped=2)
    result.stdout.fnmatch_lines(
        [
            "*leakscope: limit_cuda_leaks needs torch with CUDA; torch is not installed*",
            "*leakscope: limit_cuda_memory needs torch with CUDA; torch is not installed*",
        ]
    )


def test_skipped_without_cuda(pytester):
    """Without CUDA, marked tests are skipped with the reason, and torch is not called."""
    stub_torch(pytester, cuda=False)
    pytester.makepyfile(MARKED_TESTS)
    result = pytester.runpytest(*PLUGIN, "-rs")
    result.assert_outcomes(passed=1, skipped=2)
    result.stdout.fnmatch_lines(
        ["*leakscope: limit_cuda_leaks needs torch with CUDA; torch.cuda.is_available() is False*"]
    )
    assert torch_calls(pytester) == []


def test_skipped_tests_build_no_fixtures(pytester):
    """The skip comes before the fixtures: a skipped test builds no model."""
    pytester.makeconftest("import sys\nsys.modules['torch'] = None\n")
    pytester.makepyfile(
        """
        import pytest

        @pytest.fixture
        def model():
            raise RuntimeError("built a fixture of a skipped test")

        @pytest.mark.limit_cuda_leaks("1 MiB")
        def test_leaks(model):
            pass
        """
    )
    pytester.runpytest(*PLUGIN).assert_outcomes(skipped=1)


@pytest.mark.parametrize(
    "marker",
    [
        'limit_cuda_leaks("lots")',
        'limit_cuda_leaks("1 MiB", repeat=0)',
        'limit_cuda_leaks("1 MiB", colour="red")',
        "limit_cuda_memory()",
    ],
)
def test_bad_marker_arguments_are_errors(pytester, marker):
    """Bad arguments are reported even where the test would be skipped."""
    pytester.makeconftest("import sys\nsys.modules['torch'] = None\n")
    pytester.makepyfile(f"import pytest\n\n@pytest.mark.{marker}\ndef test_x():\n    pass\n")
    result = pytester.runpytest(*PLUGIN)
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines([f"*leakscope: bad arguments to {marker.split('(')[0]}:*"])


def test_check_leaks_names_the_site(scenario):
    """The analysis step names the truth's fastest site, its rate and the windows."""
    s = scenario("loss_accum_no_detach")
    top = s.leaks[0]
    with pytest.raises(AssertionError) as info:
        check_leaks(load(s.path), top.rate - 1, windows=s.windows)
    message = str(info.value)
    assert top.function in message and top.filename in message
    assert f"{format_size(top.rate, exact=True)} per window" in message
    assert s.windows in message


def test_check_leaks_writes_the_report_of_a_failure(scenario, tmp_path):
    """On failure with a report folder: the snapshot pickle and the HTML report, named."""
    s = scenario("pp_last_stage_recv_pinned")
    snapshot = load(s.path)
    nodeid = "tests/test_train.py::test_step[pp-4]"
    with pytest.raises(AssertionError) as info:
        check_leaks(snapshot, 0, windows=s.windows, report_dir=tmp_path / "out", nodeid=nodeid)
    pickle_path, html_path = report_paths(tmp_path / "out", nodeid)
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted(
        [pickle_path.name, html_path.name]
    )
    assert "/" not in pickle_path.name and "[" not in pickle_path.name
    assert load(pickle_path) == snapshot
    html = html_path.read_text(encoding="utf-8")
    assert html.lstrip().lower().startswith("<!doctype html")
    assert next(leak.function for leak in s.leaks if leak.function) in html
    assert str(pickle_path) in str(info.value) and str(html_path) in str(info.value)


def test_check_leaks_passes_a_control_and_writes_nothing(scenario, tmp_path):
    """A control passes at a limit of 0 and leaves no report."""
    s = scenario("control_no_leak")
    report = check_leaks(load(s.path), 0, windows=s.windows, report_dir=tmp_path / "out")
    assert report["devices"][0]["suspects"] == []
    assert not (tmp_path / "out").exists()


def leaky_test_file(limit: int, windows: str, repeat: int = 3) -> str:
    """A test module with one ``limit_cuda_leaks`` test whose body does nothing."""
    return f"""
import pytest

@pytest.mark.limit_cuda_leaks({limit!r}, windows={windows!r}, repeat={repeat})
def test_train_step():
    pass
"""


def test_marker_path_fails_naming_the_site_and_writes_the_report(pytester, scenario):
    """The whole marker path fails on a leaking snapshot and writes both files."""
    s = scenario("pp_last_stage_recv_pinned")
    top = s.leaks[0]
    stub_torch(pytester, s.path)
    pytester.makepyfile(test_train=leaky_test_file(top.rate - 1, s.windows))
    result = pytester.runpytest(*PLUGIN, "--leakscope-report", "reports")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            f"*spec {s.windows}*",
            f"*{top.function or top.site}*{format_size(top.rate, exact=True)} per window*",
        ]
    )
    written = sorted(p.name for p in (pytester.path / "reports").iterdir())
    assert written == ["test_train.py_test_train_step.html", "test_train.py_test_train_step.pickle"]
    assert load(pytester.path / "reports" / written[1]) == load(s.path)


def test_marker_path_records_each_repeat_as_one_window(pytester, scenario):
    """Recording on, each repeat inside the annotation, snapshot, recording off."""
    s = scenario("control_no_leak")
    stub_torch(pytester, s.path)
    pytester.makepyfile(
        """
        import pytest
        from pathlib import Path

        @pytest.mark.limit_cuda_leaks(0, windows="auto", repeat=4)
        def test_train_step():
            with Path(__file__).with_name("torch_calls.jsonl").open("a") as f:
                f.write('["body"]\\n')
        """
    )
    result = pytester.runpytest(*PLUGIN, "--leakscope-report", "reports")
    result.assert_outcomes(passed=1)
    calls = torch_calls(pytester)
    assert calls[0][:2] == ["record_memory_history", "all"]
    assert calls[1:-2] == [["enter", ANNOTATION], ["body"], ["exit", ANNOTATION]] * 4
    assert calls[-2:] == [["snapshot"], ["record_memory_history", None, {}]]
    assert not (pytester.path / "reports").exists()


def test_marker_path_default_windows_need_the_annotation(pytester, scenario):
    """A snapshot without the plugin's annotations cannot be judged, and fails."""
    s = scenario("loss_accum_no_detach")
    stub_torch(pytester, s.path)
    pytester.makepyfile(leaky_test_file(s.leaks[0].rate * 2, DEFAULT_WINDOWS))
    result = pytester.runpytest(*PLUGIN)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*cannot be judged*", "*found nothing to cut the trace by (no annotation matches*"]
    )


def test_marker_path_default_windows_are_the_runs(pytester, scenario):
    """With one plugin annotation per run, the default windows are the runs.

    The scenario's per-micro-batch annotations are renamed as the plugin names its runs,
    so the default windows are the truth's windows and find the truth's sites and rates.
    """
    s = scenario("loss_accum_no_detach")
    (truth_windows,) = [d["windows"] for d in s.devices]
    top = s.leaks[0]
    stub_torch(pytester, s.path, rename=(truth_windows["annotation_regex"], ANNOTATION))
    pytester.makepyfile(
        leaky_test_file(top.rate - 1, DEFAULT_WINDOWS, repeat=truth_windows["count"])
    )
    result = pytester.runpytest(*PLUGIN)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            f"*{truth_windows['count']} windows from annotation (spec {DEFAULT_WINDOWS})*",
            f"*{top.function}*{format_size(top.rate, exact=True)} per window*",
        ]
    )
    result.stdout.no_fnmatch_line("*found nothing to cut the trace by*")


def test_both_markers_fail_together(pytester, scenario):
    """A test over both limits fails naming both."""
    s = scenario("loss_accum_no_detach")
    stub_torch(pytester, s.path, peak=2048)
    pytester.makepyfile(
        f"""
        import pytest

        @pytest.mark.limit_cuda_memory(1024)
        @pytest.mark.limit_cuda_leaks({s.leaks[0].rate - 1}, windows={s.windows!r})
        def test_train_step():
            pass
        """
    )
    result = pytester.runpytest(*PLUGIN)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*peak CUDA memory allocated*", "*call site*grow*"])


def test_marker_path_body_failure_is_the_failure(pytester, scenario):
    """A failing body fails the test as it is, and recording is still stopped."""
    stub_torch(pytester, scenario("control_no_leak").path)
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.limit_cuda_leaks("1 MiB", windows="auto")
        def test_train_step():
            assert 1 == 2, "the body failed"
        """
    )
    result = pytester.runpytest(*PLUGIN)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*the body failed*"])
    assert ["record_memory_history", None, {}] == torch_calls(pytester)[-1]


@pytest.mark.parametrize(("limit", "fails"), [("2 MiB", True), ("4 MiB", False)])
def test_memory_marker(pytester, limit, fails):
    """The peak is read after a reset; over the limit fails naming it, under passes."""
    peak = 3 * 1024 * 1024
    stub_torch(pytester, peak=peak)
    pytester.makepyfile(
        f"""
        import pytest

        @pytest.mark.limit_cuda_memory({limit!r})
        def test_forward():
            pass
        """
    )
    result = pytester.runpytest(*PLUGIN)
    if fails:
        result.assert_outcomes(failed=1)
        result.stdout.fnmatch_lines([f"*{format_size(peak, exact=True)}, over the limit*"])
    else:
        result.assert_outcomes(passed=1)
    assert torch_calls(pytester) == [["reset_peak_memory_stats", 0]]
