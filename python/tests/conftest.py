"""Shared fixtures: the shipped scenario snapshots and their generator's ground truth.

Each ``fixtures/scenarios/X.pickle`` has ``X.truth.json``, written by the generator that
made the snapshot (``fixtures/gen``): which call sites leak, their bytes per window, the
window the growth starts in, and how the generator cut the trace into windows. Tests
compare leakscope's findings with these, never with numbers leakscope printed.

Example::

    def test_names_the_site(scenario):
        s = scenario("loss_accum_no_detach")
        assert s.leaks[0].rate > 0
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Callable

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = ROOT / "fixtures" / "scenarios"


@dataclasses.dataclass(frozen=True)
class TruthLeak:
    """One leaking call site of a scenario, as its generator wrote it."""

    device: int
    site: str  # "file:line:function", or "<no python frame>"
    kind: str  # "leak" or "retained"
    rate: int  # bytes per window
    onset_window: int

    @property
    def filename(self) -> str | None:
        """The site's file, or ``None`` for a site without a Python frame."""
        parts = self.site.rsplit(":", 2)
        return parts[0] if len(parts) == 3 else None

    @property
    def function(self) -> str | None:
        """The site's function, or ``None`` for a site without a Python frame."""
        parts = self.site.rsplit(":", 2)
        return parts[2] if len(parts) == 3 else None


@dataclasses.dataclass(frozen=True)
class Scenario:
    """A shipped snapshot with its ground truth."""

    name: str
    path: Path
    truth: dict

    @property
    def devices(self) -> list[dict]:
        """The truth of each device (single-device truths are their own device)."""
        return self.truth.get("devices", [self.truth])

    @property
    def leaks(self) -> list[TruthLeak]:
        """Every leaking site on every device, largest rate first."""
        found = [
            TruthLeak(
                device=d["device"],
                site=leak["site"],
                kind=leak["kind"],
                rate=leak["bytes_per_window"],
                onset_window=leak["onset_window"],
            )
            for d in self.devices
            for leak in d["leaks"]
        ]
        return sorted(found, key=lambda leak: leak.rate, reverse=True)

    @property
    def windows(self) -> str:
        """The generator's windows as a leakscope windows spec.

        Annotation and frame windows translate directly; windows the generator marked by
        hand have no spec, and leakscope's ``auto`` is used.
        """
        specs = set()
        for d in self.devices:
            w = d["windows"]
            if w["kind"] == "annotation":
                specs.add(f"annotation:{w['annotation_regex']}")
            elif w["kind"] == "frame":
                specs.add(f"frame:^{re.escape(w['frame_function'])}$")
            else:
                specs.add("auto")
        (spec,) = specs
        return spec


@pytest.fixture
def scenario() -> Callable[[str], Scenario]:
    """A function that returns the named scenario: ``scenario("control_no_leak")``."""

    def load(name: str) -> Scenario:
        path = SCENARIOS / f"{name}.pickle"
        truth = json.loads((SCENARIOS / f"{name}.truth.json").read_text())
        return Scenario(name, path, truth)

    return load
