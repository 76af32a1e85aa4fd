"""Span records as rows of the ``spans`` table, and rows as parameters of few statements.

What the loader inserts from records (our per-line fallback, every importer, OTLP read in
Python): :func:`span_row` makes one record a tuple in ``SPAN_COLUMNS`` order, with its
attributes, events and links as JSON text DuckDB accepts; :func:`chunks` and
:func:`placeholders` put many rows into a few multi-row statements (DuckDB's ``executemany``
costs about 0.6 ms a row).
"""

from __future__ import annotations

import json
import re

from ..records import SpanRecord

# a lone UTF-16 surrogate (valid in a JSON string escape, so Python's json accepts one) is not
# text: DuckDB rejects the JSON that holds one. It becomes U+FFFD, as an invalid byte does.
_SURROGATE = re.compile("[\ud800-\udfff]")


def _text(value: "str | None") -> "str | None":
    return value if value is None or value.isascii() else _SURROGATE.sub("\ufffd", value)


def _json(value: object) -> str:
    text = json.dumps(value, default=str, ensure_ascii=False)
    return text if text.isascii() else _SURROGATE.sub("\ufffd", text)


def span_row(r: SpanRecord) -> tuple:
    """A record as a row of ``spans`` (``SPAN_COLUMNS`` order, ``file_id`` not included)."""
    events = _json([{"name": e.name, "time_ns": e.time_ns, "attrs": dict(e.attrs)}
                    for e in r.events]) if r.events else "[]"
    links = _json([{"trace_id": k.trace_id, "span_id": k.span_id, "attrs": dict(k.attrs)}
                   for k in r.links]) if r.links else "[]"
    return (r.trace_id, r.span_id, r.parent_span_id, _text(r.name), _text(r.stage), r.kind,
            r.start_ns, r.end_ns, r.status, _text(r.status_message), _text(r.service),
            _text(r.host), r.pid, r.tid, r.thread_cpu_ns, r.child_cpu_ns, r.children, r.vcsw,
            r.ivcsw, r.minflt, r.majflt, r.child_majflt, _json(dict(r.attrs)), events, links)

def chunks(rows: list, size: int = 500) -> list:
    """``rows`` in chunks of at most ``size`` (one statement each)."""
    return [rows[i:i + size] for i in range(0, len(rows), size)]


def placeholders(rows: list) -> str:
    """``(?, ?), (?, ?)`` for rows of equal length (parameters, never values in the SQL)."""
    one = "(" + ", ".join("?" * len(rows[0])) + ")"
    return ", ".join([one] * len(rows))
