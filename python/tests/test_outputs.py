"""The package's writers (``report(path)``, ``flamegraph(path)``, the exports) go through
the library's one output helper: a FIFO or a character device is written through and
stays what it is, a symlink to a file is kept, a link that leads nowhere is refused with
the library's usage error. Every node is the test's own (never the system's /dev/null)."""

import os
import stat
import threading
from pathlib import Path

import pytest

import leakscope

ROOT = Path(__file__).resolve().parents[2]
SCENARIO = ROOT / "fixtures" / "scenarios" / "control_no_leak.pickle"


def _read_fifo(path, into):
    with open(path, "rb") as f:
        into.append(f.read())


def _writers(snap, out):
    return [
        lambda: snap.report(out),
        lambda: snap.flamegraph(out, at="peak"),
        lambda: leakscope.export_perfetto([SCENARIO], out),
        lambda: leakscope.export_pprof(SCENARIO, out),
    ]


def test_a_fifo_gets_the_whole_output_and_stays_a_fifo(tmp_path):
    snap = leakscope.load(SCENARIO)
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    regular = tmp_path / "regular.out"
    for i in range(len(_writers(snap, regular))):
        _writers(snap, regular)[i]()
        expected = regular.read_bytes()
        got = []
        reader = threading.Thread(target=_read_fifo, args=(fifo, got))
        reader.start()
        _writers(snap, fifo)[i]()
        reader.join(timeout=60)
        assert not reader.is_alive()
        assert got == [expected], i
        assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


@pytest.mark.skipif(os.geteuid() != 0, reason="making a device node needs root")
def test_a_private_device_and_a_link_to_it_stay_a_device(tmp_path):
    snap = leakscope.load(SCENARIO)
    dev = tmp_path / "null.dev"
    os.mknod(dev, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    link = tmp_path / "link.dev"
    link.symlink_to(dev)
    for out in (dev, link):
        for write in _writers(snap, out):
            write()
            assert stat.S_ISCHR(os.stat(dev).st_mode)
            assert link.is_symlink()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".leakscope-")] == []


def test_links_are_kept_or_refused(tmp_path):
    snap = leakscope.load(SCENARIO)
    real = tmp_path / "real.html"
    real.write_text("old")
    link = tmp_path / "link.html"
    link.symlink_to(real)
    snap.report(link)
    assert link.is_symlink() and real.read_text().startswith("<!DOCTYPE html>")
    dangling = tmp_path / "dangling.html"
    dangling.symlink_to(tmp_path / "gone" / "away.html")
    with pytest.raises(leakscope.UsageError, match="does not exist"):
        snap.report(dangling)
    assert dangling.is_symlink() and not (tmp_path / "gone").exists()
