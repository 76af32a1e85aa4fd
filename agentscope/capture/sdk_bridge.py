"""Joining an application's own OpenTelemetry SDK ("SDK mode").

When the application already configured an SDK ``TracerProvider``, our spans are created by
it (so they join its traces and reach its exporters), and :class:`FileSpanProcessor` is added
beside its processors so that every span it ends, ours and its own, also lands in our files.
Resource accounting travels as ``agentscope.*`` attributes (semconv.ACCOUNTING_ATTRIBUTES)
and is moved back into columns here.
"""

from __future__ import annotations

import math
import threading
import weakref
from typing import Any, Optional

from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
from opentelemetry.trace import StatusCode

from .. import semconv
from .._log import log_once
from ..formats import spanfile
from ..records import SpanEvent, SpanLink, SpanRecord
from . import attributes as av
from . import state

_STATUS = {StatusCode.UNSET: "unset", StatusCode.OK: "ok", StatusCode.ERROR: "error"}
_COLUMN_BY_ATTR = {attr: col for col, attr in semconv.ACCOUNTING_ATTRIBUTES.items()}

_providers: "weakref.WeakSet[Any]" = weakref.WeakSet()
_providers_lock = threading.Lock()


class FileSpanProcessor(SpanProcessor):
    """Queues every ended span for the active runtime's span file writer."""

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        pass

    def on_end(self, span: ReadableSpan) -> None:
        rt = state.active
        if rt is None:
            return
        try:
            writer = rt.writer
            start = span.start_time or 0
            if writer.forked_at_ns and start < writer.forked_at_ns:
                return  # open when this process forked: the parent writes it (LeanSpan.end)
            writer.submit(_Pending(span, start))
        except Exception as e:  # never into the SDK's (the application's) span end
            log_once("sdk-on-end", "agentscope: cannot queue an SDK span (%r)", e)

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        rt = state.active
        return True if rt is None else rt.writer.flush(timeout_millis / 1000)


def attach_to(provider: Any) -> None:
    """Add our processor to an SDK provider, once per provider."""
    with _providers_lock:
        if provider in _providers:
            return
        provider.add_span_processor(FileSpanProcessor())
        _providers.add(provider)


class _Pending:
    """An ended SDK span waiting in the queue; converted on the writer's thread. ``nbytes``:
    the text its attributes and events hold (the writer's byte bound); ``end_ns``: when it
    ended (the writer's age check)."""

    __slots__ = ("span", "nbytes", "end_ns")

    def __init__(self, span: ReadableSpan, start: int) -> None:
        self.span = span
        self.end_ns = span.end_time or start
        # read on the application's thread, so as cheaply as the SDK allows: its span's own
        # attribute mapping and event list where it has them (the public properties copy and
        # lock per item: 4 us of a 100 us span), the public ones otherwise
        attrs = getattr(span, "_attributes", None)
        nbytes = _text_size(span.attributes if attrs is None else attrs)
        events = getattr(span, "_events", None)
        for event in span.events if events is None else events:
            nbytes += _text_size(event.attributes)
        self.nbytes = nbytes

    def encode(self, writer: Any) -> str:
        return spanfile.encode(record_from_readable(self.span, writer))


def _text_size(attrs: Any) -> int:
    if not attrs:
        return 0
    n = 0
    for v in getattr(attrs, "_dict", attrs).values():  # BoundedAttributes: its plain dict
        if type(v) is str:
            n += len(v)
        elif type(v) is tuple:
            n += av.size(v)
    return n


def record_from_readable(span: ReadableSpan, writer: Any) -> SpanRecord:
    """Our record of an SDK span; its attribute values within our limits (attributes.py)."""
    ctx = span.context
    attrs = {key: av.value(v) for key, v in (span.attributes or {}).items()}
    stage = attrs.pop(semconv.STAGE, None)
    cols: dict[str, Optional[int]] = {col: None for col in semconv.ACCOUNTING_ATTRIBUTES}
    for attr, col in _COLUMN_BY_ATTR.items():
        if attr in attrs:
            value = attrs.pop(attr)
            cols[col] = int(value) if isinstance(value, int) or (
                isinstance(value, float) and math.isfinite(value)) else None
    service = None
    resource = getattr(span, "resource", None)
    if resource is not None:
        service = resource.attributes.get("service.name")
    if not service or str(service).startswith("unknown_service"):
        service = writer.service or service
    events = tuple(SpanEvent(av.key(e.name), e.timestamp, av.convert(e.attributes))
                   for e in span.events[:av.EVENT_LIMIT])
    links = tuple(SpanLink(f"{lk.context.trace_id:032x}", f"{lk.context.span_id:016x}",
                           av.convert(lk.attributes)) for lk in span.links)
    # a span started at time 0 (a caller's explicit start_time=0) has no start: its end
    # stands in (the loader names a span starting at 0 as a problem)
    start = span.start_time or span.end_time or 0
    parent = span.parent
    return SpanRecord(
        trace_id=f"{ctx.trace_id:032x}", span_id=f"{ctx.span_id:016x}",
        parent_span_id=f"{parent.span_id:016x}" if parent is not None and parent.is_valid else None,
        name=av.key(span.name), stage=None if stage is None else av.safe_str(stage, 64),
        kind=span.kind.name.lower() if span.kind is not None else "internal",
        start_ns=start, end_ns=max(span.end_time or start, start),
        status=_STATUS.get(span.status.status_code, "unset"),
        status_message=av.safe_str(span.status.description, 1024) or None
        if span.status.description else None,
        service=None if service is None else str(service), host=writer.host, pid=writer.pid,
        attrs=attrs, events=events, links=links, **cols,
    )

