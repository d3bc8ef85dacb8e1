"""Tests of ``leakscope.testing`` on the shipped scenarios, against their ground truth.

The scenarios' ``.truth.json`` files say which call sites leak and by how much per window;
``assert_no_leaks`` must name those sites when the limit is below their rate and pass when
it is at or above it. ``assert_memory_below`` is held to the truths' peak and end figures.
``parse_size`` and ``format_size`` are checked against arithmetic done by hand.
"""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

import leakscope
from leakscope.testing import assert_memory_below, assert_no_leaks, format_size, parse_size

# Scenarios whose truth lists leaking sites, with leakscope's windows cut as the
# generator cut them (fragmentation_oom is left out: its truth counts only the
# micro-batches that finished before the OOM, the trace has one more).
LEAKING = [
    "pp_last_stage_recv_pinned",
    "pp_last_stage_forward_only",
    "loss_accum_no_detach",
    "late_onset_leak",
    "plain_loop_kept_logits",
    "two_devices_recv_leak",
    "npu_shaped",
    "wrapped_ring_buffer",
]
# Scenarios where nothing grows per window.
CONTROLS = ["control_no_leak", "plain_loop_control"]


def raised(scenario, limit, **kwargs) -> str:
    """The message ``assert_no_leaks`` raises for ``scenario`` at ``limit``."""
    kwargs.setdefault("windows", scenario.windows)
    with pytest.raises(AssertionError) as info:
        assert_no_leaks(scenario.path, limit, **kwargs)
    return str(info.value)


def assert_names(message: str, leak) -> None:
    """``message`` names ``leak``'s site (its file and function), device and kind."""
    if leak.function is None:
        assert leak.site in message
    else:
        assert leak.function in message
        assert leak.filename in message
    assert f"device {leak.device}" in message
    assert leak.kind in message


@pytest.mark.parametrize("name", LEAKING)
def test_names_the_fastest_growing_sites(scenario, name):
    """Just below the truth's top rate: the top sites, their rate, onset and windows."""
    s = scenario(name)
    top = s.leaks[0]
    message = raised(s, top.rate - 1)
    for leak in s.leaks:
        if leak.rate == top.rate:
            assert_names(message, leak)
            assert f"{format_size(leak.rate, exact=True)} per window" in message
            assert f"since window {leak.onset_window}" in message
    if s.windows != "auto":
        assert f"spec {s.windows}" in message


@pytest.mark.parametrize("name", LEAKING)
def test_limit_at_each_truth_rate(scenario, name):
    """At a limit equal to a site's rate, exactly the sites growing faster are named."""
    s = scenario(name)
    for limit in sorted({leak.rate for leak in s.leaks}):
        over = [leak for leak in s.leaks if leak.rate > limit]
        if not over:
            report = assert_no_leaks(s.path, limit, windows=s.windows)
            assert report["schema"].startswith("leakscope.leaks/")
            continue
        message = raised(s, limit)
        for leak in s.leaks:
            assert (leak.site in message) == (leak in over), (limit, leak.site)


@pytest.mark.parametrize("name", LEAKING)
def test_auto_windows_find_the_leak(scenario, name):
    """With leakscope's own windows, the truth's top site is still named."""
    s = scenario(name)
    top = s.leaks[0]
    message = raised(s, top.rate - 1, windows="auto")
    assert (top.function or top.site) in message


def test_late_onset_says_since_which_window(scenario):
    """A leak that starts late is reported from the truth's onset window."""
    s = scenario("late_onset_leak")
    (leak,) = s.leaks
    assert leak.onset_window > 0
    assert f"since window {leak.onset_window}" in raised(s, leak.rate // 2)


def test_size_strings_as_limits(scenario):
    """Limits given as size strings are the same bytes."""
    s = scenario("pp_last_stage_recv_pinned")
    rate = s.leaks[0].rate
    assert_no_leaks(s.path, f"{rate} B", windows=s.windows)
    assert_no_leaks(s.path, f"{rate / 2**20} MiB", windows=s.windows)
    raised(s, f"{rate - 1} B")


def test_device_restricts_the_check(scenario):
    """``device=`` checks one device: the truth's leaking one fails, the clean one passes."""
    s = scenario("two_devices_recv_leak")
    leaking = {leak.device for leak in s.leaks}
    for d in s.devices:
        if d["device"] in leaking:
            message = raised(s, 0, device=d["device"])
            assert f"device {d['device']}" in message
        else:
            assert_no_leaks(s.path, 0, windows=s.windows, device=d["device"])


@pytest.mark.parametrize("name", CONTROLS)
@pytest.mark.parametrize("windows", ["truth", "auto"])
def test_controls_pass_at_zero(scenario, name, windows):
    """Nothing grows in the controls: even a limit of 0 passes, with verdicts."""
    s = scenario(name)
    assert not s.leaks
    windows = s.windows if windows == "truth" else windows
    report = assert_no_leaks(s.path, 0, windows=windows)
    assert all(d["windows"]["verdicts"] for d in report["devices"])


def test_one_step_cannot_be_judged(scenario):
    """One forward and backward has no unit of work: the check fails, whatever the limit."""
    s = scenario("plain_one_step")
    assert all(d["windows"]["count"] == 1 for d in s.devices)
    with pytest.raises(AssertionError, match="cannot be judged") as info:
        assert_no_leaks(s.path, "1 TiB")
    assert "windows=" in str(info.value)


def test_a_single_explicit_window_cannot_be_judged(scenario):
    """One window, even asked for, shows no growth: the check fails."""
    s = scenario("loss_accum_no_detach")
    with pytest.raises(AssertionError, match="cannot be judged"):
        assert_no_leaks(s.path, 0, windows="every:1000000000")


def test_every_kind_of_input(scenario):
    """A path, a PathLike, bytes, the dict and a Snapshot give the same report."""
    s = scenario("control_no_leak")
    with open(s.path, "rb") as f:
        as_dict = pickle.load(f)
    inputs = [
        str(s.path),
        s.path,
        s.path.read_bytes(),
        as_dict,
        leakscope.load(str(s.path)),
        leakscope.from_snapshot(as_dict),
    ]
    reports = [assert_no_leaks(i, 0, windows=s.windows)["devices"] for i in inputs]
    assert all(r == reports[0] for r in reports)
    with pytest.raises(TypeError):
        assert_no_leaks(42, 0)


def test_bad_file_is_a_snapshot_error(tmp_path: Path):
    """A file that is not a snapshot raises leakscope's SnapshotError."""
    bad = tmp_path / "bad.pickle"
    bad.write_bytes(b"not a snapshot")
    with pytest.raises(leakscope.SnapshotError):
        assert_no_leaks(bad, 0)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0", 0),
        ("7", 7),
        ("7 B", 7),
        ("1 MiB", 1024 * 1024),
        ("512 KiB", 512 * 1024),
        ("2 GiB", 2 * 1024 * 1024 * 1024),
        ("1 TiB", 1024 * 1024 * 1024 * 1024),
        ("1.5 MB", 1_500_000),
        ("1.5MB", 1_500_000),
        ("10 kb", 10_000),
        ("3 GB", 3_000_000_000),
        ("2 TB", 2_000_000_000_000),
        ("0.5 KiB", 512),
        (".25 kib", 256),
        ("1. mib", 1024 * 1024),
        (" 4 mIb ", 4 * 1024 * 1024),
        ("1.0009 KB", 1001),  # 1000.9 bytes, rounded to the nearest as budgets read it
        ("1 M", 1024 * 1024),  # K, M, G, T are binary, as in budgets
        (4096, 4096),
        (0, 0),
    ],
)
def test_parse_size(text, expected):
    """Sizes against arithmetic done by hand."""
    assert parse_size(text) == expected


@pytest.mark.parametrize(
    "text",
    ["", " ", "MiB", "1 MiBs", "1 XB", "-1 MiB", "1,5 MB", "1e6", "one MiB", "1.2.3 KB"],
)
def test_parse_size_refuses_garbage(text):
    """Anything but a number and a known unit is a ValueError."""
    with pytest.raises(ValueError, match="not a size"):
        parse_size(text)


def test_parse_size_refuses_negative_and_other_types():
    """Negative ints are ValueErrors; floats, None, bools and bytes TypeErrors."""
    with pytest.raises(ValueError):
        parse_size(-1)
    for value in (1.5, None, True, b"1 MiB"):
        with pytest.raises(TypeError):
            parse_size(value)


@pytest.mark.parametrize(
    ("n", "expected"),
    [
        (0, "0 B"),
        (1023, "1023 B"),
        (1024, "1.00 KiB"),
        (1536, "1.50 KiB"),
        (16 * 1024 * 1024, "16.0 MiB"),
        (3 * 512 * 1024 * 1024, "1.50 GiB"),
        (5 * 1024**4, "5.00 TiB"),
        (2048 * 1024**4, "2.00 PiB"),
    ],
)
def test_format_size(n, expected):
    """Binary units with three significant digits, as every output writes them."""
    assert format_size(n) == expected


def test_format_size_exact():
    """``exact=True`` adds the bytes unless they are already shown."""
    assert format_size(100, exact=True) == "100 B"
    assert format_size(1536, exact=True) == "1.50 KiB (1,536 B)"
    assert format_size(2 * 1024 * 1024, exact=True) == "2.00 MiB (2,097,152 B)"


# assert_memory_below's measures, and where each scenario's truth has the same figure.
TRUTH_MEASURES = {
    "peak_requested": lambda d: d["peak"]["live_requested_bytes"],
    "end_reserved": lambda d: d["summary"]["reserved_bytes"],
    "end_allocated": lambda d: d["summary"]["allocated_bytes"],
}


@pytest.mark.parametrize("what", sorted(TRUTH_MEASURES))
@pytest.mark.parametrize("name", ["two_devices_recv_leak", "loss_accum_no_detach"])
def test_memory_below_at_the_truth_figure(scenario, name, what):
    """At the largest device's truth figure it passes; a byte below, that device fails."""
    s = scenario(name)
    figures = {d["device"]: TRUTH_MEASURES[what](d) for d in s.devices}
    largest = max(figures.values())
    assert assert_memory_below(s.path, largest, what) == figures
    with pytest.raises(AssertionError) as info:
        assert_memory_below(s.path, largest - 1, what)
    message = str(info.value)
    assert what in message
    for device, figure in figures.items():
        assert (f"device {device}: {format_size(figure, exact=True)}" in message) == (
            figure == largest
        )


def test_memory_below_one_device(scenario):
    """``device=`` checks one device: the smaller one passes under the larger's figure."""
    s = scenario("two_devices_recv_leak")
    figures = {d["device"]: d["peak"]["live_requested_bytes"] for d in s.devices}
    smallest = min(figures, key=figures.get)
    limit = figures[smallest]
    assert assert_memory_below(s.path, limit, device=smallest) == {smallest: limit}
    with pytest.raises(AssertionError):
        assert_memory_below(s.path, limit)


def test_memory_below_refuses_unknown_measures(scenario):
    """Only the gate's measures can be limited."""
    with pytest.raises(ValueError, match="peak_requested"):
        assert_memory_below(scenario("control_no_leak").path, "1 GiB", "peak_allocated")


def test_memory_below_refuses_a_device_not_in_the_snapshot(scenario):
    """A device the snapshot does not hold is a mistake, not a pass."""
    s = scenario("control_no_leak")
    absent = 1 + max(d["device"] for d in s.devices)
    with pytest.raises(ValueError, match=f"no device {absent}"):
        assert_memory_below(s.path, "1 GiB", device=absent)
