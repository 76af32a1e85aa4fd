"""Span records as rows of the ``spans`` table, and rows as parameters of few statements.

What the loader inserts from records (our per-line fallback, every importer, OTLP read in
Python): :func:`span_row` makes one record a tuple in ``SPAN_COLUMNS`` order, with its
attributes, events and links as JSON text DuckDB accepts; :func:`chunks` and
:func:`placeholders` put many rows into a few multi-row statements (DuckDB's ``executemany``
costs about 0.6 ms a row).

A row is what the store can always take and the analysis can always read (docs/bad-input.md):
:func:`span_row` refuses a record that :func:`~agentscope.records.span_problem` refuses (the
caller reports it), and normalises what can be kept: lone surrogates become U+FFFD, NaN and
infinities the strings ``"NaN"``/``"Infinity"`` (JSON has no such numbers, and DuckDB's JSON
functions stop at them), values nested deeper than :data:`MAX_DEPTH` their JSON text, keys
that are not strings their ``str``.
"""

from __future__ import annotations

import json
import math
import os
import re
from typing import Any, Iterable, Optional

from ..errors import TraceFormatError
from ..records import SampleRecord, SpanRecord, sample_problem, span_problem

# a lone UTF-16 surrogate (valid in a JSON string escape, so Python's json accepts one) is not
# text: DuckDB rejects the JSON that holds one. It becomes U+FFFD, as an invalid byte does.
_SURROGATE = re.compile("[\ud800-\udfff]")
# attribute values nested deeper than this are kept as their JSON text (a string): readers of
# the store that walk attributes recursively (the exporters, json.loads) stay far from
# Python's recursion limit
MAX_DEPTH = 64

_dumps = json.JSONEncoder(ensure_ascii=False, allow_nan=False, default=str).encode


class BadRecord(ValueError):
    """A record the store cannot take; the message says why."""


def _text(value: "str | None") -> "str | None":
    if value is None or value.isascii():
        return value
    return _SURROGATE.sub("\ufffd", value)


def json_text(value: Any) -> str:
    """``value`` as JSON text that DuckDB's JSON functions and Python's ``json`` read back:
    see the module's docstring for what is changed on the way."""
    try:
        text = _dumps(value)
    except (ValueError, TypeError, RecursionError):  # NaN, a key of no JSON type, deep
        text = _dumps(_plain(value, 0))
    else:
        if (text.count("[") + text.count("{") > MAX_DEPTH
                and _depth(value, 0) > MAX_DEPTH):
            text = _dumps(_plain(value, 0))
    return text if text.isascii() else _SURROGATE.sub("\ufffd", text)


def _depth(value: Any, level: int) -> int:
    """How deep ``value`` nests (stopping a little past MAX_DEPTH: that is enough to know)."""
    if level > MAX_DEPTH or not isinstance(value, (dict, list, tuple)):
        return level
    items = value.values() if isinstance(value, dict) else value
    return max((_depth(v, level + 1) for v in items), default=level + 1)


def _plain(value: Any, level: int) -> Any:
    """A copy of ``value`` with the changes :func:`json_text` promises."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if value != value else ("Infinity" if value > 0 else "-Infinity")
    if not isinstance(value, (dict, list, tuple)):
        return value
    if level >= MAX_DEPTH:
        try:
            return _dumps(_plain(value, -(1 << 20)))  # its text, made of the same plain values
        except RecursionError:
            return f"(nested deeper than {MAX_DEPTH} levels: not kept)"
    if isinstance(value, dict):
        return {str(k) if not isinstance(k, (str, int, float, bool)) or k is None else k:
                _plain(v, level + 1) for k, v in value.items()}
    return [_plain(v, level + 1) for v in value]


def span_row(r: SpanRecord, checked: bool = False) -> tuple:
    """A record as a row of ``spans`` (``SPAN_COLUMNS`` order, ``file_id`` not included).
    Raises :class:`BadRecord` for a record the store cannot take, unless ``checked``: its
    reader already passed it through :func:`~agentscope.records.span_problem`."""
    if not checked:
        problem = span_problem(r)
        if problem:
            raise BadRecord(problem)
    events = json_text([{"name": e.name, "time_ns": e.time_ns, "attrs": dict(e.attrs)}
                        for e in r.events]) if r.events else "[]"
    links = json_text([{"trace_id": k.trace_id, "span_id": k.span_id, "attrs": dict(k.attrs)}
                       for k in r.links]) if r.links else "[]"
    return (r.trace_id, r.span_id, r.parent_span_id, _text(r.name), _text(r.stage), r.kind,
            r.start_ns, r.end_ns, r.status, _text(r.status_message), _text(r.service),
            _text(r.host), r.pid, r.tid, r.thread_cpu_ns, r.child_cpu_ns, r.children, r.vcsw,
            r.ivcsw, r.minflt, r.majflt, r.child_majflt, json_text(dict(r.attrs)), events,
            links)


def sample_row(s: SampleRecord) -> tuple:
    """A sample as a row of ``samples`` (``file_id`` not included); raises
    :class:`BadRecord` for one the store cannot take."""
    problem = sample_problem(s)
    if problem:
        raise BadRecord(problem)
    return (s.ts_ns, _text(s.host), s.pid, _text(s.source), _text(s.device), _text(s.metric),
            s.value)


def sample_rows(records: Iterable[SampleRecord], path: str, problems: Optional[list]) -> list:
    """The rows of sample ``records``; one the store cannot take (:func:`sample_row` refuses
    it) is a problem naming ``path`` instead."""
    rows = []
    for r in records:
        try:
            rows.append(sample_row(r))
        except BadRecord as e:
            if problems is not None:
                problems.append(TraceFormatError(path, None, f"sample {_name_of(r.metric)}: {e}"))
    return rows


def span_rows(records: Iterable[SpanRecord], file_id: int, path: str, problems: list,
              checked: bool = True) -> list:
    """The rows of ``records`` (each with ``file_id``); a record the store cannot take
    (:func:`span_row` refuses it) is a problem naming ``path`` and the span instead.
    ``checked``: the reader passed each record through records.span_problem already (every
    reader of the loader does: spanfile.decode, readers.checked), with its line; it is not
    checked twice (a record that still fails to insert makes its file's transaction fail,
    and the file is named)."""
    rows = []
    for r in records:
        try:
            rows.append(span_row(r, checked) + (file_id,))
        except BadRecord as e:
            problems.append(TraceFormatError(path, None, f"span {_name(r)}: {e}",
                                             span_id=_span_id(r)))
    return rows


def _name(r: Any) -> str:
    return _name_of(getattr(r, "name", None))


def _name_of(name: Any) -> str:
    text = repr(name) if isinstance(name, str) else "(no name)"
    return text if len(text) <= 80 else text[:77] + "..."


def _span_id(r: Any) -> Optional[str]:
    sid = getattr(r, "span_id", None)
    return sid if isinstance(sid, str) and len(sid) <= 64 else None


def db_text(text: str) -> str:
    """A path or reason as the store keeps it: DuckDB takes UTF-8 only, so a file name that
    is not UTF-8 (``os.fsdecode`` gives lone surrogates for its bytes) gets those bytes as
    ``\\xff`` escapes (the same name always gives the same text), and any other lone
    surrogate becomes U+FFFD."""
    if text.isascii() or not _SURROGATE.search(text):
        return text
    if all("\udc80" <= c <= "\udcff" for c in _SURROGATE.findall(text)):
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    return _SURROGATE.sub("\ufffd", text)


def stored(problem: TraceFormatError) -> TraceFormatError:
    """``problem`` with its path, reason and span id as the store keeps them
    (:func:`db_text`): the same problem when they need no change."""
    path, reason = db_text(problem.path), db_text(problem.reason)
    span_id = None if problem.span_id is None else db_text(str(problem.span_id))
    if (path, reason, span_id) == (problem.path, problem.reason, problem.span_id):
        return problem
    return TraceFormatError(path, problem.line, reason, span_id, problem.torn)


def chunks(rows: list, size: int = 500) -> list:
    """``rows`` in chunks of at most ``size`` (one statement each)."""
    return [rows[i:i + size] for i in range(0, len(rows), size)]


def placeholders(rows: list) -> str:
    """``(?, ?), (?, ?)`` for rows of equal length (parameters, never values in the SQL)."""
    one = "(" + ", ".join("?" * len(rows[0])) + ")"
    return ", ".join([one] * len(rows))


def quoted(text: "str | os.PathLike[str]") -> str:
    """A DuckDB string literal of ``text`` (where a statement takes no parameters: a view,
    COPY, a list of names)."""
    return "'" + str(text).replace("'", "''") + "'"
