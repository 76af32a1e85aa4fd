"""Phoenix (Arize) / OpenInference span exports, docs/file-formats.md.

Shapes read, one span per record:

* JSON lines, a JSON list, or a ``{"data": [...]}`` page of spans as Phoenix's REST API and
  ``phoenix.client`` give them: ``name``, ``context: {trace_id, span_id}``, ``parent_id``,
  ``span_kind`` (LLM, CHAIN, TOOL, RETRIEVER, AGENT, ...), ``start_time``/``end_time``,
  ``status_code`` (OK/ERROR/UNSET), ``status_message``, ``attributes`` and ``events``
  (``{name, timestamp, attributes}``). ``attributes`` may be flat (``"llm.model_name"``) or
  nested (``{"llm": {"model_name": ...}}``, Phoenix's older span JSON).
* Records of a spans dataframe (``get_spans_dataframe()`` / ``query_spans()``) written as JSON
  lines or **Parquet**: flat columns ``context.span_id``, ``context.trace_id``, ``parent_id``,
  ``name``, ``span_kind``, ``start_time``, ``end_time``, ``status_code``, ``status_message``,
  ``events`` and ``attributes.<name>``. Parquet is read with pyarrow when it is installed.

Times are ISO-8601 text, timestamps (Parquet), or epoch numbers (seconds, milliseconds,
microseconds or nanoseconds, told apart by size). Attributes end up under their OpenInference
names, lists of objects flattened with their index (``llm.input_messages.0.message.role``), as
OpenTelemetry carries them; ``openinference.span.kind`` comes from ``span_kind`` when Phoenix
left it out of the attributes. Phoenix keeps no OpenTelemetry span kind or resource: spans are
``internal`` with no service.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import re
from collections.abc import Iterator
from typing import Any

from ...errors import TraceFormatError
from ...records import SpanEvent, SpanRecord
from . import HEAD_BYTES, Importer
from ._common import TOO_DEEP, hex_id, iso_ns, json_problem, span

PARQUET_NEEDS_PYARROW = ("Parquet needs pyarrow: pip install pyarrow (or the [fast] extra of "
                         "this checkout: pip install -e '.[fast]')")
_PARQUET = b"PAR1"
_FLAT_CONTEXT = re.compile(rb'(?<!\\)"context\.span_id"\s*:')
_SPAN_KIND = re.compile(rb'(?<!\\)"span_kind"\s*:')
_CONTEXT = re.compile(rb'(?<!\\)"context"\s*:\s*\{')
_SPAN_ID = re.compile(rb'(?<!\\)"span_id"\s*:\s*"')
_STATUS = {"OK": "ok", "ERROR": "error", "UNSET": "unset"}
_PREFIX = "attributes."
_KIND_ATTR = "openinference.span.kind"


def sniff(head: bytes, name: str) -> bool:
    """Parquet with Phoenix's columns (or too large for its schema to be in ``head``), or JSON
    whose spans have a ``context.span_id`` column, or ``span_kind`` and a ``context`` object
    with a hex ``span_id``."""
    if head.startswith(_PARQUET):
        return (b"context.span_id" in head or len(head) >= HEAD_BYTES
                and ".parquet" in name.lower())
    if head.lstrip(b"\xef\xbb\xbf \t\r\n")[:1] not in (b"{", b"["):
        return False
    if _FLAT_CONTEXT.search(head):
        return True
    return bool(_SPAN_KIND.search(head) and _CONTEXT.search(head) and _SPAN_ID.search(head))


def read(data: bytes, path: str, errors: list) -> Iterator[SpanRecord]:
    """The spans of a Phoenix export (JSON lines, JSON or Parquet); bad ones go to ``errors``."""
    if data.startswith(_PARQUET):
        for i, row in enumerate(_parquet_rows(data, path, errors)):
            yield from _one(row, f"row {i}", path, None, errors)
        return
    text = data.decode("utf-8", errors="replace").lstrip("\ufeff")
    if not text.strip():
        return
    try:
        whole = json.loads(text)
    except (ValueError, RecursionError):
        whole = None
    if isinstance(whole, dict) and isinstance(whole.get("data"), list):
        whole = whole["data"]
    if isinstance(whole, list):
        for i, item in enumerate(whole):
            yield from _one(item, f"[{i}]", path, None, errors)
        return
    if isinstance(whole, dict):  # one span, perhaps pretty-printed
        yield from _one(whole, "span", path, None, errors)
        return
    lines = text.split("\n")
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except (ValueError, RecursionError) as e:
            torn = number == len(lines)  # no newline after it: the writer may have stopped
            reason = f"not valid JSON ({json_problem(e)[1]})"
            errors.append(TraceFormatError(
                path, number, "torn last line; skipped: " + reason if torn else reason,
                torn=torn))
            continue
        yield from _one(item, "span", path, number, errors)


def _one(item: Any, where: str, path: str, line: int | None,
         errors: list) -> Iterator[SpanRecord]:
    try:
        record = _span(item, where, path, line, errors)
    except RecursionError:
        errors.append(TraceFormatError(path, line, f"{where}: {TOO_DEEP}"))
        return
    if record is not None:
        yield record


def _span(raw: Any, where: str, path: str, line: int | None,
          errors: list) -> SpanRecord | None:
    if not isinstance(raw, dict):
        errors.append(TraceFormatError(path, line, f"{where}: not a span object"))
        return None
    context = raw.get("context") if isinstance(raw.get("context"), dict) else {}
    raw_span = _first(context.get("span_id"), raw.get("context.span_id"), raw.get("span_id"))
    span_id = hex_id(raw_span, 8)
    name = raw.get("name")
    label = f"{where} ({name!r})" if isinstance(name, str) else where

    def bad(reason: str) -> None:
        errors.append(TraceFormatError(path, line, f"{label}: {reason}", span_id=span_id))

    if span_id is None:
        bad(f"context.span_id missing or empty ({raw_span!r})")
        return None
    raw_trace = _first(context.get("trace_id"), raw.get("context.trace_id"), raw.get("trace_id"))
    trace_id = hex_id(raw_trace, 16)
    if trace_id is None:
        bad(f"context.trace_id missing or empty ({raw_trace!r})")
        return None
    start, end = _time_ns(raw.get("start_time")), _time_ns(raw.get("end_time"))
    if start is None or end is None:
        bad(f"start_time/end_time missing or not a time "
            f"({raw.get('start_time')!r}, {raw.get('end_time')!r})")
        return None
    if end < start:
        bad(f"end_time is before start_time ({raw.get('end_time')!r} < "
            f"{raw.get('start_time')!r})")
        return None
    attrs: dict = {}
    if isinstance(raw.get("attributes"), dict):
        _flatten("", raw["attributes"], attrs)
    for key, value in raw.items():
        if isinstance(key, str) and key.startswith(_PREFIX):
            _flatten(key[len(_PREFIX):], value, attrs)
    kind = raw.get("span_kind")
    if isinstance(kind, str) and kind and _KIND_ATTR not in attrs:
        attrs[_KIND_ATTR] = kind
    status = raw.get("status_code")
    message = raw.get("status_message")
    return span(
        trace_id, span_id, hex_id(_present(raw.get("parent_id")), 8),
        str(name) if _present(name) is not None else "", start, end, attrs,
        status=_STATUS.get(str(status).upper(), "unset") if _present(status) else "unset",
        status_message=str(message) if _present(message) not in (None, "") else None,
        events=_events(raw.get("events"), label, path, line, errors))


def _first(*values: Any) -> Any:
    for value in values:
        if _present(value) is not None:
            return value
    return None


def _present(value: Any) -> Any:
    """``value``, or None for what a dataframe writes for nothing (None, NaN)."""
    if value is None or isinstance(value, float) and math.isnan(value):
        return None
    return value


def _flatten(prefix: str, value: Any, out: dict) -> None:
    """OpenInference attributes under dotted names: nested objects joined with ``.``, lists of
    objects with their index; lists of primitives stay lists; nothing (None, NaN) is left out."""
    if _present(value) is None:
        return
    if isinstance(value, dict):
        for key, item in value.items():
            _flatten(f"{prefix}.{key}" if prefix else str(key), item, out)
    elif isinstance(value, (list, tuple)):
        if any(isinstance(v, (dict, list, tuple)) for v in value):
            for i, item in enumerate(value):
                _flatten(f"{prefix}.{i}", item, out)
        elif prefix:
            out[prefix] = tuple(v for v in value if _present(v) is not None)
    elif prefix:
        out[prefix] = _plain(value)


def _plain(value: Any) -> Any:
    if isinstance(value, (str, bool, int, float)):
        return value
    if isinstance(value, _dt.datetime):
        return value.isoformat()
    return str(value)


def _time_ns(raw: Any) -> int | None:
    """Epoch nanoseconds of an ISO-8601 string, a datetime (pandas' Timestamp too) or an epoch
    number whose unit is told by its size (s < 1e11 <= ms < 1e14 <= us < 1e17 <= ns)."""
    if isinstance(raw, str):
        return iso_ns(raw.strip())
    if isinstance(raw, bool) or _present(raw) is None:
        return None
    nanos = getattr(raw, "value", None)  # pandas.Timestamp: exact nanoseconds
    if isinstance(raw, _dt.datetime):
        if isinstance(nanos, int):
            return nanos if nanos >= 0 else None  # NaT is the smallest int64
        moment = raw if raw.tzinfo else raw.replace(tzinfo=_dt.timezone.utc)
        delta = moment - _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)
        return (delta.days * 86400 + delta.seconds) * 1_000_000_000 + delta.microseconds * 1000
    if isinstance(raw, int) and raw >= 1e17:  # ns as they are (past a float's range too:
        return raw  # records.span_problem names what is past 2116)
    if isinstance(raw, (int, float)) and raw >= 0 and math.isfinite(float(raw)):
        for limit, scale in ((1e11, 10**9), (1e14, 10**6), (1e17, 10**3)):
            if raw < limit:
                return round(raw * scale)
        return int(raw)
    return None


def _events(raw: Any, label: str, path: str, line: int | None, errors: list) -> tuple:
    if isinstance(raw, str):  # a dataframe written as JSON text may hold them as JSON
        try:
            raw = json.loads(raw)
        except (ValueError, RecursionError):
            raw = None
    out = []
    for i, event in enumerate(raw if isinstance(raw, (list, tuple)) else ()):
        if not isinstance(event, dict):
            continue
        time_ns = _time_ns(event.get("timestamp"))
        if time_ns is None:
            errors.append(TraceFormatError(path, line, (
                f"{label}: events[{i}] timestamp {event.get('timestamp')!r} is not a time; "
                "the event is left out")))
            continue
        attrs: dict = {}
        _flatten("", event.get("attributes") or {}, attrs)
        out.append(SpanEvent(str(event.get("name") or ""), time_ns, attrs))
    return tuple(out)


def _parquet_rows(data: bytes, path: str, errors: list) -> list:
    """The rows of a Parquet file as dicts, timestamp columns as epoch nanoseconds."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        errors.append(TraceFormatError(path, None, PARQUET_NEEDS_PYARROW))
        return []
    try:
        table = pq.read_table(pa.BufferReader(data))
    except Exception as e:  # noqa: BLE001 -- pyarrow raises several types for a damaged file
        errors.append(TraceFormatError(path, None, f"not a readable Parquet file ({e})"))
        return []
    names = set(table.column_names)
    if not ({"context.span_id", "span_id"} & names and "start_time" in names):
        errors.append(TraceFormatError(path, None, (
            "not a Phoenix span table: no context.span_id and start_time columns "
            f"(columns: {', '.join(sorted(names)[:12])})")))
        return []
    for i, field in enumerate(table.schema):
        if pa.types.is_timestamp(field.type):
            nanos = table.column(i).cast(pa.timestamp("ns", field.type.tz)).cast(pa.int64())
            table = table.set_column(i, field.name, nanos)
    return table.to_pylist()


IMPORTER = Importer("phoenix", "Phoenix / OpenInference span export", sniff, read)
