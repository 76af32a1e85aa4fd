"""What every importer shares: ids, times and the record it builds.

An importer turns one foreign trace file into :class:`~agentscope.records.SpanRecord` s. The
records carry no resource accounting (the foreign tracer did not measure it: the columns stay
``None``), no ``stage`` (the store derives it from the span's attributes with the one table in
:mod:`agentscope.semconv`), and every attribute the source had, under its own name, so that
table can read it.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import re
from typing import Any, Mapping, Optional

from ...records import SpanRecord

_HEX = re.compile(r"[0-9a-fA-F]+\Z")
_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\Z")


def hex_id(raw: Any, nbytes: int) -> Optional[str]:
    """A lowercase hex id of ``nbytes`` bytes for a foreign id, the same for the same input.

    * hex of the right length: lowercased; shorter hex (Jaeger drops leading zeros): padded;
    * an integer (any-agent writes its ids as JSON integers): its hex, padded; a string of
      digits is hex when it fits (ids are hex on the wire), decimal only when it is too long;
    * a UUID (Langfuse): its 32 hex digits for a trace id;
    * anything else (longer hex, a UUID as a span id, free text): a hash of it.
    ``None`` for a missing or empty id, and for the all-zero id (invalid in OpenTelemetry).
    """
    if raw is None or isinstance(raw, bool):
        return None
    if isinstance(raw, int):
        if raw <= 0:
            return None
        if raw < 1 << (8 * nbytes):
            return f"{raw:0{2 * nbytes}x}"
        return _hashed(str(raw), nbytes)
    text = str(raw).strip()
    if not text:
        return None
    if _UUID.match(text):
        text = text.replace("-", "")
    if _HEX.match(text) and len(text) <= 2 * nbytes:
        value = text.lower().rjust(2 * nbytes, "0")
        return None if value == "0" * (2 * nbytes) else value
    if text.isascii() and text.isdigit() and len(text) <= 40:  # (longer: not an id's digits)
        return hex_id(int(text), nbytes)
    return _hashed(text, nbytes)


def _hashed(text: str, nbytes: int) -> str:
    return hashlib.blake2b(text.encode("utf-8", "replace"), digest_size=nbytes).hexdigest()


def iso_ns(raw: Any) -> Optional[int]:
    """Unix epoch nanoseconds of an ISO-8601 time (``2025-06-11T10:00:00.123Z``, with any
    number of fraction digits, ``Z`` or an offset; a time without a zone is UTC)."""
    if not isinstance(raw, str) or not raw:
        return None
    text = raw.strip()
    match = re.match(r"(\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:?\d\d)?\Z", text)
    if not match:
        return None
    base, frac, zone = match.groups()
    try:
        moment = _dt.datetime.fromisoformat(base.replace(" ", "T"))
        if zone and zone != "Z":
            sign = 1 if zone[0] == "+" else -1
            hh, mm = int(zone[1:3]), int(zone[-2:])
            moment -= sign * _dt.timedelta(hours=hh, minutes=mm)
    except (ValueError, OverflowError):  # not a date; a year 1 or 9999 moved past the range
        return None
    seconds = int(moment.replace(tzinfo=_dt.timezone.utc).timestamp())
    nanos = int((frac or "0")[:9].ljust(9, "0"))
    return seconds * 1_000_000_000 + nanos


def span(trace_id: str, span_id: str, parent_span_id: Optional[str], name: str, start_ns: int,
         end_ns: int, attrs: Mapping[str, Any], *, kind: str = "internal", status: str = "unset",
         status_message: Optional[str] = None, service: Optional[str] = None,
         host: Optional[str] = None, pid: Optional[int] = None, events: tuple = (),
         links: tuple = ()) -> SpanRecord:
    """A foreign span: no accounting, no stage (derived later from ``attrs``)."""
    return SpanRecord(
        trace_id=trace_id, span_id=span_id, parent_span_id=parent_span_id, name=name, stage=None,
        kind=kind, start_ns=start_ns, end_ns=end_ns, status=status,
        status_message=status_message, service=service, host=host, pid=pid, tid=None,
        thread_cpu_ns=None, child_cpu_ns=None, children=None, vcsw=None, ivcsw=None,
        minflt=None, majflt=None, child_majflt=None, attrs=dict(attrs), events=events,
        links=links)


def json_problem(e: BaseException) -> tuple:
    """(line or None, why) for what ``json.loads`` raised on a file: a syntax error with its
    place, nesting deeper than Python's recursion allows, a number of more digits than
    Python reads. (Readers catch ``(ValueError, RecursionError)`` and report this.)"""
    if isinstance(e, json.JSONDecodeError):
        return e.lineno, f"{e.msg}, column {e.colno}"
    if isinstance(e, RecursionError):
        return None, "nested too deeply to read"
    return None, str(e).split(";")[0][:120]


TOO_DEEP = "nested too deeply to read; skipped"  # a record whose values nest past recursion
