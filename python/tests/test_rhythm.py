"""Leaks with a rhythm and compare's change of kind in the Python API: the period and the
bytes per occurrence in ``to_pandas()``, ``kind_changed`` in a comparison's rows. Numbers
come from the scenario generator's ground truth, never from leakscope's output."""

from __future__ import annotations

import json
from pathlib import Path

import leakscope

SCENARIOS = Path(__file__).resolve().parents[2] / "fixtures" / "scenarios"


def truth(name: str) -> dict:
    return json.loads((SCENARIOS / f"{name}.truth.json").read_text())


def test_a_leak_once_per_step_has_its_period_in_pandas():
    leak = truth("leak_once_per_step")["leaks"][0]
    df = leakscope.load(SCENARIOS / "leak_once_per_step.pickle").leaks().to_pandas()
    row = df[df.suspect & (df.site == leak["site"])].iloc[0]
    assert row.kind == "leak"
    assert row.period_windows == leak["period_windows"]
    assert row.bytes_per_occurrence == leak["bytes_per_occurrence"]
    assert row.bytes_per_window == leak["bytes_per_window_mean"]


def test_compare_rows_say_the_kind_changed():
    leak = truth("plain_loop_kept_logits")["leaks"][0]
    r = leakscope.compare(SCENARIOS / "plain_loop_control.pickle",
                          SCENARIOS / "plain_loop_kept_logits.pickle")
    rows = r.to_pandas()
    first = rows.iloc[0]
    assert first.site == leak["site"]
    assert bool(first.kind_changed) and first.b_kind == "leak"
    assert first.difference == leak["bytes_per_window"]
