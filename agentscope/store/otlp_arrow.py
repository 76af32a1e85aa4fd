"""The fast path for OTLP/JSON files: pyarrow parses, Arrow compute and numpy flatten.

Used when pyarrow is installed (``pip install pyarrow``, or the ``[fast]`` extra) and the file
is plain: newline-delimited requests, hex ids, string int64s as the spec says, no array/kvlist
attribute values, no events or links. The flattening (:func:`_columns`) works on whole
columns: the requests' nesting is undone with list offsets, the accounting attributes are
found by key and the rest written as JSON text, with no Python code per span. A file it does
not take as it is (a string JSON needs escaped, an integer in another spelling, a double that
is not finite) is flattened by DuckDB's SQL instead (store/sql/otlp_spans.sql); anything else,
and any span that fails a check, sends the whole file to the Python reader (store/otlp.py),
which names every problem. The results are the same all three ways (tests/test_store.py
compares them).
"""

from __future__ import annotations

import re
from typing import Any, Optional

from .. import semconv
from ..records import INT32_MAX, MAX_COUNT, MAX_EPOCH_NS, MIN_EPOCH_NS
from .schema import SPAN_COLUMNS, sql

# lines that are not objects, or with a JSON null as a value: pyarrow reads a null
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

    # arrayValue and kvlistValue as empty structs: pyarrow then says where they are (the
    # fast path does not read them) without a scan of the bytes
    value = pa.struct([("stringValue", pa.string()), ("boolValue", pa.bool_()),
                       ("intValue", pa.string()), ("doubleValue", pa.float64()),
                       ("bytesValue", pa.string()), ("arrayValue", pa.struct([])),
                       ("kvlistValue", pa.struct([]))])
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
        ("resource", pa.struct([("attributes", kv)])), ("scopeSpans", scope_spans)]))),
        ("resource_spans", pa.list_(pa.struct([])))])  # snake_case: the Python reader's


def stage(con: Any, path: str, data: bytes) -> Optional[int]:
    """Flatten the OTLP lines in ``data`` (the bytes of ``path``) into a TEMP TABLE
    ``staging`` with the columns of ``spans``. Returns its row count, or None when this file
    must go through the Python reader."""
    try:
        import pyarrow.json as pj
    except ImportError:
        return None
    # a JSON null: one scan of the bytes finds the word (rare), and only then are the lines
    # looked at (a line that is not an object pyarrow refuses by itself)
    if b"null" in data and not _objects_only(data):
        return None
    try:
        table = pj.read_json(path, parse_options=pj.ParseOptions(
            explicit_schema=_schema(), unexpected_field_behavior="ignore"))
    except Exception:  # not one request per line, a number where the spec has a string, ...
        return None
    _define_macros(con)
    try:
        flat = _columns(table)
        con.register("otlp_columns", flat)
        try:
            con.execute(_STAGE_COLUMNS).fetchall()
        finally:
            con.unregister("otlp_columns")
        return flat.num_rows
    except _NotHere as e:
        if e.python:
            return None
    except Exception:  # noqa: BLE001 - what the columns did not foresee: DuckDB's SQL takes it
        pass
    # a value the columns do not take as they are: DuckDB's SQL
    accounting = "[" + ", ".join(f"'{name}'" for name in _ACCOUNTING) + "]"
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


def release_memory() -> None:
    """Give back what pyarrow's allocator keeps of the memory a load freed (its pool keeps
    it for reuse: about 900 MB after 1M spans, which the analysis would then hold on top)."""
    import sys

    pa = sys.modules.get("pyarrow")
    if pa is not None:
        try:
            pa.default_memory_pool().release_unused()
        except Exception:  # noqa: BLE001 - an older pyarrow without it: nothing to give back
            pass


# the attributes read into columns (not kept in ``attrs``): the accounting and the stage
_ACCOUNTING = (*semconv.ACCOUNTING_ATTRIBUTES.values(), semconv.STAGE)
# column -> (its attribute, the largest value it takes; None: any BIGINT) as
# otlp_common._integer bounds them (records.INT_FIELDS)
_COUNTS = {column: (name, INT32_MAX if column == "children" else
                    None if column == "tid" else MAX_COUNT)
           for column, name in semconv.ACCOUNTING_ATTRIBUTES.items()}
# the columns made into ``staging``: the span kind and status from their codes (strings made
# per span in numpy cost more than the rest of a column's making), no events or links
_STAGE_COLUMNS = "CREATE OR REPLACE TEMP TABLE staging AS SELECT " + ", ".join(
    {"kind": "otlp_kind(kind_code) AS kind", "status": "otlp_status(status_code) AS status",
     "events": "'[]' AS events", "links": "'[]' AS links"}.get(c, c)
    for c in SPAN_COLUMNS) + " FROM otlp_columns"


class _NotHere(Exception):
    """The columns cannot take this file as it is: ``python`` - it needs the Python reader
    (events, links, array values, a failed check: it names them); else DuckDB's SQL
    (otlp_spans.sql) takes it (a string to escape, a number in another spelling)."""

    def __init__(self, python: bool) -> None:
        super().__init__()
        self.python = python


def _columns(table: Any) -> Any:
    """The spans of an Arrow table of OTLP requests as an Arrow table with the columns of
    ``spans``, flattened with Arrow compute and numpy, as store/sql/otlp_spans.sql does in
    SQL (the same values: tests/test_store.py compares all three readers). Raises
    :class:`_NotHere` for what it does not take."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if table.column("resource_spans").null_count != table.num_rows:
        raise _NotHere(True)
    requests = table.column("resourceSpans").combine_chunks()
    res = pc.list_flatten(requests)
    scopes_of = pc.struct_field(res, "scopeSpans")
    ss = pc.list_flatten(scopes_of)
    res_of_ss = pc.list_parent_indices(scopes_of).to_numpy()
    spans_of = pc.struct_field(ss, "spans")
    sp = pc.list_flatten(spans_of)
    n = len(sp)
    ss_of_sp = pc.list_parent_indices(spans_of).to_numpy()
    res_of_sp = res_of_ss[ss_of_sp]

    def field(name: str) -> Any:
        return pc.struct_field(sp, name)

    for extra in ("events", "links"):  # the Python reader keeps them
        if pc.sum(pc.fill_null(pc.list_value_length(field(extra)), 0)).as_py():
            raise _NotHere(True)

    # the resource's attributes, once per resource
    res_attrs = pc.struct_field(pc.struct_field(res, "resource"), "attributes")
    rkv = pc.list_flatten(res_attrs)
    rkv_of = pc.list_parent_indices(res_attrs).to_numpy()
    rkeys = pc.struct_field(rkv, "key")
    rvalues = pc.struct_field(rkv, "value")
    attributes = field("attributes")
    kv = pc.list_flatten(attributes)
    kv_of = pc.list_parent_indices(attributes).to_numpy()
    keys = pc.struct_field(kv, "key")
    values = pc.struct_field(kv, "value")
    _plain_values(rvalues)  # (all that goes to the Python reader is found before the rest)
    _plain_values(values)

    def resource(key: str, value: str) -> Any:
        return pc.take(_value_of(rkeys, rkv_of, rvalues, key, value, len(res)), res_of_sp)

    service = resource("service.name", "stringValue")
    host = resource("host.name", "stringValue")
    pid_text = pc.coalesce(resource("process.pid", "intValue"),
                           resource("process.pid", "stringValue"))
    pid = _to_int(pid_text, pa.int32())  # (_NotHere for any that is not a plain integer)

    # the span's own fields, checked as otlp_spans.sql checks them
    raw_trace, raw_span, raw_parent = field("traceId"), field("spanId"), field("parentSpanId")
    start_ns = _to_int(field("startTimeUnixNano"), pa.int64())
    end_ns = _to_int(field("endTimeUnixNano"), pa.int64())
    ok = pc.and_kleene(pc.match_substring_regex(raw_trace, "^[0-9a-fA-F]{32}$"),
                       pc.match_substring_regex(raw_span, "^[0-9a-fA-F]{16}$"))
    ok = pc.and_kleene(ok, pc.not_equal(raw_trace, "0" * 32))
    ok = pc.and_kleene(ok, pc.not_equal(raw_span, "0" * 16))
    ok = pc.and_kleene(ok, pc.greater_equal(end_ns, start_ns))
    ok = pc.and_kleene(ok, pc.greater_equal(start_ns, MIN_EPOCH_NS))
    ok = pc.and_kleene(ok, pc.less_equal(end_ns, MAX_EPOCH_NS))
    if not pc.all(pc.fill_null(ok, False)).as_py():
        raise _NotHere(True)  # the Python reader names each span that fails
    parent_ok = pc.and_kleene(pc.match_substring_regex(raw_parent, "^[0-9a-fA-F]{16}$"),
                              pc.not_equal(raw_parent, "0" * 16))
    parent = pc.if_else(pc.fill_null(parent_ok, False), pc.ascii_lower(raw_parent),
                        pa.scalar(None, pa.string()))
    status = field("status")
    message = pc.struct_field(status, "message")
    message = pc.if_else(pc.equal(message, ""), pa.scalar(None, pa.string()), message)

    # the attributes: the accounting ones into columns, the others kept as JSON text
    if keys.null_count:
        raise _NotHere(False)
    if _repeated(keys, kv_of):  # the Python reader keeps the last value, in the first place
        raise _NotHere(True)
    cols: dict = {}
    for column, (name, largest) in _COUNTS.items():
        cols[column] = _count(keys, kv_of, values, name, largest, n)
    stage = _value_of(keys, kv_of, values, semconv.STAGE, "stringValue", n)
    scope = pc.take(pc.struct_field(pc.struct_field(ss, "scope"), "name"), ss_of_sp)
    attrs = _attrs_json(keys, values, kv_of, scope, n)

    return pa.table({
        "trace_id": pc.ascii_lower(raw_trace), "span_id": pc.ascii_lower(raw_span),
        "parent_span_id": parent, "name": pc.fill_null(field("name"), ""),
        "stage": stage,
        "kind_code": field("kind"), "start_ns": start_ns, "end_ns": end_ns,
        "status_code": pc.struct_field(status, "code"), "status_message": message,
        "service": service, "host": host, "pid": pid,
        "tid": cols["tid"], "thread_cpu_ns": cols["thread_cpu_ns"],
        "child_cpu_ns": cols["child_cpu_ns"],
        "children": pc.cast(cols["children"], pa.int32()), "vcsw": cols["vcsw"],
        "ivcsw": cols["ivcsw"], "minflt": cols["minflt"], "majflt": cols["majflt"],
        "child_majflt": cols["child_majflt"], "attrs": attrs})


def _plain_values(values: Any) -> None:
    """:class:`_NotHere` (for the Python reader) where an attribute value is an array or a
    key-value list: the columns do not write them."""
    import pyarrow.compute as pc

    for nested in ("arrayValue", "kvlistValue"):
        if pc.struct_field(values, nested).null_count != len(values):
            raise _NotHere(True)


def _last(keys: Any, owner_of: Any, key: str) -> Any:
    """(owners, positions) of the last attribute named ``key`` of each owner that has one
    (where a key is repeated the last counts, as in the Python reader's dict), or None when
    none has (``owner_of``: each attribute's owner, ascending)."""
    import numpy as np
    import pyarrow.compute as pc

    at = np.flatnonzero(pc.fill_null(pc.equal(keys, key), False).to_numpy(
        zero_copy_only=False))[::-1]
    if not len(at):
        return None
    owners, last = np.unique(owner_of[at], return_index=True)
    return owners, at[last]


def _value_of(keys: Any, owner_of: Any, values: Any, key: str, field: str, owners: int) -> Any:
    """Per owner (``owners`` of them), the ``field`` of the value of its attribute ``key``
    (:func:`_last`); null where it has none."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    got = _last(keys, owner_of, key)
    column = pc.struct_field(values, field)
    if got is None:
        return pa.nulls(owners, column.type)
    at = np.full(owners, -1, dtype=np.int64)
    at[got[0]] = got[1]
    missing = at < 0
    return pc.take(column, pa.array(np.where(missing, 0, at), mask=missing))


def _repeated(keys: Any, owner_of: Any) -> bool:
    """Whether an owner has two attributes of one key."""
    import numpy as np
    import pyarrow.compute as pc

    if not len(keys):
        return False
    codes = pc.dictionary_encode(keys).indices.to_numpy(zero_copy_only=False).astype(np.int64)
    pairs = owner_of.astype(np.int64) * (int(codes.max()) + 1) + codes
    return len(np.unique(pairs)) != len(pairs)


def _to_int(text: Any, typ: Any) -> Any:
    """Strings of integers as ``typ`` (null stays null); :class:`_NotHere` (for DuckDB's
    casts, which take more spellings) if any is not a plain integer that fits."""
    import pyarrow.compute as pc

    try:
        return pc.cast(text, typ)
    except Exception:  # noqa: BLE001 - pyarrow's ArrowInvalid: not a plain integer
        raise _NotHere(False) from None


def _count(keys: Any, kv_of: Any, values: Any, name: str, largest: Any, n: int) -> Any:
    """The integer value of each span's attribute ``name`` (the last where repeated): its
    intValue, or its doubleValue truncated; NULL where it has none or, for a count
    (``largest`` not None), where it is outside 0..largest: otlp_spans.sql's otlp_int and
    otlp_count."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    got = _last(keys, kv_of, name)
    if got is None:
        return pa.nulls(n, pa.int64())
    owners, at = got
    picked = pc.take(values, at)
    ints = _to_int(pc.struct_field(picked, "intValue"), pa.int64())
    has_int = ints.is_valid().to_numpy(zero_copy_only=False)
    doubles = pc.struct_field(picked, "doubleValue")
    has_double = doubles.is_valid().to_numpy(zero_copy_only=False)
    d = np.trunc(pc.fill_null(doubles, 0.0).to_numpy())
    d_ok = has_double & np.isfinite(d) & (d >= -2.0 ** 63) & (d < 2.0 ** 63)
    value = np.where(has_int, pc.fill_null(ints, 0).to_numpy(),
                     np.where(d_ok, d, 0).astype(np.int64))
    valid = has_int | d_ok
    if largest is not None:
        valid &= (value >= 0) & (value <= largest)
    out = np.zeros(n, dtype=np.int64)
    mask = np.ones(n, dtype=bool)
    out[owners] = value
    mask[owners] = ~valid
    return pa.array(out, mask=mask)


def _attrs_json(keys: Any, values: Any, kv_of: Any, scope: Any, n: int) -> Any:
    """Each span's attributes but the accounting ones and agentscope.analysis.* as a JSON
    object, in their order, then ``otel.scope.name`` (its scope's name) unless it has one:
    the ``attrs`` column, as otlp_spans.sql writes it."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    kept = pc.invert(pc.or_(pc.is_in(keys, value_set=pa.array(_ACCOUNTING)),
                            pc.starts_with(keys, semconv.ANALYSIS_PREFIX)))
    keys = pc.filter(keys, kept)
    values = pc.filter(values, kept)
    kv_of = kv_of[kept.to_numpy(zero_copy_only=False)]
    strings = pc.struct_field(values, "stringValue")
    raw_bytes = pc.struct_field(values, "bytesValue")
    ints = _to_int(pc.struct_field(values, "intValue"), pa.int64())
    doubles = pc.struct_field(values, "doubleValue")
    if any(_needs_escape(text) for text in (keys, strings, raw_bytes, scope)):
        raise _NotHere(False)
    if pc.any(pc.invert(pc.is_finite(doubles))).as_py():
        raise _NotHere(False)  # NaN and infinities are written as strings there
    quoted = pc.binary_join_element_wise('"', strings, '"', "")
    value = pc.coalesce(
        quoted,
        pc.if_else(pc.struct_field(values, "boolValue"), "true", "false"),
        _number_text(doubles),
        pc.cast(ints, pa.string()),
        pc.binary_join_element_wise('"', raw_bytes, '"', ""),
        pa.scalar("null"))
    pairs = pc.binary_join_element_wise('"', keys, '":', value, "")
    counts = np.bincount(kv_of, minlength=n)
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(counts, out=offsets[1:])
    joined = pc.binary_join(pa.ListArray.from_arrays(pa.array(offsets), pairs), ",")
    own_scope = _last(keys, kv_of, "otel.scope.name")
    add_scope = scope.is_valid().to_numpy(zero_copy_only=False)
    if own_scope is not None:
        add_scope[own_scope[0]] = False
    sep = pa.array(np.where(add_scope & (counts > 0), ",", ""), pa.string())
    scope_pair = pc.if_else(pa.array(add_scope),
                            pc.binary_join_element_wise('"otel.scope.name":"', scope, '"',
                                                        ""),
                            "")
    return pc.binary_join_element_wise("{", joined, sep, scope_pair, "}", "")


def _needs_escape(text: Any) -> bool:
    """Whether a string in the Arrow array ``text`` needs escaping in JSON (a quote, a
    backslash, a control character): the columns write strings as they are. One numpy pass
    over the bytes of all of them (those of nulls too: a false alarm costs only the SQL)."""
    import numpy as np

    if not len(text) or text.buffers()[2] is None:
        return False
    offsets = np.frombuffer(text.buffers()[1], dtype=np.int32)[
        text.offset:text.offset + len(text) + 1]
    data = np.frombuffer(text.buffers()[2], dtype=np.uint8)[offsets[0]:offsets[-1]]
    return bool(((data < 0x20) | (data == 0x22) | (data == 0x5C)).any())


def _number_text(doubles: Any) -> Any:
    """Finite doubles as JSON numbers (Arrow's shortest round-trip text), a whole number
    with its ``.0`` (Arrow writes 2.0 as ``2``: it would read back as an integer)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    text = pc.cast(doubles, pa.string())
    return pc.if_else(pc.match_substring_regex(text, r"^-?[0-9]+$"),
                      pc.binary_join_element_wise(text, ".0", ""), text)


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
        CREATE OR REPLACE TEMP MACRO otlp_kind(code) AS
            CASE code WHEN 2 THEN 'server' WHEN 3 THEN 'client' WHEN 4 THEN 'producer'
                      WHEN 5 THEN 'consumer' ELSE 'internal' END""").fetchall()
    con.execute("""
        CREATE OR REPLACE TEMP MACRO otlp_status(code) AS
            CASE code WHEN 1 THEN 'ok' WHEN 2 THEN 'error' ELSE 'unset' END""").fetchall()
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
            coalesce(TRY_CAST(list_filter(attrs, lambda a: a.key = name)[-1].value.intValue
                              AS BIGINT),
                     TRY_CAST(trunc(list_filter(attrs, lambda a: a.key = name)[-1]
                                    .value.doubleValue) AS BIGINT))""").fetchall()
    # a count (CPU ns, context switches, faults: records.INT_FIELDS) outside 0..largest is
    # not a measurement: NULL, as otlp_common._integer makes it
    con.execute("""
        CREATE OR REPLACE TEMP MACRO otlp_count(attrs, name, largest) AS
            CASE WHEN otlp_int(attrs, name) BETWEEN 0 AND largest
                 THEN otlp_int(attrs, name) END""").fetchall()
