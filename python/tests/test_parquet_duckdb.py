"""The Parquet export queried with DuckDB, on the shipped verl run (four ranks, two steps,
rank 3 leaking): the tables agree with the ranks report, with the snapshots read by
CPython's own unpickler, with each other (events to their stacks) and with the fixture's
generator (which rank leaks, at which site).
"""

from __future__ import annotations

import json
import pickle
from collections import defaultdict
from pathlib import Path

import pytest

import leakscope
from leakscope import _native

duckdb = pytest.importorskip("duckdb", reason="duckdb is not installed (pip install duckdb)")
if not hasattr(_native, "export_parquet"):
    pytest.skip("this build has no _native.export_parquet (the Parquet export)",
                allow_module_level=True)

ROOT = Path(__file__).resolve().parents[2]
VERL = ROOT / "fixtures" / "scenarios" / "verl_ranks"
TRUTH = json.loads((VERL / "truth.json").read_text())


class _DataOnly(pickle.Unpickler):
    """CPython's unpickler, refusing anything that would import code."""

    def find_class(self, module, name):  # pragma: no cover - the fixtures hold data only
        raise pickle.UnpicklingError(f"refusing {module}.{name}")


@pytest.fixture(scope="module")
def tables(tmp_path_factory):
    """The run exported once; a DuckDB connection with a view per table."""
    out = tmp_path_factory.mktemp("parquet")
    summary = _native.export_parquet([str(VERL)], str(out))
    con = duckdb.connect()
    for t in summary["tables"]:
        con.execute(f"create view {t['table']} as select * from read_parquet('{t['path']}')")
    yield con, summary
    con.close()


def test_the_export_says_what_it_wrote(tables):
    con, summary = tables
    assert {t["table"] for t in summary["tables"]} == {
        "files", "ranks", "suspects", "top_sites", "events", "stacks", "series"}
    for t in summary["tables"]:
        (n,) = con.execute(f"select count(*) from {t['table']}").fetchone()
        assert n == t["rows"], t
    assert summary["files_read"] == len(TRUTH["files"])


def test_growth_per_rank_is_the_ranks_reports(tables):
    con, _ = tables
    report = leakscope.ranks(VERL).to_dict()["ranks"]
    want = sorted((r["file"], r["rank"], r["step"], r["device"], r["growth_bytes_per_window"],
                   r["end_allocated_bytes"], r["outlier"],
                   r["top_suspect"]["label"] if r["top_suspect"] else None) for r in report)
    got = con.execute("""
        select file, rank, step, device, growth_bytes_per_window, end_allocated_bytes,
               outlier, top_suspect
        from ranks order by file, device""").fetchall()
    assert sorted(tuple(r) for r in got) == want
    per_rank = dict(con.execute("""
        select rank, max(growth_bytes_per_window) from ranks where verdicts group by rank
    """).fetchall())
    for rank, growth in per_rank.items():
        assert growth == TRUTH["growth_per_micro_batch_bytes"][str(rank)]


def _allocated_per_file() -> dict:
    """Σ size of the trace's `alloc` entries per file, read with CPython's unpickler."""
    sums = {}
    for f in TRUTH["files"]:
        with open(VERL / f["path"], "rb") as fh:
            snap = _DataOnly(fh).load()
        sums[f["path"]] = sum(e["size"] for trace in snap["device_traces"] for e in trace
                              if e.get("action") == "alloc")
    return sums


def test_allocated_bytes_per_file_are_the_traces(tables):
    con, _ = tables
    got = dict(con.execute(
        "select file, sum(size) from events where action = 'alloc' group by file").fetchall())
    want = _allocated_per_file()
    assert {str(Path(f).relative_to(VERL)): int(n) for f, n in got.items()} == want
    assert all(n > 0 for n in want.values())


def test_every_event_with_a_stack_joins_its_innermost_frame(tables):
    con, _ = tables
    (with_stack,) = con.execute("select count(*) from events where stack_id <> 0").fetchone()
    assert with_stack > 0
    (joined, unnamed) = con.execute("""
        select count(*), count(*) filter (where s.name is null)
        from events e join stacks s
          on s.file = e.file and s.stack_id = e.stack_id and s.depth = 0
        where e.stack_id <> 0""").fetchone()
    assert joined == with_stack and unnamed == 0
    # One innermost frame per stack, and every stack's depths run 0, 1, ... without a gap.
    (bad,) = con.execute("""
        select count(*) from (
          select file, stack_id from stacks group by file, stack_id
          having min(depth) <> 0 or max(depth) + 1 <> count(*)
             or count(distinct depth) <> count(*))""").fetchone()
    assert bad == 0


def test_ranks_joined_with_suspects_name_the_leaking_site_on_the_outlier(tables):
    con, _ = tables
    rows = con.execute("""
        select r.rank, r.step, s.label, s.kind, s.bytes_per_window, s.windows_grown
        from ranks r join suspects s on s.file = r.file and s.device = r.device
        where r.outlier
        order by r.step, s.bytes_per_window desc""").fetchall()
    assert {rank for rank, *_ in rows} == set(TRUTH["leaking_ranks"])
    sites = {s["site"]: s["bytes_per_window"] for s in TRUTH["leak"]["sites"]}
    by_step = defaultdict(list)
    for _rank, step, label, kind, rate, grown in rows:
        by_step[step].append((label, rate, kind, grown))
    assert set(by_step) == {str(s) for s in TRUTH["steps"]}
    for found in by_step.values():
        label, rate, _kind, grown = found[0]  # the largest suspect of the outlier rank
        assert label in sites and rate == sites[label] and grown > 0
    # The ranks without a leak have no suspect.
    (others,) = con.execute("""
        select count(*) from ranks r join suspects s on s.file = r.file
        where r.rank not in (select unnest(?::bigint[]))""",
        [TRUTH["leaking_ranks"]]).fetchone()
    assert others == 0
