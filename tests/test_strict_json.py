"""The library's JSON never holds NaN or Infinity (which ``json.dumps`` writes by default and
strict parsers refuse): a figure that is not a finite number is null — in the
``agentscope.analysis/v1`` document, the plan, and what ``strict_json`` writes of query rows
or a what-if prediction."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pytest

import agentscope
from agentscope.analysis import document
from agentscope.analysis.document import finite, strict_json

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "sample_traces" / "example"
NAN, INF = float("nan"), float("inf")


def _strict(text: str):
    """Parse as a strict parser does: NaN, Infinity and -Infinity are errors."""
    def refuse(name):
        raise ValueError(f"not JSON: {name}")
    return json.loads(text, parse_constant=refuse)


@pytest.fixture(scope="module")
def analysis():
    with agentscope.analyze(EXAMPLE, db=":memory:") as a:
        yield a


@pytest.fixture
def poisoned(analysis):
    """The analysis with a NaN or an infinity in a task, a section and the summary."""
    t = analysis.task_results[0]
    bad_task = t._replace(confidence=NAN, measured_share=INF,
                          shares={**t.shares, "cpu": NAN}, assumed={"io": -INF})
    confidence = np.asarray(analysis.sections.confidence, dtype=np.float64).copy()
    confidence[0] = NAN
    return dataclasses.replace(
        analysis, task_results=(bad_task,) + analysis.task_results[1:],
        sections=dataclasses.replace(analysis.sections, confidence=confidence),
        summary=dataclasses.replace(analysis.summary, critical_path_s=INF,
                                    orchestration_share=NAN))


def test_the_analysis_document_is_strict_json(poisoned):
    assert math.isnan(poisoned.task_results[0].confidence)
    doc = _strict(poisoned.to_json())
    task = doc["tasks"][0]
    assert task["confidence"] is None and task["measured_share"] is None
    assert task["shares"]["cpu"] is None and task["assumed_shares"]["io"] is None
    assert task["critical_path"][0]["confidence"] is None
    assert doc["summary"]["critical_path_s"] is None
    assert doc["summary"]["orchestration_share"] is None
    assert doc["tasks"][1] == json.loads(json.dumps(poisoned.to_dict()["tasks"][1]))
    assert _strict(poisoned.to_json(indent=2)) == doc
    # to_dict itself holds none either
    assert _strict(json.dumps(poisoned.to_dict(), allow_nan=False)) == doc


def test_a_clean_document_is_unchanged(analysis):
    assert _strict(analysis.to_json()) == json.loads(json.dumps(analysis.to_dict()))


def test_query_rows_with_nan_write_as_null(analysis):
    columns, rows = analysis.query_rows(
        "SELECT 'nan'::DOUBLE AS a, 'inf'::DOUBLE AS b, '-inf'::DOUBLE AS c, 1.5::DOUBLE AS d, "
        "DATE '2026-01-02' AS e")
    with pytest.raises(ValueError):
        _strict(json.dumps([dict(zip(columns, r)) for r in rows], default=str))
    got = _strict(strict_json([dict(zip(columns, r)) for r in rows], default=str, indent=2))
    assert got == [{"a": None, "b": None, "c": None, "d": 1.5, "e": "2026-01-02"}]


def test_the_plan_holds_no_nan(analysis, monkeypatch):
    import agentscope.analysis.plan as plan_module

    real = plan_module.plan

    def plan_with_nan(*args, **kwargs):
        doc = real(*args, **kwargs)
        doc["nan_figure"] = NAN
        doc["nested"] = {"inf": [1.0, INF]}
        return doc

    monkeypatch.setattr(plan_module, "plan", plan_with_nan)
    doc = analysis.plan()
    assert doc["nan_figure"] is None and doc["nested"] == {"inf": [1.0, None]}
    _strict(json.dumps(doc, allow_nan=False))


def test_a_prediction_writes_strictly(analysis):
    doc = analysis.whatif("stage:tool=2").to_dict()
    doc["baseline"]["mean_s"] = NAN  # as a prediction over tasks of no duration could
    assert _strict(strict_json(doc))["baseline"]["mean_s"] is None


def test_finite_walks_everything_and_keeps_the_rest():
    value = {"a": [1, NAN, (INF, "x")], "b": {"c": -INF, "d": None, "e": True}, "f": 2.5,
             "g": np.float64("nan")}
    assert finite(value) == {"a": [1, None, [None, "x"]], "b": {"c": None, "d": None,
                                                                "e": True}, "f": 2.5, "g": None}
    assert finite(3) == 3 and finite("NaN") == "NaN" and math.isnan(NAN)


def test_strict_json_still_refuses_what_is_not_a_nan_problem():
    loop: list = []
    loop.append(loop)
    with pytest.raises(ValueError, match="Circular"):
        strict_json(loop)
    assert json.loads(document.strict_json({"x": 1})) == {"x": 1}


@pytest.mark.parametrize("fast", [True, False], ids=["orjson", "json"])
@pytest.mark.parametrize("indent", [None, 2])
def test_both_encoders_write_the_same_strict_ascii_json(fast, indent, monkeypatch):
    """strict_json encodes with orjson where it can and with json otherwise: the same JSON,
    strict (NaN as null) and ASCII only (terminal and bidirectional controls, astral
    characters and CJK as \\u escapes, as json.dumps writes them)."""
    if fast:
        pytest.importorskip("orjson")
    else:
        monkeypatch.setattr(document, "_orjson", lambda value, indent: None)
    value = {"tasks": [{"name": "\u4efb\u52a1 \u202eevil\x1b[31m \U0001f600", "share": NAN,
                        "d": -INF, "n": 3, "x": 0.1, "big": 1e300, "none": None,
                        "ok": True, "path": [{"s": 1e-7, "e": 12345.000000001}]}],
             "warnings": ["caf\u00e9"]}
    text = strict_json(value, indent=indent)
    assert text.isascii() and "\\u202e" in text and "\\ud83d\\ude00" in text
    got = _strict(text)
    assert got["tasks"][0]["share"] is None and got["tasks"][0]["d"] is None
    assert got == _strict(json.dumps(finite(value)))
    assert ("\n  " in text) == (indent == 2)


def test_strict_json_falls_back_for_what_orjson_does_not_take():
    """Integers beyond 64 bits and keys that are not strings go through json.dumps."""
    assert _strict(strict_json({"big": 10 ** 30, 1: 2.5})) == {"big": 10 ** 30, "1": 2.5}


def test_seconds_are_rounded_as_round_rounds_them():
    """frames.seconds divides in numpy where that equals round(n / 1e9, 9) (up to
    EXACT_NS), and rounds each value beyond."""
    from agentscope.analysis.frames import EXACT_NS, seconds

    rng = np.random.default_rng(7)
    for hi in (10 ** 3, 10 ** 9, 10 ** 13, EXACT_NS):
        ns = np.concatenate([rng.integers(-hi, hi, 50_000), [hi - 1, 1 - hi, 0]])
        assert seconds(ns) == [round(x, 9) for x in (ns / 1e9).tolist()]
    beyond = np.array([2 ** 62, 10 ** 18 + 1, 7], dtype=np.int64)
    assert seconds(beyond) == [round(x, 9) for x in (beyond / 1e9).tolist()]
