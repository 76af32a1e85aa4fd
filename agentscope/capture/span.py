"""Our lean span: an OpenTelemetry API ``Span`` that records into the span file writer.

Used when the application has no OpenTelemetry SDK of its own ("lean mode"). It does the
minimum on the hot path: ids, two timestamps, two ``getrusage(RUSAGE_THREAD)`` snapshots, and a
bounded append at ``end()``. Converting to a :class:`~agentscope.records.SpanRecord` (hex ids,
deltas, status strings) happens later on the writer's thread (:meth:`LeanSpan.to_record`).

:class:`LeanTracerProvider` lets other OpenTelemetry instrumentation (HTTP clients, database
drivers, GenAI instrumentors) record through the same path, so their spans land in our files
with the same resource accounting.
"""

from __future__ import annotations

import contextlib
import random
import resource
import threading
import time
import traceback
import types
import weakref
from typing import Any, Iterator, Mapping, Optional, Sequence

from opentelemetry import trace
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags, TraceState

from .. import semconv
from .._log import log_once
from ..formats import spanfile
from ..records import SpanEvent, SpanLink, SpanRecord
from . import attributes as av
from . import state
from .otelctx import leave as _detach

_getrusage = resource.getrusage
_RUSAGE_THREAD = getattr(resource, "RUSAGE_THREAD", None)
_time_ns = time.time_ns
_thread_time_ns = time.thread_time_ns
_process_time_ns = time.process_time_ns
_get_ident = threading.get_ident
_randbits = random.getrandbits
_SAMPLED = TraceFlags(TraceFlags.SAMPLED)
_DEFAULT_TRACE_STATE = TraceState()
_KIND_NAMES = {SpanKind.INTERNAL: "internal", SpanKind.SERVER: "server",
               SpanKind.CLIENT: "client", SpanKind.PRODUCER: "producer",
               SpanKind.CONSUMER: "consumer"}
_STATUS_NAMES = {StatusCode.UNSET: "unset", StatusCode.OK: "ok", StatusCode.ERROR: "error"}
_MAX_STACKTRACE = 16384
_STACK_FRAMES = 64  # frames of a recorded exception's stack (the innermost ones)
_value = av.value
# A span may start from the rusage reading its thread took when its previous span ended, if
# that is at most this old: in tight loops of short spans that saves one of the two syscalls.
# Context switches and page faults in that gap (<= 50 us) are then counted in the new span.
RUSAGE_REUSE_NS = 50_000
# Spans shorter than this get no context-switch or page-fault counts (None, "not measured"):
# a few microseconds of work cannot be a task's bottleneck, and skipping the second getrusage
# keeps tight loops of tiny spans cheap. Their on-CPU time is always measured.
RUSAGE_MIN_SPAN_NS = 50_000
# The CPU time of the process's other threads over a span is recorded when at least this much
# (and the span is at least RUSAGE_MIN_SPAN_NS long): less cannot change a verdict, and most
# spans then carry no attribute for it
OTHER_CPU_MIN_NS = 1_000_000
# The thread's kernel-mode CPU time over a span is recorded where it took major page faults,
# or where it was at least this much (a memory stage's copying between tiers, say): less
# cannot change a verdict, and most spans then carry no attribute for it
SYSTEM_CPU_MIN_NS = 1_000_000

_thread_local = threading.local()


def other_threads_cpu(proc0: int, proc1: int, thread_cpu_ns: int) -> Optional[int]:
    """The CPU time the process's other threads used between two readings of the process
    CPU clock, given the calling thread's own over the same time; None below
    OTHER_CPU_MIN_NS (not recorded)."""
    other = proc1 - proc0 - thread_cpu_ns
    return other if other >= OTHER_CPU_MIN_NS else None


def thread_rusage():
    """This thread's resource usage, or None where the OS cannot say (not Linux).

    Only its counters (context switches, page faults) are used: its CPU times are sampled at
    scheduler ticks and can be off by milliseconds over a short span, so on-CPU time comes
    from ``time.thread_time_ns()`` (CLOCK_THREAD_CPUTIME_ID), which is exact.
    """
    if _RUSAGE_THREAD is None:
        return None
    return _getrusage(_RUSAGE_THREAD)


def native_thread_id() -> int:
    try:
        return _thread_local.tid
    except AttributeError:
        tid = _thread_local.tid = threading.get_native_id()
        return tid


class LeanSpan(trace.Span):
    """A recording span. Attribute-setting after :meth:`end` is ignored, as in the SDK.

    Fields most spans never change are class-level defaults, so creating a span stores only
    what differs (ids, name, stage, times, the rusage snapshot).
    """

    kind = "internal"
    links: Sequence[SpanLink] = ()
    events: Optional[list] = None
    status = "unset"
    status_message: Optional[str] = None
    trace_state = _DEFAULT_TRACE_STATE
    parent_id = 0
    local_parent: Optional["LeanSpan"] = None
    loop = False
    token: Any = None
    end_ns = 0
    thread_cpu_ns: Optional[int] = None
    vcsw: Optional[int] = None
    ivcsw: Optional[int] = None
    minflt: Optional[int] = None
    majflt: Optional[int] = None
    child_cpu_ns = 0
    children = 0
    child_majflt = 0
    child_ivcsw = 0
    child_vcsw = 0
    workers_cpu_ns = 0
    child_run_delay_ns = 0
    child_own_cpu_ns = 0
    loop_task: Any = None  # on a loop: its asyncio task, and that task's span before it
    loop_prev: Any = None
    # nbytes: text of its own (attributes set on it, events), for the writer's byte bound;
    # an instance attribute (set in __init__): the writer reads it for every span
    _own_attrs = False
    _sc: Optional[SpanContext] = None

    def __init__(self, name: str, stage: Optional[str], attrs: Mapping[str, Any],
                 parent: Optional[trace.Span], kind: str = "internal",
                 links: Sequence[SpanLink] = (), start_ns: Optional[int] = None,
                 loop: bool = False, new_trace: bool = False) -> None:
        if parent is None or new_trace:
            self.trace_id = _randbits(128) or 1
        elif type(parent) is LeanSpan:
            self.trace_id = parent.trace_id
            self.parent_id = parent.span_id
            self.trace_state = parent.trace_state
            self.local_parent = parent
        else:
            sc = parent.get_span_context()
            if sc.is_valid:
                self.trace_id = sc.trace_id
                self.parent_id = sc.span_id
                self.trace_state = sc.trace_state
            else:
                self.trace_id = _randbits(128) or 1
        self.span_id = _randbits(64) or 1
        self.name = name
        self.stage = stage
        self.attrs = attrs
        if kind != "internal":
            self.kind = kind
        if links:
            self.links = links
        if loop:
            self.loop = True
        self.ident = _get_ident()
        try:
            self.tid = _thread_local.tid
        except AttributeError:
            self.tid = native_thread_id()
        now = _time_ns()
        tl = _thread_local
        # the rusage reading and the process CPU clock of the thread's previous span, if at
        # most RUSAGE_REUSE_NS old (the other threads' CPU in that gap is far below what
        # OTHER_CPU_MIN_NS records)
        try:
            fresh = now - tl.ru_ns <= RUSAGE_REUSE_NS
        except AttributeError:
            fresh = False
        if fresh:
            self.ru0, self.proc0 = tl.ru, tl.proc
        else:
            ru = _getrusage(_RUSAGE_THREAD) if _RUSAGE_THREAD is not None else None
            self.ru0, self.proc0 = ru, _process_time_ns()
            tl.ru, tl.ru_ns, tl.proc = ru, now, self.proc0
        self.cpu0 = _thread_time_ns()
        self.start_ns = now if start_ns is None else start_ns
        self.nbytes = 0

    # ---- the hot end ----------------------------------------------------------------------
    def end(self, end_time: Optional[int] = None) -> None:
        if self.end_ns:
            return
        now = _time_ns()
        if _get_ident() == self.ident:
            # keep deltas, not the rusage structs: spans wait in the queue for up to a flush
            # interval, and every byte they hold then costs page faults on the hot path
            self.thread_cpu_ns = cpu = _thread_time_ns() - self.cpu0
            self.cpu0 = None
            ru0 = self.ru0
            if now - self.start_ns >= RUSAGE_MIN_SPAN_NS:
                proc = _process_time_ns()
                other = other_threads_cpu(self.proc0, proc, cpu)
                if other is not None:
                    self.attrs = {**self.attrs, semconv.OTHER_THREADS_CPU: other}
                if ru0 is not None:
                    ru1 = _getrusage(_RUSAGE_THREAD)
                    tl = _thread_local
                    tl.ru, tl.ru_ns, tl.proc = ru1, now, proc
                    self.vcsw = ru1.ru_nvcsw - ru0.ru_nvcsw
                    self.ivcsw = ru1.ru_nivcsw - ru0.ru_nivcsw
                    self.minflt = ru1.ru_minflt - ru0.ru_minflt
                    self.majflt = majflt = ru1.ru_majflt - ru0.ru_majflt
                    sys_ns = round((ru1.ru_stime - ru0.ru_stime) * 1e9)
                    if majflt or sys_ns >= SYSTEM_CPU_MIN_NS:  # rare
                        self.attrs = {**self.attrs, semconv.SYSTEM_CPU: sys_ns}
        self.ru0 = None
        if self.children:  # rare: its child processes' context switches
            self.attrs = {**self.attrs, semconv.CHILD_IVCSW: self.child_ivcsw,
                          semconv.CHILD_VCSW: self.child_vcsw,
                          semconv.CHILD_RUN_DELAY: self.child_run_delay_ns,
                          semconv.CHILD_OWN_CPU: self.child_own_cpu_ns}
        if self.workers_cpu_ns:  # rare: jobs it handed to worker threads
            self.attrs = {**self.attrs, semconv.WORKERS_CPU: self.workers_cpu_ns}
        self.end_ns = now if end_time is None or type(end_time) is not int else end_time
        rt = state.active
        if rt is not None:
            writer = rt.writer
            if writer.forked_at_ns:
                _end_in_forked_child(self, writer)
            else:
                writer.submit(self)

    def finish(self) -> None:
        """End a span that :func:`agentscope.capture.runtime.begin` made current."""
        token = self.token
        if token is not None:
            self.token = None
            _detach(token)
        if self.loop_task is not None:
            state.leave_loop_span(self)
        self.end()

    def fail(self, exc: BaseException) -> None:
        """Record an exception that escaped the instrumented code, and mark the span failed.
        Never raises, whatever the exception's ``__str__`` does (the description is then its
        type's name)."""
        self.status = "error"
        self.status_message = av.describe(exc)
        self._record_exception(exc, None, None, True)

    @property
    def span(self) -> "LeanSpan":
        return self

    # ---- OpenTelemetry Span API -------------------------------------------------------------
    def get_span_context(self) -> SpanContext:
        sc = self._sc
        if sc is None:
            sc = self._sc = SpanContext(self.trace_id, self.span_id, False, _SAMPLED,
                                        self.trace_state)
        return sc

    def _writable_attrs(self) -> dict:
        if not self._own_attrs:
            self.attrs = dict(self.attrs)
            self._own_attrs = True
        return self.attrs  # type: ignore[return-value]

    def set_attributes(self, attributes: Mapping[str, Any]) -> None:
        if self.end_ns or not attributes:
            return
        try:
            attrs = self._writable_attrs()
            nbytes = 0
            for key, value in attributes.items():
                value = _value(value)
                if value is not None:
                    if type(key) is not str:
                        key = av.key(key)
                    if len(attrs) >= av.COUNT_LIMIT and key not in attrs:
                        continue  # beyond the limit: dropped, as OpenTelemetry's SDK does
                    attrs[key] = value
                    if type(value) is not int:
                        nbytes += av.size(value)
            if nbytes:
                self.nbytes += nbytes
        except Exception as e:  # a hostile mapping: the OpenTelemetry API never raises
            _trouble("setting attributes", e)

    def set_attribute(self, key: str, value: Any) -> None:
        self.set_attributes({key: value})

    def add_event(self, name: str, attributes: Optional[Mapping[str, Any]] = None,
                  timestamp: Optional[int] = None) -> None:
        if self.end_ns:
            return
        try:
            events = self.events
            if events is None:
                events = self.events = []
            elif len(events) >= av.EVENT_LIMIT:
                return  # beyond the limit: dropped, as OpenTelemetry's SDK does
            attrs = av.normalize(attributes) if attributes else {}
            name = av.key(name)
            events.append(SpanEvent(name, _time_ns() if type(timestamp) is not int
                                    else timestamp, attrs))
            self.nbytes += len(name) + sum(av.size(v) for v in attrs.values())
        except Exception as e:
            _trouble("adding an event", e)

    def add_link(self, context: SpanContext,
                 attributes: Optional[Mapping[str, Any]] = None) -> None:
        try:
            if self.end_ns or context is None or not context.is_valid:
                return
            self.links = tuple(self.links) + (SpanLink(f"{context.trace_id:032x}",
                                                       f"{context.span_id:016x}",
                                                       av.convert(attributes)),)
        except Exception as e:
            _trouble("adding a link", e)

    def update_name(self, name: str) -> None:
        if not self.end_ns:
            self.name = av.key(name)

    def is_recording(self) -> bool:
        return not self.end_ns

    def set_status(self, status: "Status | StatusCode", description: Optional[str] = None) -> None:
        if self.end_ns:
            return
        if isinstance(status, Status):
            code, description = status.status_code, status.description or description
        else:
            code = status
        if self.status == "ok" and code is not StatusCode.OK:
            return  # OK is final, as in the OpenTelemetry SDK
        if code is StatusCode.UNSET:
            return
        self.status = _STATUS_NAMES.get(code, "unset")
        self.status_message = (None if code is not StatusCode.ERROR or description is None
                               else av.safe_str(description, 1024))

    def record_exception(self, exception: BaseException,
                         attributes: Optional[Mapping[str, Any]] = None,
                         timestamp: Optional[int] = None, escaped: bool = False) -> None:
        self._record_exception(exception, attributes, timestamp, False)

    def _record_exception(self, exception: BaseException, attributes: Any, timestamp: Any,
                          always: bool) -> None:
        """The ``exception`` event; ``always``: even past the event limit (the exception that
        ended the span). Never raises: the exception is the application's, with whatever its
        ``__str__``, ``args`` or traceback do."""
        try:
            events = self.events
            if events is None:
                events = self.events = []
            elif len(events) >= av.EVENT_LIMIT and not always:
                return
            attrs = exception_attributes(exception)
            if attributes:
                attrs.update(av.normalize(attributes))
            events.append(SpanEvent("exception", _time_ns() if type(timestamp) is not int
                                    else timestamp, attrs))
            self.nbytes += sum(av.size(v) for v in attrs.values())
        except Exception as e:
            _trouble("recording an exception", e)

    # ---- off the hot path: the flat record ---------------------------------------------------
    def to_record(self, writer: Any) -> SpanRecord:
        attrs = self.attrs
        stage = self.stage
        if stage is None and semconv.STAGE in attrs:
            attrs = dict(attrs)
            stage = str(attrs.pop(semconv.STAGE))
        if self.loop:
            attrs = dict(attrs)
            attrs[semconv.CPU_SCOPE] = "loop"
        return SpanRecord(
            f"{self.trace_id:032x}", f"{self.span_id:016x}",
            f"{self.parent_id:016x}" if self.parent_id else None,
            self.name, stage, self.kind, self.start_ns, max(self.end_ns, self.start_ns),
            self.status, self.status_message, writer.service, writer.host, writer.pid, self.tid,
            self.thread_cpu_ns, self.child_cpu_ns, self.children, self.vcsw, self.ivcsw,
            self.minflt, self.majflt,
            self.child_majflt, attrs, tuple(self.events or ()), tuple(self.links),
        )

    def encode(self, writer: Any) -> str:
        """This span as one span-file line, without building the SpanRecord first."""
        attrs = self.attrs
        stage = self.stage
        if self.loop or (stage is None and semconv.STAGE in attrs):
            return spanfile.encode(self.to_record(writer))
        parent = self.parent_id
        return spanfile.encode_fields(
            f"{self.trace_id:032x}", f"{self.span_id:016x}", f"{parent:016x}" if parent else None,
            self.name, stage, self.kind, self.start_ns, max(self.end_ns, self.start_ns),
            self.status, self.status_message, writer.service, writer.host, writer.pid, self.tid,
            self.thread_cpu_ns, self.child_cpu_ns, self.children, self.vcsw, self.ivcsw,
            self.minflt, self.majflt, self.child_majflt, attrs, self.events, self.links)

    def __repr__(self) -> str:
        return f"LeanSpan({self.name!r}, trace={self.trace_id:032x}, span={self.span_id:016x})"


def exception_attributes(exc: BaseException) -> dict:
    """``exception.type``, ``.message`` and ``.stacktrace`` of an exception, each bounded.
    Never raises (a message that cannot be had is left out)."""
    cls = type(exc)
    name = av.safe_str(getattr(cls, "__qualname__", None) or cls.__name__, av.NAME_LIMIT)
    module = getattr(cls, "__module__", None)
    qualname = name if type(module) is not str or module in ("builtins", "__main__") \
        else f"{module}.{name}"
    try:
        stack = _stacktrace(exc)
    except BaseException:  # noqa: B036 - whatever the exception's chain or traceback does
        stack = ""
    attrs = {"exception.type": qualname, "exception.stacktrace": stack[-_MAX_STACKTRACE:]}
    message = av.text_of(exc)
    if message is not None:
        attrs["exception.message"] = message
    return attrs


_CHAIN = 8  # exceptions of a chain (__cause__, __context__) in a stack trace
_CAUSE = "\nThe above exception was the direct cause of the following exception:\n\n"
_CONTEXT = "\nDuring handling of the above exception, another exception occurred:\n\n"


def _stacktrace(exc: BaseException) -> str:
    """The stack trace Python would print, bounded: the innermost _STACK_FRAMES frames of
    each of at most _CHAIN chained exceptions. The spans of a deep recursion each record the
    same exception: the trace of its innermost frames is formatted once (per thread)."""
    parts: list = []
    seen: set = set()
    e: Optional[BaseException] = exc
    while e is not None and len(seen) < _CHAIN and id(e) not in seen:
        seen.add(id(e))
        parts.append(_one_trace(e))
        if e.__cause__ is not None:
            parts.append(_CAUSE)
            e = e.__cause__
        elif e.__context__ is not None and not e.__suppress_context__:
            parts.append(_CONTEXT)
            e = e.__context__
        else:
            break
    return "".join(reversed(parts))


def _one_trace(exc: BaseException) -> str:
    entries = []
    tb = exc.__traceback__
    while tb is not None:
        entries.append(tb)
        tb = tb.tb_next
    entries = entries[-_STACK_FRAMES:]
    first = entries[0] if entries else None
    cached = getattr(_thread_local, "trace", None)
    if cached is not None and cached[0]() is exc and cached[1] == id(first):
        return cached[2]
    short = None
    for entry in reversed(entries):
        short = types.TracebackType(short, entry.tb_frame, entry.tb_lasti, entry.tb_lineno)
    text = "".join(traceback.format_exception(type(exc), exc, short, chain=False))
    try:
        _thread_local.trace = (weakref.ref(exc), id(first), text)
    except TypeError:  # not weakly referenceable: no cache
        pass
    return text


def _end_in_forked_child(span: LeanSpan, writer: Any) -> None:
    """End of a span in a forked child. One that was open when the process forked is the
    parent's: the parent writes it, and a second copy here (same ids, another end) would be
    a duplicate. The child's own top-level spans are written at once (forked workers often
    leave through ``os._exit``, running no exit handlers)."""
    forked = writer.forked_at_ns
    if span.start_ns < forked:
        return
    writer.submit(span)
    lp = span.local_parent
    if lp is None or lp.start_ns < forked:
        writer.flush()


def _trouble(what: str, exc: BaseException) -> None:
    log_once(f"span api: {what}", "agentscope: %s failed (%r); ignored", what, exc)


class LeanTracer(trace.Tracer):
    """A tracer whose spans are :class:`LeanSpan`; a non-recording span when tracing is off."""

    def __init__(self, scope: str, version: Optional[str] = None) -> None:
        self._scope_attrs = {"otel.scope.name": scope} if scope and scope != "agentscope" else {}
        if version and self._scope_attrs:
            self._scope_attrs["otel.scope.version"] = version

    def start_span(self, name: str, context: Optional[Any] = None,
                   kind: SpanKind = SpanKind.INTERNAL,
                   attributes: Optional[Mapping[str, Any]] = None,
                   links: Optional[Sequence[trace.Link]] = None,
                   start_time: Optional[int] = None, record_exception: bool = True,
                   set_status_on_exception: bool = True) -> trace.Span:
        if state.active is None:
            return trace.INVALID_SPAN
        try:
            return self._start(name, context, kind, attributes, links, start_time)
        except Exception as e:  # other instrumentation's call: the API never raises
            _trouble("starting a span", e)
            return trace.INVALID_SPAN

    def _start(self, name: Any, context: Any, kind: Any, attributes: Any, links: Any,
               start_time: Any) -> LeanSpan:
        parent = trace.get_current_span(context)
        if parent is trace.INVALID_SPAN or not parent.get_span_context().is_valid:
            parent = state.active.default_parent
        attrs = dict(self._scope_attrs)
        if attributes:
            attrs.update(av.convert(attributes))
        span_links = tuple(
            SpanLink(f"{lk.context.trace_id:032x}", f"{lk.context.span_id:016x}",
                     av.convert(lk.attributes))
            for lk in (links or ()) if lk.context is not None and lk.context.is_valid)
        stage = attrs.pop(semconv.STAGE, None)
        span = LeanSpan(av.key(name), None if stage is None else av.safe_str(stage, 64), attrs,
                        parent, _KIND_NAMES.get(kind, "internal"), span_links,
                        start_time if type(start_time) is int else None)
        span._own_attrs = True
        span.nbytes = sum(av.size(v) for v in attrs.values())
        return span

    @contextlib.contextmanager
    def start_as_current_span(self, name: str, context: Optional[Any] = None,
                              kind: SpanKind = SpanKind.INTERNAL,
                              attributes: Optional[Mapping[str, Any]] = None,
                              links: Optional[Sequence[trace.Link]] = None,
                              start_time: Optional[int] = None, record_exception: bool = True,
                              set_status_on_exception: bool = True,
                              end_on_exit: bool = True) -> Iterator[trace.Span]:
        span = self.start_span(name, context, kind, attributes, links, start_time,
                               record_exception, set_status_on_exception)
        with trace.use_span(span, end_on_exit=end_on_exit, record_exception=record_exception,
                            set_status_on_exception=set_status_on_exception) as current:
            yield current


class LeanTracerProvider(trace.TracerProvider):
    """The TracerProvider that ``agentscope.init`` installs when the application has none."""

    def get_tracer(self, instrumenting_module_name: str,
                   instrumenting_library_version: Optional[str] = None,
                   schema_url: Optional[str] = None,
                   attributes: Optional[Any] = None) -> trace.Tracer:
        return LeanTracer(instrumenting_module_name, instrumenting_library_version)
