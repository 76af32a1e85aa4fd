"""Every span of a store written back out as OTLP/JSON traces, with the analysis on them as
attributes: ``agentscope export otlp`` (ARCHITECTURE §5).

The output is ExportTraceServiceRequest objects in the OTLP/JSON encoding (camelCase, hex ids,
int64 as strings, kinds and status codes as integers), one per line: the OpenTelemetry
Collector file exporter's format, which ``agentscope analyze`` loads again. Each request holds
at most ``batch`` spans, grouped by resource (service.name, host.name, process.pid) and by
instrumentation scope. To a file (:func:`write`, gzip'ed when the name ends in ``.gz``) or
POSTed to an OTLP/HTTP traces endpoint (:func:`send`).

A span carries what the ``spans`` table holds of it: name, kind, times, status and message,
parent, its attributes, events and links; the accounting columns under their attribute names
(:data:`agentscope.semconv.ACCOUNTING_ATTRIBUTES`); ``agentscope.stage`` only where our own
instrumentation set it (a stage derived from conventions is derived again on import); the
``otel.scope.name`` attribute as its scope. The analysis goes under :data:`PREFIX`, which the
OTLP reader drops on import, so that export then import gives the same ``spans`` table:

* on each span holding part of its task's critical path: ``critical_path_s``, ``class`` (and
  ``classes`` when its sections have several), ``class_from`` (what the class rests on:
  ``measured`` | ``label`` | ``untraced``, the section's basis), ``class_confidence``,
  ``evidence``;
* on each task's root span: ``bottleneck``, ``bottleneck_assumed`` (true where it rests
  mostly on a stage label or an assumption, not on measurement), ``confidence``,
  ``share.<class>`` per class, ``assumed_share.<class>`` for each class part of whose share
  rests on a stage label or an assumption (that part), ``task_evidence``.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import gzip
import json
import math
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from typing import Any, NamedTuple

import numpy as np

from .. import semconv
from ..analyzers.evidence import BASES, CLASSES
from ..analyzers.verdict import bottleneck_assumed

PREFIX = semconv.ANALYSIS_PREFIX  # the analysis' attributes (dropped again on import)
DEFAULT_BATCH = 1000  # spans per request at most
PAGE_SPANS = 20_000  # spans fetched from the store at a time (about)
# spans of the traces read (and sorted) by one statement: a statement per page of the whole
# table in (trace_id, span_id) order read the whole table for each page (at 5M spans 0.86 s
# a page of 20k, 215 s in all, against 11.8 s by batches of traces; benchmarks/RESULTS.md)
TRACE_BATCH_SPANS = 500_000  # (twice the analysis' batches, analysis.core.BATCH_SPANS)
TIMEOUT_S = 30.0  # per POST

KIND_CODES = {"internal": 1, "server": 2, "client": 3, "producer": 4, "consumer": 5}
STATUS_CODES = {"unset": 0, "ok": 1, "error": 2}

# the columns of `spans` that a span is written from, read in (trace_id, span_id) order
ACCOUNTING_COLUMNS = tuple(semconv.ACCOUNTING_ATTRIBUTES)
SPAN_COLUMNS = ("trace_id", "span_id", "parent_span_id", "name", "kind", "start_ns", "end_ns",
                "status", "status_message", "service", "host", "pid", "stage", "stage_from",
                "attrs", "events", "links", *ACCOUNTING_COLUMNS)


class Exported(NamedTuple):
    """What an export did: where to, how many requests (lines) and spans, and how many spans
    the receiver said it rejected (OTLP partial success; 0 for a file)."""

    target: str
    requests: int
    spans: int
    rejected: int = 0


class SendError(OSError):
    """A POST to the endpoint failed; ``sent`` spans were accepted before it."""

    def __init__(self, message: str, sent: int) -> None:
        super().__init__(message)
        self.sent = sent


def requests(analysis: Any, batch: int = DEFAULT_BATCH) -> Iterator[dict]:
    """Every span of ``analysis``' store as OTLP/JSON ExportTraceServiceRequest objects (plain
    dicts, ready for ``json.dumps``) of at most ``batch`` spans each, in (trace_id, span_id)
    order."""
    if batch < 1:
        raise ValueError(f"batch must be at least 1, not {batch}")
    on_path = critical_path_attributes(analysis)
    on_root = task_root_attributes(analysis)
    pending: list = []
    with contextlib.closing(analysis.table_rows(
            "spans", SPAN_COLUMNS, batch * max(1, PAGE_SPANS // batch),
            by_trace=TRACE_BATCH_SPANS)) as rows:
        for row in rows:
            key = (row["trace_id"], row["span_id"])
            extra = on_path.get(key)
            if key in on_root:
                extra = {**(extra or {}), **on_root[key]}
            pending.append(((row["service"], row["host"], row["pid"]), _span(row, extra)))
            if len(pending) == batch:
                yield _request(pending)
                pending = []
    if pending:
        yield _request(pending)


def write(path: str, analysis: Any, batch: int = DEFAULT_BATCH) -> Exported:
    """Write :func:`requests` to ``path``, one per line (gzip'ed when it ends in ``.gz``)."""
    opener: Any = functools.partial(gzip.open, compresslevel=6) if str(path).endswith(
        ".gz") else open
    n_requests = n_spans = 0
    with opener(path, "wt", encoding="utf-8", newline="\n") as f:
        for req in requests(analysis, batch):
            f.write(_dumps(req))
            f.write("\n")
            n_requests += 1
            n_spans += _count(req)
    return Exported(str(path), n_requests, n_spans)


def traces_url(endpoint: str) -> str:
    """The URL to POST to: ``endpoint`` as given, or with ``/v1/traces`` appended when it has
    no path (as the OpenTelemetry exporters treat ``OTEL_EXPORTER_OTLP_ENDPOINT``)."""
    parts = urllib.parse.urlsplit(endpoint)
    if parts.path in ("", "/"):
        return urllib.parse.urlunsplit(parts._replace(path="/v1/traces"))
    return endpoint


def send(endpoint: str, analysis: Any, batch: int = DEFAULT_BATCH,
         headers: dict | None = None, timeout: float = TIMEOUT_S) -> Exported:
    """POST :func:`requests` to an OTLP/HTTP traces endpoint (see :func:`traces_url`), one
    after the other, as JSON; if the endpoint answers 415 (it takes protobuf only, as Phoenix
    does), as protobuf from then on. Raises :class:`SendError` at the first that fails
    (refused, timed out, an HTTP error status), naming how many spans went before it."""
    url = traces_url(endpoint)
    sent = n_requests = rejected = 0
    as_protobuf = False
    for req in requests(analysis, batch):
        for attempt in (1, 2):
            try:
                rejected += _post(url, req, as_protobuf, headers, timeout)
                break
            except urllib.error.HTTPError as e:
                if e.code == 415 and not as_protobuf and attempt == 1:
                    as_protobuf = True  # Unsupported Media Type: try protobuf
                    continue
                raise SendError(f"{url} answered HTTP {e.code} {e.reason} after {sent} spans "
                                "were sent", sent) from e
            except (urllib.error.URLError, OSError, ValueError) as e:
                reason = getattr(e, "reason", None) or e
                raise SendError(f"could not send to {url} ({reason}) after {sent} spans were "
                                "sent", sent) from e
        n_requests += 1
        sent += _count(req)
    return Exported(url, n_requests, sent, rejected)


def _post(url: str, req: dict, as_protobuf: bool, headers: dict | None,
          timeout: float) -> int:
    """POST one request; returns the spans the receiver said it rejected."""
    if as_protobuf:
        body, ctype = protobuf(req), "application/x-protobuf"
    else:
        body, ctype = _dumps(req).encode("utf-8"), "application/json"
    post = urllib.request.Request(url, body, {"Content-Type": ctype, **(headers or {})},
                                  method="POST")
    with urllib.request.urlopen(post, timeout=timeout) as resp:
        return _rejected(resp.read(), as_protobuf)


def protobuf(req: dict) -> bytes:
    """An OTLP/JSON request (as :func:`requests` makes them) in the protobuf encoding."""
    from google.protobuf.json_format import ParseDict, ParseError
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    def b64(hex_id: Any) -> str:
        return base64.b64encode(bytes.fromhex(hex_id)).decode("ascii")

    ids = ("traceId", "spanId", "parentSpanId")  # hex in OTLP/JSON, base64 in proto3 JSON
    proto = {"resourceSpans": [{**rs, "scopeSpans": [{**ss, "spans": [
        {**sp, **{k: b64(sp[k]) for k in ids if k in sp},
         "links": [{**lk, "traceId": b64(lk["traceId"]), "spanId": b64(lk["spanId"])}
                   for lk in sp.get("links", ())]}
        for sp in ss["spans"]]} for ss in rs["scopeSpans"]]} for rs in req["resourceSpans"]]}
    try:
        return ParseDict(proto, ExportTraceServiceRequest()).SerializeToString()
    except ParseError as e:  # a value protobuf cannot hold
        raise ValueError(f"cannot encode the request as protobuf: {e}") from None


# ---- the analysis as attributes --------------------------------------------------------------
def critical_path_attributes(analysis: Any) -> dict:
    """{(trace_id, span_id): attributes} for every span holding part of a critical path: its
    seconds on the path, the class with the most of them (and all of them, most first, when
    several), and the confidence, basis and evidence of its longest section in that class."""
    sec = analysis.sections
    trace_ids = [t.trace_id for t in analysis.task_results]
    groups: dict = {}  # key -> [total ns, {class: ns}, {class: (longest ns, section)}]
    for k, (task, span_id, a, b, cls) in enumerate(zip(
            sec.task.tolist(), sec.span_id.tolist(), sec.start_ns.tolist(),
            sec.end_ns.tolist(), sec.cls.tolist())):
        if span_id is None:  # a gap between root spans
            continue
        g = groups.setdefault((trace_ids[task], span_id), [0, {}, {}])
        ns, name = b - a, CLASSES[cls]
        g[0] += ns
        g[1][name] = g[1].get(name, 0) + ns
        if name not in g[2] or ns > g[2][name][0]:
            g[2][name] = (ns, k)
    keys = list(groups)
    mains = [max(groups[key][1].items(), key=lambda item: item[1])[0] for key in keys]
    longest = [groups[key][2][main][1] for key, main in zip(keys, mains)]
    words = sec.evidence.texts_at(longest) if keys else []
    confidence = sec.confidence.tolist()
    basis = (np.asarray(BASES, dtype=object)[np.asarray(sec.basis, dtype=np.int64)].tolist()
             if sec.basis is not None else [BASES[0]] * len(sec))  # None: all measured
    out = {}
    for key, main, k, text in zip(keys, mains, longest, words):
        total, per_class, _ = groups[key]
        attrs = {PREFIX + "critical_path_s": total / 1e9, PREFIX + "class": main,
                 PREFIX + "class_from": basis[k],
                 PREFIX + "class_confidence": float(confidence[k]),
                 PREFIX + "evidence": text}
        if len(per_class) > 1:
            attrs[PREFIX + "classes"] = [c for c, _ in sorted(
                per_class.items(), key=lambda item: -item[1])]
        out[key] = attrs
    return out


def task_root_attributes(analysis: Any) -> dict:
    """{(trace_id, span_id): attributes} for each task's root span: the verdict, its
    confidence, the share of the critical path per class and the evidence, one sentence a
    line."""
    out = {}
    for t in analysis.task_results:
        if t.root_span_id is None:
            continue
        attrs = {PREFIX + "bottleneck": t.bottleneck,
                 PREFIX + "bottleneck_assumed": bottleneck_assumed(t),
                 PREFIX + "confidence": float(t.confidence)}
        for c in CLASSES:
            attrs[PREFIX + "share." + c] = float(t.shares.get(c, 0.0))
        for c in CLASSES:
            if t.assumed.get(c, 0.0) > 0:
                attrs[PREFIX + "assumed_share." + c] = float(t.assumed[c])
        attrs[PREFIX + "task_evidence"] = "\n".join(t.evidence)
        out[(t.trace_id, t.root_span_id)] = attrs
    return out


# ---- spans as OTLP/JSON ------------------------------------------------------------------------
def _span(row: dict, analysis_attrs: dict | None) -> tuple:
    """(scope name, the OTLP/JSON span) of a row of ``spans``."""
    attrs = _loads(row["attrs"], {})
    if not isinstance(attrs, dict):
        attrs = {}
    attrs = {k: v for k, v in attrs.items() if not str(k).startswith(PREFIX)}
    scope = attrs.get("otel.scope.name")
    if isinstance(scope, str) and scope:
        del attrs["otel.scope.name"]  # the reader puts it back from the scope
    else:
        scope = None
    if row["stage_from"] == "agentscope" and row["stage"] is not None:
        attrs[semconv.STAGE] = row["stage"]
    for column, name in semconv.ACCOUNTING_ATTRIBUTES.items():
        if row[column] is not None:
            attrs[name] = int(row[column])
    if analysis_attrs:
        attrs.update(analysis_attrs)
    span: dict = {"traceId": row["trace_id"], "spanId": row["span_id"]}
    if row["parent_span_id"]:
        span["parentSpanId"] = row["parent_span_id"]
    span.update({"name": row["name"] or "", "kind": KIND_CODES.get(row["kind"], 0),
                 "startTimeUnixNano": str(row["start_ns"]),
                 "endTimeUnixNano": str(row["end_ns"]), "attributes": _attributes(attrs)})
    events = _loads(row["events"], [])
    if events:
        span["events"] = [{"timeUnixNano": str(e.get("time_ns") or 0),
                           "name": str(e.get("name", "")),
                           "attributes": _attributes(e.get("attrs") or {})}
                          for e in events if isinstance(e, dict)]
    links = _loads(row["links"], [])
    if links:
        span["links"] = [{"traceId": lk.get("trace_id"), "spanId": lk.get("span_id"),
                          "attributes": _attributes(lk.get("attrs") or {})}
                         for lk in links if isinstance(lk, dict)]
    code = STATUS_CODES.get(row["status"], 0)
    if code or row["status_message"]:
        span["status"] = {"code": code}
        if row["status_message"]:
            span["status"]["message"] = row["status_message"]
    return scope, span


def _request(items: list) -> dict:
    """An ExportTraceServiceRequest of ((service, host, pid), (scope, span)) items: one
    resourceSpans per resource, one scopeSpans per scope in it, in order of first use."""
    grouped: dict = {}
    for resource, (scope, span) in items:
        grouped.setdefault(resource, {}).setdefault(scope, []).append(span)
    out = []
    for (service, host, pid), scopes in grouped.items():
        attrs: list = []
        if service is not None:
            attrs.append({"key": "service.name", "value": {"stringValue": str(service)}})
        if host is not None:
            attrs.append({"key": "host.name", "value": {"stringValue": str(host)}})
        if pid is not None:
            attrs.append({"key": "process.pid", "value": {"intValue": str(int(pid))}})
        out.append({"resource": {"attributes": attrs}, "scopeSpans": [
            ({"scope": {"name": scope}} if scope is not None else {}) | {"spans": spans}
            for scope, spans in scopes.items()]})
    return {"resourceSpans": out}


def _attributes(attrs: dict) -> list:
    return [{"key": k if type(k) is str else str(k), "value": any_value(v)}
            for k, v in attrs.items()]


def any_value(value: Any) -> dict:
    """A value of ``json.loads`` as an OTLP/JSON AnyValue (None: the empty AnyValue). An
    integer beyond int64 becomes its digits as a string; NaN and infinities are the strings
    proto3 JSON has for them."""
    t = type(value)
    if t is str:
        return {"stringValue": value}
    if t is int:
        if -(1 << 63) <= value < (1 << 63):
            return {"intValue": str(value)}
        return {"stringValue": str(value)}
    if t is float:
        if not math.isfinite(value):
            return {"doubleValue": str(value).replace("nan", "NaN").replace("inf", "Infinity")}
        return {"doubleValue": value}
    if t is bool:
        return {"boolValue": value}
    if value is None:
        return {}
    if isinstance(value, (list, tuple)):
        return {"arrayValue": {"values": [any_value(v) for v in value]}}
    if isinstance(value, dict):
        return {"kvlistValue": {"values": _attributes(value)}}
    return {"stringValue": str(value)}


def _loads(text: Any, default: Any) -> Any:
    if not text or text == "[]" or text == "{}":
        return default
    try:
        return json.loads(text)
    except ValueError:
        return default


def _dumps(req: dict) -> str:
    # ASCII-only JSON: control characters, quotes, lone surrogates and </script> stay data
    return json.dumps(req, separators=(",", ":"), allow_nan=False)


def _count(req: dict) -> int:
    return sum(len(ss["spans"]) for rs in req["resourceSpans"] for ss in rs["scopeSpans"])


def _rejected(body: bytes, as_protobuf: bool = False) -> int:
    """rejectedSpans of an OTLP/HTTP response's partialSuccess (0 if none or unreadable)."""
    if as_protobuf:
        from google.protobuf.message import DecodeError
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
            ExportTraceServiceResponse,
        )

        try:
            return ExportTraceServiceResponse.FromString(body).partial_success.rejected_spans
        except DecodeError:  # not protobuf (some receivers answer JSON anyway)
            return 0
    try:
        reply = json.loads(body or b"{}")
        return int((reply.get("partialSuccess") or {}).get("rejectedSpans") or 0)
    except (ValueError, TypeError, AttributeError):
        return 0
