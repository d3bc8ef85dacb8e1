"""Result objects: each holds the JSON the command line prints for the same arguments
(``to_dict``), the text it prints (``str()``), its main table (``rows``, ``to_pandas``)
and a notebook view of that text (``_repr_html_``)."""

from __future__ import annotations

import copy
import html
import json
from typing import Any, Dict, List, Optional, Tuple

from . import _native

Row = Dict[str, Any]


class Result:
    """A report: what ``leakscope <command> --json`` prints, as an object.

    Example::

        r = leakscope.load("run.pickle").leaks()
        r.to_dict()["schema"]      # 'leakscope.leaks/8'
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
        """The JSON schema name and version, for example ``leakscope.leaks/8``."""
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
        return _native.rows(self._data)

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
