"""Turning tracing on and off: configuration, mode selection, start and end of our spans.

Two modes, chosen by :func:`init`:

* **lean** (the application has no OpenTelemetry SDK): our :class:`LeanTracerProvider` becomes
  the global provider and our spans are :class:`LeanSpan` objects;
* **sdk** (the application configured an SDK ``TracerProvider``, globally or passed as
  ``tracer_provider=``): our spans are its spans, and our file processor is added to it.

Either way, :func:`begin` returns a handle with ``fail(exc)`` and ``finish()``, and the span
is current in the OpenTelemetry context between the two.
"""

from __future__ import annotations

import atexit
import dataclasses
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any, Mapping, Optional

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Status, StatusCode

from .._log import log, log_once
from ..records import SpanLink
from ..semconv import ACCOUNTING_ATTRIBUTES as ACCOUNTING
from ..semconv import (CHILD_IVCSW, CHILD_OWN_CPU, CHILD_RUN_DELAY, CHILD_VCSW, OTHER_THREADS_CPU,
                       SYSTEM_CPU, WORKERS_CPU)
from .._version import __version__
from . import children, otelctx, propagation, sdk_bridge, state
from .span import (RUSAGE_MIN_SPAN_NS, LeanSpan, LeanTracerProvider, native_thread_id,
                   other_threads_cpu, thread_rusage)
from .writer import SpanFileWriter


_get_current = otelctx.get_current
_enter = otelctx.enter
_detach = otelctx.leave
_SPAN_KEY = otelctx.SPAN_KEY

LEAN_PROVIDER = LeanTracerProvider()

_init_lock = threading.RLock()
_atexit_registered = False
_UNSET = object()
# AGENTSCOPE_COLLECT as it was before a sampler set it for this process's children; restored at
# shutdown, so that a later init() in the same process does not start a GIL probe it was not
# asked for
_collect_env_before: Any = _UNSET


def _env_float(environ: Mapping[str, str], name: str, default: Optional[float]) -> Optional[float]:
    raw = environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return float(raw)
    except ValueError:
        log.warning("agentscope: ignoring %s=%r (not a number)", name, raw)
        return default


def _truthy(value: Optional[str]) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes", "on")


@dataclasses.dataclass(frozen=True)
class Config:
    """Settings of one :func:`init`. Environment variables override the arguments."""

    trace_dir: Path
    service: str
    flush_interval_s: float = 1.0
    max_queue: int = 65536
    propagate_threads: bool = True
    propagate_subprocess: bool = True
    disabled: bool = False

    @classmethod
    def resolve(cls, trace_dir: "str | os.PathLike[str] | None", service: Optional[str],
                flush_interval_s: Optional[float], max_queue: Optional[int],
                propagate_threads: bool, propagate_subprocess: bool,
                environ: Optional[Mapping[str, str]] = None) -> "Config":
        env = os.environ if environ is None else environ
        directory = env.get("AGENTSCOPE_TRACE_DIR") or trace_dir or "traces"
        name = (env.get("AGENTSCOPE_SERVICE") or service or env.get("OTEL_SERVICE_NAME")
                or Path(sys.argv[0] if sys.argv and sys.argv[0] else "python").stem or "python")
        interval = _env_float(env, "AGENTSCOPE_FLUSH_INTERVAL", flush_interval_s) or 1.0
        queue = _env_float(env, "AGENTSCOPE_MAX_QUEUE", max_queue) or 65536
        disabled = _truthy(env.get("AGENTSCOPE_DISABLED")) or _truthy(env.get("OTEL_SDK_DISABLED"))
        return cls(Path(directory).expanduser().resolve(), str(name), float(interval),
                   int(queue), propagate_threads, propagate_subprocess, disabled)


@dataclasses.dataclass
class Runtime:
    """What :func:`init` set up. ``mode`` is ``"lean"`` or ``"sdk"``."""

    config: Config
    writer: SpanFileWriter
    mode: str
    tracer: Optional[trace.Tracer]  # the SDK tracer in sdk mode
    default_parent: Optional[trace.Span]  # the remote parent from TRACEPARENT, if any
    lean: bool = dataclasses.field(init=False)  # mode == "lean", read on every span
    sampler: Any = None  # the counter sampler, with init(collect=...)

    def __post_init__(self) -> None:
        self.lean = self.mode == "lean"

    @property
    def trace_dir(self) -> Path:
        return self.config.trace_dir

    @property
    def service(self) -> str:
        return self.config.service


def init(trace_dir: "str | os.PathLike[str] | None" = None, service: Optional[str] = None, *,
         flush_interval_s: Optional[float] = None, max_queue: Optional[int] = None,
         tracer_provider: Optional[trace.TracerProvider] = None,
         propagate_threads: bool = True, propagate_subprocess: bool = True,
         collect: "bool | float" = False) -> Optional[Runtime]:
    """Start tracing into ``trace_dir``. Idempotent: a second call returns the first runtime.

    Environment variables override the arguments: ``AGENTSCOPE_TRACE_DIR``,
    ``AGENTSCOPE_SERVICE`` (then ``OTEL_SERVICE_NAME``), ``AGENTSCOPE_FLUSH_INTERVAL``,
    ``AGENTSCOPE_MAX_QUEUE``; ``AGENTSCOPE_DISABLED=1`` (or ``OTEL_SDK_DISABLED=true``) turns
    tracing off. ``TRACEPARENT``/``TRACESTATE`` make this process continue a parent's trace.
    Returns None when disabled.

    ``collect=True`` (or a rate in Hz) also samples host, process-tree and GPU counters on a
    daemon thread into the same directory (10 Hz by default; see agentscope.collectors).
    ``AGENTSCOPE_COLLECT`` (``1`` or a rate) turns it on from the environment; ``gil`` runs
    only the probe of this process's interpreter lock (``agentscope run`` sets it: its own
    sampler reads the rest).
    """
    global _atexit_registered
    state.init_called = True
    with _init_lock:
        if state.active is not None:
            return state.active
        config = Config.resolve(trace_dir, service, flush_interval_s, max_queue,
                                propagate_threads, propagate_subprocess)
        if config.disabled:
            log.info("agentscope: tracing disabled by the environment")
            return None
        writer = SpanFileWriter(config.trace_dir, service=config.service,
                                flush_interval_s=config.flush_interval_s,
                                max_queue=config.max_queue)
        provider = tracer_provider if tracer_provider is not None else trace.get_tracer_provider()
        tracer = None
        if hasattr(provider, "add_span_processor") and provider is not LEAN_PROVIDER:
            mode = "sdk"
            sdk_bridge.attach_to(provider)
            tracer = provider.get_tracer("agentscope", __version__)
        else:
            mode = "lean"
            if isinstance(provider, trace.ProxyTracerProvider):
                trace.set_tracer_provider(LEAN_PROVIDER)
            elif provider is not LEAN_PROVIDER:
                log.warning("agentscope: the global TracerProvider (%s) is not an OpenTelemetry "
                            "SDK provider; agentscope records its own spans only",
                            type(provider).__name__)
        rt = Runtime(config, writer, mode, tracer, propagation.parse_environment(os.environ))
        if config.propagate_threads:
            propagation.install_thread_propagation()
        children.current_node = _current_node
        children.fill_env = propagation.fill_env if config.propagate_subprocess else None
        children.install()
        children.enabled = True
        if not _atexit_registered:
            atexit.register(_at_exit)
            _atexit_registered = True
        state.active = rt
        hz, full = _collect_rate(collect, os.environ.get("AGENTSCOPE_COLLECT"))
        if hz:
            rt.sampler = _start_sampler(config.trace_dir, hz, full)
        return rt


def _collect_rate(collect: "bool | float", env: Optional[str]) -> tuple:
    """(rate in Hz or 0, whether to read every source or only probe this process's GIL).
    ``AGENTSCOPE_COLLECT``: ``1`` or a rate, ``gil`` (the probe only: set by ``agentscope run``
    and for the children of a sampling process), or ``0``."""
    if env is not None and env.strip():
        value = env.strip().lower()
        if value in ("0", "false", "no", "off"):
            return 0.0, False
        if value == "gil":
            return 10.0, False
        try:
            return (float(value) if float(value) > 1 else 10.0), True
        except ValueError:
            return 10.0, True
    if collect is True:
        return 10.0, True
    return (float(collect), True) if collect else (0.0, False)


def _start_sampler(directory: Path, hz: float, full: bool = True) -> Any:
    """The in-process sampler (never lets a failure reach the application). ``full``: every
    source; else only the GIL probe of this process (another sampler watches the rest)."""
    try:
        from ..collectors import Sampler, default_sources

        sources, absent = default_sources(pid=os.getpid()) if full else ([], [])
        sampler = Sampler(directory, sources, absent, interval_s=1.0 / hz, in_process=True,
                          tag="collector" if full else "gil", loops=state.loops,
                          holder=state.holder).start()
        propagation.thread_start_hooks.append(sampler.wake)
        # child processes are in this process's tree and on this host: they only probe their
        # own interpreter lock (an instrumented child inherits the environment)
        global _collect_env_before
        if _collect_env_before is _UNSET:
            _collect_env_before = os.environ.get("AGENTSCOPE_COLLECT")
        os.environ["AGENTSCOPE_COLLECT"] = "gil"
        return sampler
    except Exception as e:
        log_once("collect", "agentscope: cannot start the counter sampler (%r); spans are "
                 "recorded without counters", e)
        return None


def shutdown(timeout_s: float = 5.0) -> None:
    """Flush and close the trace files; instrumentation becomes a no-op until the next init."""
    with _init_lock:
        rt = state.active
        if rt is None:
            return
        state.active = None
        children.enabled = False
        if rt.sampler is not None:
            try:
                if rt.sampler.wake in propagation.thread_start_hooks:
                    propagation.thread_start_hooks.remove(rt.sampler.wake)
                rt.sampler.stop(min(timeout_s, 2.0))
            except Exception as e:  # never raise at shutdown
                log_once("sampler-stop", "agentscope: error stopping the sampler (%r)", e)
            _restore_collect_env()
        try:
            rt.writer.shutdown(timeout_s)
        except Exception as e:  # never raise at shutdown
            log_once("shutdown", "agentscope: error while flushing traces (%r)", e)


def _restore_collect_env() -> None:
    global _collect_env_before
    if _collect_env_before is _UNSET:
        return
    if _collect_env_before is None:
        os.environ.pop("AGENTSCOPE_COLLECT", None)
    else:
        os.environ["AGENTSCOPE_COLLECT"] = _collect_env_before
    _collect_env_before = _UNSET


def flush(timeout_s: Optional[float] = None) -> bool:
    """Write everything recorded so far (without stopping)."""
    rt = state.active
    return True if rt is None else rt.writer.flush(timeout_s)


def _at_exit() -> None:
    shutdown(2.0)


# ---- our spans ------------------------------------------------------------------------------
class SdkHandle:
    """A span created by the application's SDK tracer, plus our resource accounting."""

    __slots__ = ("span", "token", "ident", "ru0", "cpu0", "proc0", "start_ns", "child_cpu_ns",
                 "children", "child_majflt", "child_ivcsw", "child_vcsw", "workers_cpu_ns",
                 "child_run_delay_ns", "child_own_cpu_ns", "loop_task", "loop_prev",
                 "end_ns", "local_parent", "loop")

    def fail(self, exc: BaseException) -> None:
        self.span.record_exception(exc)
        self.span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"[:1024]))

    def finish(self) -> None:
        if self.token is not None:
            _detach(self.token)
        if self.loop_task is not None:
            state.leave_loop_span(self)
        _sdk_nodes.pop(id(self.span), None)
        attrs: dict = {}
        ru0 = self.ru0
        same_thread = threading.get_ident() == self.ident
        if same_thread:
            attrs[ACCOUNTING["thread_cpu_ns"]] = cpu = time.thread_time_ns() - self.cpu0
            if time.time_ns() - self.start_ns >= RUSAGE_MIN_SPAN_NS:
                other = other_threads_cpu(self.proc0, time.process_time_ns(), cpu)
                if other is not None:
                    attrs[OTHER_THREADS_CPU] = other
        ru1 = thread_rusage() if ru0 is not None and same_thread else None
        # the span ends when its counters were read: what follows (its attributes, the SDK's
        # end) is after it, as lean spans have it
        end_ns = time.time_ns()
        if ru1 is not None:
            a = ACCOUNTING
            attrs[a["vcsw"]] = ru1.ru_nvcsw - ru0.ru_nvcsw
            attrs[a["ivcsw"]] = ru1.ru_nivcsw - ru0.ru_nivcsw
            attrs[a["minflt"]] = ru1.ru_minflt - ru0.ru_minflt
            attrs[a["majflt"]] = ru1.ru_majflt - ru0.ru_majflt
            if ru1.ru_majflt != ru0.ru_majflt:
                attrs[SYSTEM_CPU] = round((ru1.ru_stime - ru0.ru_stime) * 1e9)
        attrs[ACCOUNTING["child_cpu_ns"]] = self.child_cpu_ns
        attrs[ACCOUNTING["children"]] = self.children
        attrs[ACCOUNTING["child_majflt"]] = self.child_majflt
        if self.children:
            attrs[CHILD_IVCSW], attrs[CHILD_VCSW] = self.child_ivcsw, self.child_vcsw
            attrs[CHILD_RUN_DELAY] = self.child_run_delay_ns
            attrs[CHILD_OWN_CPU] = self.child_own_cpu_ns
        if self.workers_cpu_ns:
            attrs[WORKERS_CPU] = self.workers_cpu_ns
        if self.loop:
            attrs["agentscope.cpu.scope"] = "loop"
        self.end_ns = 1
        self.span.set_attributes(attrs)
        self.span.end(end_time=end_ns)


_sdk_nodes: dict = {}  # id(SDK span) -> its SdkHandle, while open (for child accounting)


def begin(rt: Runtime, name: str, stage: Optional[str], attrs: Mapping[str, Any],
          loop: bool = False, new_trace: bool = False) -> Any:
    """Start a span, make it current, and return its handle.

    The handle has ``span``, ``token``, ``fail(exc)`` and ``finish()`` (which makes the previous
    span current again and ends this one). In lean mode it is the :class:`LeanSpan` itself.
    """
    ctx = _get_current()
    parent = ctx.get(_SPAN_KEY)
    if parent is None or (type(parent) is not LeanSpan and not parent.get_span_context().is_valid):
        parent = rt.default_parent
    if rt.lean:
        if new_trace:
            handle = _begin_new_trace(ctx, name, stage, attrs, parent, loop)
        else:
            handle = LeanSpan(name, stage, attrs, parent, "internal", (), None, loop)
            handle.token = _enter(handle, ctx)
    else:
        handle = _begin_sdk(rt, ctx, name, stage, attrs, parent, loop, new_trace)
    if loop:  # the sampler names the span that holds a loop it finds late
        state.enter_loop_span(handle)
    return handle


def _begin_new_trace(ctx: Any, name: str, stage: Optional[str], attrs: Mapping[str, Any],
                     parent: Optional[trace.Span], loop: bool) -> LeanSpan:
    links = ()
    if parent is not None and parent.get_span_context().is_valid:
        sc = parent.get_span_context()
        links = (SpanLink(f"{sc.trace_id:032x}", f"{sc.span_id:016x}", {}),)
    span = LeanSpan(name, stage, attrs, parent, "internal", links, None, loop, True)
    span.token = _enter(span, ctx)
    return span


def _begin_sdk(rt: Runtime, ctx: Any, name: str, stage: Optional[str],
               attrs: Mapping[str, Any], parent: Optional[trace.Span], loop: bool,
               new_trace: bool) -> SdkHandle:
    all_attrs = dict(attrs)
    if stage is not None:
        all_attrs["agentscope.stage"] = stage
    all_attrs[ACCOUNTING["tid"]] = native_thread_id()
    links = None
    if new_trace and parent is not None:
        links = [trace.Link(parent.get_span_context())]
        parent_ctx = otel_context.Context()
    else:
        parent_ctx = trace.set_span_in_context(parent, ctx) if parent is not None else ctx
    h = SdkHandle()
    h.ident = threading.get_ident()
    # the counters first, then the span's start time, given to the SDK: the SDK's own work in
    # start_span falls inside both the CPU reading and the wall time, not in the wall time
    # alone (a 50 us stage would read as 60 % off-CPU: waiting)
    h.ru0 = thread_rusage()
    h.cpu0 = time.thread_time_ns()
    h.proc0 = time.process_time_ns()
    h.start_ns = time.time_ns()
    span = rt.tracer.start_span(name, context=parent_ctx, attributes=all_attrs, links=links,
                                start_time=h.start_ns)
    h.span = span
    h.child_cpu_ns = h.children = h.child_majflt = h.child_ivcsw = h.child_vcsw = h.end_ns = 0
    h.workers_cpu_ns = h.child_run_delay_ns = h.child_own_cpu_ns = 0
    h.loop_task = h.loop_prev = None
    h.loop = loop
    h.local_parent = None if new_trace or parent is None else _sdk_nodes.get(id(parent))
    _sdk_nodes[id(span)] = h
    h.token = _enter(span, ctx)
    return h


def _current_node() -> Any:
    span = _get_current().get(_SPAN_KEY)
    if type(span) is LeanSpan:
        return span
    return _sdk_nodes.get(id(span)) if span is not None else None
