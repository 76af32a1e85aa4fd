"""The fast path for OTLP/JSON files: pyarrow parses, DuckDB flattens (store/sql/otlp_spans.sql).

Used when pyarrow is installed (``pip install pyarrow``, or the ``[fast]`` extra) and the file
is plain: newline-delimited requests, hex ids, string int64s as the spec says, no array/kvlist
attribute values, no events or links. Anything else, and any span that fails a check, sends
the whole file to the Python reader (store/otlp.py), which names every problem; the results
are the same either way (tests/test_store.py compares them).
"""

from __future__ import annotations

import re
from typing import Any, Optional

from .. import semconv
from ..records import INT32_MAX, MAX_COUNT, MAX_EPOCH_NS, MIN_EPOCH_NS
from .schema import SPAN_COLUMNS, sql

# what the fast path does not read: these values, and snake_case field names (the Python
# reader takes both spellings)
_NOT_FLAT = (b'"arrayValue"', b'"kvlistValue"', b'"resource_spans"')
# ... and lines that are not objects, or with a JSON null as a value: pyarrow reads a null
# node as "nothing there" (the Python reader names it as a problem), and a first line that is
# `null` crashes the process inside pyarrow (26.0: a segmentation fault)
_NULL_VALUE = re.compile(rb"[\[:,][ \t\r\n]*null\b")


def _objects_only(data: bytes) -> bool:
    """Every line of ``data`` starts an object (``{`` first, as the Collector writes them)
    and no value is a JSON null (a string holding the word is taken for one: that file goes
    to the Python reader, which is right either way). Counted with bytes' own methods: a
    regular expression over every line costs more than pyarrow's parse."""
    body = data[:-1] if data.endswith(b"\n") else data
    if body[:1] != b"{" or body.count(b"\n") != body.count(b"\n{"):
        return False
    return b"null" not in data or _NULL_VALUE.search(data) is None


def _schema() -> Any:
    import pyarrow as pa

    value = pa.struct([("stringValue", pa.string()), ("boolValue", pa.bool_()),
                       ("intValue", pa.string()), ("doubleValue", pa.float64()),
                       ("bytesValue", pa.string())])
    kv = pa.list_(pa.struct([("key", pa.string()), ("value", value)]))
    span = pa.struct([
        ("traceId", pa.string()), ("spanId", pa.string()), ("parentSpanId", pa.string()),
        ("name", pa.string()), ("kind", pa.int64()), ("startTimeUnixNano", pa.string()),
        ("endTimeUnixNano", pa.string()), ("attributes", kv),
        ("status", pa.struct([("code", pa.int64()), ("message", pa.string())])),
        ("events", pa.list_(pa.struct([("name", pa.string())]))),
        ("links", pa.list_(pa.struct([("spanId", pa.string())])))])
    scope_spans = pa.list_(pa.struct([("scope", pa.struct([("name", pa.string())])),
                                      ("spans", pa.list_(span))]))
    return pa.schema([("resourceSpans", pa.list_(pa.struct([
        ("resource", pa.struct([("attributes", kv)])), ("scopeSpans", scope_spans)])))])


def stage(con: Any, path: str, data: bytes) -> Optional[int]:
    """Flatten the OTLP lines in ``data`` (the bytes of ``path``) into a TEMP TABLE
    ``staging`` with the columns of ``spans``. Returns its row count, or None when this file
    must go through the Python reader."""
    try:
        import pyarrow.json as pj
    except ImportError:
        return None
    if any(marker in data for marker in _NOT_FLAT) or not _objects_only(data):
        return None
    try:
        table = pj.read_json(path, parse_options=pj.ParseOptions(
            explicit_schema=_schema(), unexpected_field_behavior="ignore"))
    except Exception:  # not one request per line, a number where the spec has a string, ...
        return None
    _define_macros(con)
    accounting = "[" + ", ".join(f"'{name}'" for name in
                                 (*semconv.ACCOUNTING_ATTRIBUTES.values(), semconv.STAGE)) + "]"
    derived = "'" + semconv.ANALYSIS_PREFIX.replace("'", "''") + "'"
    query = sql("otlp_spans.sql").format(accounting=accounting, min_epoch_ns=MIN_EPOCH_NS,
                                         max_epoch_ns=MAX_EPOCH_NS, max_count=MAX_COUNT,
                                         int32_max=INT32_MAX, derived=derived)
    con.register("otlp_arrow", table)
    try:
        return _flatten(con, query)
    except Exception:  # noqa: BLE001 - a value the SQL cannot take: the Python reader names it
        con.execute("DROP TABLE IF EXISTS staging").fetchall()
        return None
    finally:
        con.execute("DROP TABLE IF EXISTS otlp_flat").fetchall()
        con.unregister("otlp_arrow")


def _flatten(con: Any, query: str) -> Optional[int]:
    """``staging`` from the registered ``otlp_arrow`` table (its row count), or None when
    some span fails a check or has events or links."""
    con.execute("CREATE OR REPLACE TEMP TABLE otlp_flat AS " + query).fetchall()
    bad, extras = con.execute("SELECT count(*) FILTER (WHERE NOT ok), "
                              "coalesce(sum(extras), 0) FROM otlp_flat").fetchall()[0]
    if bad or extras:
        return None
    columns = ", ".join(SPAN_COLUMNS)
    con.execute(f"CREATE OR REPLACE TEMP TABLE staging AS SELECT {columns} FROM otlp_flat"
                ).fetchall()
    return con.execute("SELECT count(*) FROM staging").fetchall()[0][0]


def _define_macros(con: Any) -> None:
    """(Re)define the helper macros on this connection: idempotent and cheap, so no cache
    (one keyed by connection would outlive a closed connection whose id is reused). A NaN or
    infinite double (pyarrow reads the NaN that Python's json writes) is kept as the string
    "NaN"/"Infinity", as the Python reader keeps it (store/rows.py): JSON has no such number."""
    con.execute("""
        CREATE OR REPLACE TEMP MACRO otlp_value(v) AS
            CASE WHEN v.stringValue IS NOT NULL THEN to_json(v.stringValue)
                 WHEN v.boolValue IS NOT NULL THEN to_json(v.boolValue)
                 WHEN isnan(v.doubleValue) THEN '"NaN"'
                 WHEN isinf(v.doubleValue)
                     THEN CASE WHEN v.doubleValue > 0 THEN '"Infinity"' ELSE '"-Infinity"' END
                 WHEN v.doubleValue IS NOT NULL THEN to_json(v.doubleValue)
                 WHEN v.intValue IS NOT NULL
                     THEN coalesce(CAST(TRY_CAST(v.intValue AS HUGEINT) AS VARCHAR),
                                   to_json(v.intValue))
                 WHEN v.bytesValue IS NOT NULL THEN to_json(v.bytesValue)
                 ELSE 'null' END""").fetchall()
    # a double is truncated, as the Python reader's int() does; out of BIGINT: NULL
    con.execute("""
        CREATE OR REPLACE TEMP MACRO otlp_int(attrs, name) AS
            coalesce(TRY_CAST(list_filter(attrs, lambda a: a.key = name)[1].value.intValue
                              AS BIGINT),
                     TRY_CAST(trunc(list_filter(attrs, lambda a: a.key = name)[1]
                                    .value.doubleValue) AS BIGINT))""").fetchall()
    # a count (CPU ns, context switches, faults: records.INT_FIELDS) outside 0..largest is
    # not a measurement: NULL, as otlp_common._integer makes it
    con.execute("""
        CREATE OR REPLACE TEMP MACRO otlp_count(attrs, name, largest) AS
            CASE WHEN otlp_int(attrs, name) BETWEEN 0 AND largest
                 THEN otlp_int(attrs, name) END""").fetchall()
