"""Result objects: each holds the JSON the command line prints for the same arguments
(``to_dict``), the text it prints (``str()``), its main table (``rows``, ``to_pandas``)
and a notebook view of that text (``_repr_html_``)."""

from __future__ import annotations

import copy
import html
import json
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple

Row = Dict[str, Any]


def _label(site: Optional[dict]) -> Optional[str]:
    return None if site is None else site.get("label")


def _devices(d: dict) -> Iterable[dict]:
    return d.get("devices") or []


def _summary_rows(d: dict) -> List[Row]:
    keys = ("segments", "blocks", "active_blocks", "reserved_bytes", "allocated_bytes",
            "active_bytes", "requested_bytes", "rounding_overhead_bytes", "cached_free_bytes",
            "trace_events")
    return [{"device": dev["device"], **{k: dev.get(k) for k in keys}} for dev in _devices(d)]


def _suspect_row(device: int, s: dict, suspect: bool) -> Row:
    return {
        "device": device,
        "site": _label(s.get("site")),
        "role": s.get("role"),
        "kind": s.get("kind"),
        "suspect": suspect,
        "bytes_per_window": s.get("bytes_per_window"),
        "bytes_per_occurrence": s.get("bytes_per_occurrence"),
        "period_windows": s.get("period_windows"),
        "windows_growing": s.get("windows_growing"),
        "windows_total": s.get("windows_total"),
        "onset_window": s.get("onset_window"),
        "retained_bytes": s.get("retained_bytes"),
        "bytes_at_end": s.get("bytes_at_end"),
    }


def _leaks_rows(d: dict) -> List[Row]:
    rows = []
    for dev in _devices(d):
        rows += [_suspect_row(dev["device"], s, True) for s in dev.get("suspects") or []]
        rows += [_suspect_row(dev["device"], s, False) for s in dev.get("not_suspects") or []]
    return rows


def _top_rows(d: dict) -> List[Row]:
    return [
        {"device": dev["device"], "site": _label(r.get("site")), "role": r.get("role"),
         "bytes": r.get("bytes"), "share": r.get("share"), "blocks": r.get("blocks")}
        for dev in _devices(d) for r in dev.get("rows") or []
    ]


def _tree_rows(d: dict) -> List[Row]:
    rows: List[Row] = []
    for dev in _devices(d):
        stack = [(dev.get("root"), 0)]
        while stack:
            node, depth = stack.pop()
            if not node:
                continue
            rows.append({"device": dev["device"], "depth": depth, "name": node.get("name"),
                         "bytes": node.get("bytes"), "self_bytes": node.get("self_bytes"),
                         "blocks": node.get("blocks")})
            stack += [(c, depth + 1) for c in reversed(node.get("children") or [])]
    return rows


def _oom_rows(d: dict) -> List[Row]:
    return [
        {"device": dev["device"], "site": _label(h.get("site")), "role": h.get("role"),
         "bytes": h.get("bytes"), "blocks": h.get("blocks")}
        for dev in _devices(d) for h in dev.get("top_holders") or []
    ]


def _segments_rows(d: dict) -> List[Row]:
    keys = ("address", "total_size", "pool", "stream", "expandable", "allocated_bytes",
            "active_bytes", "requested_bytes", "internal_free_bytes", "external_free_bytes",
            "largest_free_block_bytes")
    return [{"device": dev["device"], **{k: s.get(k) for k in keys}}
            for dev in _devices(d) for s in dev.get("segments") or []]


def _timeline_rows(d: dict) -> List[Row]:
    keys = ("address", "bytes", "alloc_event", "first_event", "free_event", "alloc_time_us",
            "free_time_us", "role", "site")
    return [{"device": dev["device"], **{k: a.get(k) for k in keys}}
            for dev in _devices(d) for a in dev.get("allocations") or []]


def _windows_rows(d: dict) -> List[Row]:
    rows = []
    for dev in _devices(d):
        names = dev.get("names") or []
        for i, start in enumerate(dev.get("starts") or []):
            rows.append({"device": dev["device"], "window": i, "start_event": start,
                         "name": names[i] if i < len(names) else None})
    return rows


def _compare_rows(d: dict) -> List[Row]:
    rows = []
    for dev in _devices(d):
        for s in dev.get("sites") or []:
            rows.append({"device_a": dev["a"]["device"], "device_b": dev["b"]["device"],
                         "site": _label(s.get("site")), "role": s.get("role"),
                         "a_bytes_per_window": s["a"]["bytes_per_window"], "a_kind": s["a"]["kind"],
                         "b_bytes_per_window": s["b"]["bytes_per_window"], "b_kind": s["b"]["kind"],
                         "difference": s.get("difference"),
                         "kind_changed": s.get("kind_changed")})
    return rows


def _compare_at_rows(d: dict) -> List[Row]:
    return [{"device_a": dev["device_a"], "device_b": dev["device_b"],
             "site": _label(r.get("site")), "role": r.get("role"), "a_bytes": r["a_bytes"],
             "b_bytes": r["b_bytes"], "difference": r["difference"]}
            for dev in _devices(d) for r in dev.get("rows") or []]


def _compare_steps_rows(d: dict) -> List[Row]:
    rows: List[Row] = []
    for p in d.get("steps") or []:
        base = {"step": p["step"], "rank": p.get("rank"), "error": p.get("error")}
        devices = p["compare"]["devices"]
        if not devices:  # the pair could not be compared: its error alone
            rows.append({**base, "device": None})
        for dev in devices:
            top = dev["rows"][0] if dev.get("rows") else {}
            rows.append({**base, "device": dev["device_b"], "a_bytes": dev["a_total"],
                         "b_bytes": dev["b_total"], "difference": dev["difference"],
                         "largest_change": top.get("difference"),
                         "largest_change_site": _label(top.get("site"))})
    return rows


def _ranks_rows(d: dict) -> List[Row]:
    keys = ("rank", "step", "file", "device", "peak_requested_bytes", "end_allocated_bytes",
            "growth_bytes_per_window", "top_suspect_bytes_per_window", "windows", "verdicts",
            "outlier", "disagrees", "error")
    return [{**{k: r.get(k) for k in keys}, "top_suspect": _label(r.get("top_suspect"))}
            for r in d.get("ranks") or []]


def _check_rows(d: dict) -> List[Row]:
    return [
        {"file": f["file"], "device": dev["device"], "name": c["name"], "value": c["value"],
         "limit": c["limit"], "passed": c["passed"], "site": _label(c.get("site")),
         "role": c.get("role"), "kind": c.get("kind"), "unjudged": c.get("unjudged")}
        for f in d.get("files") or [] for dev in f.get("devices") or []
        for c in dev.get("cases") or []
    ]


def _report_rows(d: dict) -> List[Row]:
    return [
        {"device": dev["device"], "peak_event": (dev.get("peak") or {}).get("event_index"),
         "peak_requested_bytes": (dev.get("peak") or {}).get("requested_bytes"),
         "peak_reserved_bytes": dev.get("peak_reserved_bytes"),
         "suspects": len((dev.get("leaks") or {}).get("suspects") or [])}
        for dev in _devices(d)
    ]


_ROWS: Dict[str, Callable[[dict], List[Row]]] = {
    "summary": _summary_rows, "leaks": _leaks_rows, "top": _top_rows, "tree": _tree_rows,
    "oom": _oom_rows, "segments": _segments_rows, "timeline": _timeline_rows,
    "windows": _windows_rows, "compare": _compare_rows, "compare_at": _compare_at_rows,
    "compare_steps": _compare_steps_rows,
    "ranks": _ranks_rows, "check": _check_rows, "report": _report_rows,
}


class Result:
    """A report: what ``leakscope <command> --json`` prints, as an object.

    Example::

        r = leakscope.load("run.pickle").leaks()
        r.to_dict()["schema"]      # 'leakscope.leaks/7'
        r.to_pandas()              # one row per growing site
    """

    def __init__(self, command: str, data: dict, text: str = "") -> None:
        self.command = command
        self._data = data
        self._text = text

    @classmethod
    def _from_json(cls, command: str, native: Tuple[str, str]) -> "Result":
        """From what the native layer returns: the report's JSON and its text."""
        data, text = native
        return cls(command, json.loads(data), text)

    def __str__(self) -> str:
        """What ``leakscope <command>`` prints for the same arguments (without colour)."""
        return self._text

    @property
    def schema(self) -> str:
        """The JSON schema name and version, for example ``leakscope.leaks/7``."""
        return self._data.get("schema", "")

    def to_dict(self) -> dict:
        """The report as the command line's ``--json`` prints it (a fresh copy).

        Example::

            snap.top(at="peak").to_dict()["devices"][0]["rows"][0]["site"]["label"]
        """
        return copy.deepcopy(self._data)

    def to_json(self, indent: Optional[int] = 2) -> str:
        """The report as JSON text."""
        return json.dumps(self._data, indent=indent)

    def rows(self) -> List[Row]:
        """The main table as a list of dicts (one per site, segment, rank, ...)."""
        return _ROWS[self.command](self._data)

    def to_pandas(self) -> Any:
        """The main table as a ``pandas.DataFrame`` (``pip install pandas``).

        Example::

            df = snap.leaks().to_pandas()
            df[df.suspect].sort_values("bytes_per_window", ascending=False)
        """
        try:
            import pandas
        except ImportError as e:  # pragma: no cover - depends on the environment
            raise ImportError(
                "to_pandas() needs pandas: pip install pandas (or leakscope[pandas])"
            ) from e
        return pandas.DataFrame(self.rows())

    def _repr_html_(self) -> str:
        # The command's own text, so a notebook shows all it says (an OOM's request,
        # driver free, fragmentation and advice), sized and worded once, in Rust.
        caption = f"leakscope {self.command}"
        return (f"<div><strong>{html.escape(caption)}</strong>"
                f"<pre style=\"white-space: pre; overflow-x: auto\">{html.escape(self._text)}</pre>"
                f"</div>")

    def __repr__(self) -> str:
        return f"<leakscope {self.command} result: {self.schema}, {len(self.rows())} rows>"


class CheckResult(Result):
    """The CI gate's result: ``passed``, every case, and the JUnit XML.

    Example::

        r = leakscope.check(["run.pickle"], budget="leakscope.toml")
        assert r.passed, r.failures()
    """

    def __init__(self, data: dict, junit: str, text: str = "") -> None:
        super().__init__("check", data, text)
        self.junit = junit

    @property
    def passed(self) -> bool:
        """Whether every limit of every file and device held."""
        return bool(self._data.get("passed"))

    def failures(self) -> List[Row]:
        """The cases that failed."""
        return [r for r in self.rows() if not r["passed"]]

    def __bool__(self) -> bool:
        return self.passed
