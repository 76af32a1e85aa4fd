"""The JSON report, schema ``agentscope.analysis/v1`` (ARCHITECTURE §7): what
``agentscope analyze --format json`` prints and :meth:`Analysis.to_dict` returns."""

from __future__ import annotations

import datetime
import json
import math
import re
from typing import Any, Optional

import numpy as np

from ..analyzers.evidence import CLASSES
from ..analyzers.verdict import bottleneck_assumed
from .frames import section_columns

SCHEMA = "agentscope.analysis/v1"


def iso_time(ns: int) -> str:
    """ns since the epoch as ISO 8601 UTC, to the millisecond (e.g. 2026-12-02T10:00:00.000Z)."""
    t = datetime.datetime.fromtimestamp(ns / 1e9, tz=datetime.timezone.utc)
    return t.isoformat(timespec="milliseconds").replace("+00:00", "Z")


DETAILS = ("sections", "tasks")


def document(analysis: Any, detail: str = "sections") -> dict:
    """The whole document of an :class:`~agentscope.analysis.Analysis`; ``detail="tasks"``
    leaves out each task's ``critical_path`` (the sections, most of a large document and of
    its making), all else the same."""
    return _document(analysis, task_documents(analysis, 0, None, detail))


def task_documents(analysis: Any, lo: int = 0, hi: Optional[int] = None,
                   detail: str = "sections") -> list:
    """The documents of tasks ``lo`` .. ``hi`` - 1 (default: all), as in :func:`document`."""
    _check_detail(detail)
    tasks = analysis.task_results[lo:hi]
    if detail == "tasks":
        return [_task(t, None) for t in tasks]
    cuts = np.searchsorted(np.asarray(analysis.sections.task, dtype=np.int64),
                           np.arange(lo, lo + len(tasks) + 1)).tolist()
    cols = section_columns(analysis, cuts[0], cuts[-1])  # their sections at once, then cut
    if not np.isfinite(cols["confidence"]).all():
        cols["confidence"] = finite(cols["confidence"].tolist())
    # (a dict display per section: twice as fast as dict(zip(_SEGMENT, row)))
    path = [{"span_id": a, "name": b, "stage": c, "start_s": d, "end_s": e, "class": f,
             "confidence": g, "basis": h, "evidence": i}
            for a, b, c, d, e, f, g, h, i in zip(*(
                cols[c] if isinstance(cols[c], list) else cols[c].tolist() for c in _SEGMENT))]
    base = cuts[0]
    return [_task(t, path[cuts[i] - base:cuts[i + 1] - base]) for i, t in enumerate(tasks)]


# tasks encoded at a time by write_document: a few MB of text and dicts, whatever the size
CHUNK_TASKS = 2000


def write_document(analysis: Any, write: Any, detail: str = "sections") -> None:
    """:func:`document` as compact JSON text (what :func:`strict_json` writes of it, with
    ``indent=None``), given to ``write`` piece by piece: the tasks a chunk at a time, so that
    neither the whole text nor every section's dict is ever in memory."""
    _check_detail(detail)  # (before anything is written)
    write('{"schema":' + strict_json(SCHEMA) + ',"tasks":[')
    sep = ""
    for lo in range(0, len(analysis.task_results), CHUNK_TASKS):
        text = strict_json(task_documents(analysis, lo, lo + CHUNK_TASKS, detail))[1:-1]
        if text:
            write(sep + text)
            sep = ","
    rest = _document(analysis, [])
    del rest["schema"], rest["tasks"]
    write("]," + strict_json(rest)[1:])


def _check_detail(detail: str) -> None:
    if detail not in DETAILS:
        raise ValueError(f"detail must be one of {', '.join(DETAILS)}, not {detail!r}")


def _document(analysis: Any, tasks: list) -> dict:
    return {
        "schema": SCHEMA,
        "tasks": tasks,
        "summary": finite(analysis.summary.to_dict()),
        "problems": [{"file": p.path, "line": p.line, "span_id": p.span_id, "reason": p.reason,
                      "torn": p.torn} for p in analysis.problems],
        "warnings": list(analysis.warnings),
    }


# a critical-path segment of the document: these section columns, under the same names
_SEGMENT = ("span_id", "name", "stage", "start_s", "end_s", "class", "confidence", "basis",
            "evidence")


def _task(t: Any, critical_path: Optional[list]) -> dict:
    doc = {
        "trace_id": t.trace_id,
        "name": t.name,
        "lane": t.lane,
        "service": t.service,
        "start": iso_time(t.start_ns),
        "duration_s": round(t.duration_ns / 1e9, 9),
        "bottleneck": t.bottleneck,
        "confidence": t.confidence,
        "measured_share": t.measured_share,
        "shares": {c: round(t.shares.get(c, 0.0), 6) for c in CLASSES},
        # the part of each share that rests on a stage label or an assumption, not measurement
        "assumed_shares": {c: round(t.assumed.get(c, 0.0), 6) for c in CLASSES},
        "bottleneck_assumed": bottleneck_assumed(t),
        "evidence": list(t.evidence),
        "spans": t.spans,
        # critical-path seconds lost to timeouts and to retried failures
        "timeout_s": round(t.timeout_ns / 1e9, 9),
        "retry_s": round(t.retry_ns / 1e9, 9),
        "critical_path": critical_path,
    }
    if critical_path is None:  # detail="tasks"
        del doc["critical_path"]
    # its floats, summed in C: the sum is finite exactly when all of them are (a share is at
    # most 1, so no sum of finite ones overflows)
    total = t.confidence + t.measured_share + sum(t.shares.values()) + sum(t.assumed.values())
    return doc if total - total == 0 else finite(doc)


def finite(value: Any) -> Any:
    """``value`` with each float that is not finite (NaN, ±infinity) replaced by None, in
    dicts, lists and tuples at any depth (tuples become lists): JSON has no NaN, and
    ``json.dumps`` writes ``NaN``/``Infinity`` that strict parsers (JavaScript's, jq,
    Go's) refuse. Other values are returned as they are."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value


def strict_json(value: Any, indent: Optional[int] = None, **kwargs: Any) -> str:
    """``json.dumps(value)`` that every JSON parser takes: a float that is not finite is
    written as null (:func:`finite`), never as ``NaN``/``Infinity``. ASCII only, as
    ``json.dumps`` writes it (other characters as \\u escapes: a name that holds terminal
    or bidirectional controls stays inert). Encoded by orjson where it is installed and the
    value is plain (str keys, 64-bit integers; ``indent`` None or 2): several times faster
    for a large document, the same JSON. ``kwargs`` go to ``json.dumps`` (``default=``,
    ...) and send the value there."""
    if not kwargs and indent in (None, 2):
        fast = _orjson(value, indent)
        if fast is not None:
            return fast
    try:
        return json.dumps(value, indent=indent, allow_nan=False, **kwargs)
    except ValueError as e:
        if "not JSON compliant" not in str(e):  # e.g. a circular reference
            raise
        return json.dumps(finite(value), indent=indent, allow_nan=False, **kwargs)


_NOT_ASCII = re.compile(r"[^\x00-\x7f]+")


def _orjson(value: Any, indent: Optional[int]) -> Optional[str]:
    """``value`` as JSON text by orjson (NaN and infinities as null, as :func:`finite`
    makes them; non-ASCII escaped as ``json.dumps`` escapes it), or None where orjson is
    not installed or does not take the value (a key that is not a string, an integer
    beyond 64 bits, a type it does not know)."""
    try:
        import orjson
    except ImportError:
        return None
    try:
        raw = orjson.dumps(value, option=orjson.OPT_INDENT_2 if indent == 2 else 0)
    except (TypeError, orjson.JSONEncodeError):
        return None
    text = raw.decode()
    if raw.isascii():
        return text
    # each run of other characters as json.dumps writes it (\\u escapes, surrogate pairs)
    return _NOT_ASCII.sub(lambda m: json.dumps(m.group())[1:-1], text)
