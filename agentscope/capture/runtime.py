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
import math
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
from . import attributes as av
from . import children, otelctx, propagation, sdk_bridge, state
from .span import (RUSAGE_MIN_SPAN_NS, SYSTEM_CPU_MIN_NS, LeanSpan, LeanTracerProvider,
                   exception_attributes, native_thread_id, other_threads_cpu, thread_rusage)
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


DEFAULT_FLUSH_INTERVAL_S = 1.0
MIN_FLUSH_INTERVAL_S = 0.01  # a shorter interval would keep the writer's thread spinning
DEFAULT_MAX_QUEUE = 65536
MAX_COLLECT_HZ = 1000.0


def _ignoring(where: str, given: Any, why: str, using: Any) -> None:
    """The one warning for a setting that cannot be used (once per setting and process)."""
    log_once(f"config {where}", "agentscope: ignoring %s=%s (%s); using %s", where,
             av.safe_str(given if isinstance(given, str) else _repr(given), 200), why, using)


def _repr(value: Any) -> str:
    try:
        return repr(value)
    except BaseException:  # noqa: B036 - an application's object
        return f"<{type(value).__name__}>"


def _given(environ: Mapping[str, str], name: str, argument: Any, what: str) -> tuple:
    """(value, where it came from) of a setting: the environment variable ``name`` wins over
    the argument ``what``; (None, "") when neither is given."""
    raw = environ.get(name)
    if raw is not None and raw.strip():
        return raw, name
    if argument is not None:
        return argument, what
    return None, ""


def _number(value: Any) -> float:
    try:
        return float(value)
    except BaseException:  # noqa: B036 - not a number (whatever its __float__ does)
        return math.nan


def _flush_interval(environ: Mapping[str, str], argument: Any) -> float:
    given, where = _given(environ, "AGENTSCOPE_FLUSH_INTERVAL", argument, "flush_interval_s")
    if given is None:
        return DEFAULT_FLUSH_INTERVAL_S
    value = _number(given)
    if not (math.isfinite(value) and 0 < value <= threading.TIMEOUT_MAX):
        _ignoring(where, given, "not a positive, finite number of seconds",
                  DEFAULT_FLUSH_INTERVAL_S)
        return DEFAULT_FLUSH_INTERVAL_S
    if value < MIN_FLUSH_INTERVAL_S:
        _ignoring(where, given, "too short", MIN_FLUSH_INTERVAL_S)
        return MIN_FLUSH_INTERVAL_S
    return value


def _max_queue(environ: Mapping[str, str], argument: Any) -> int:
    given, where = _given(environ, "AGENTSCOPE_MAX_QUEUE", argument, "max_queue")
    if given is None:
        return DEFAULT_MAX_QUEUE
    value = _number(given)
    if not (math.isfinite(value) and value >= 1 and value == int(value)):
        _ignoring(where, given, "not a whole number of spans, at least 1", DEFAULT_MAX_QUEUE)
        return DEFAULT_MAX_QUEUE
    return int(value)


def _text(value: Any) -> Optional[str]:
    """A name given by the environment or the application, as clean text (None: not given).
    Lone surrogates (an environment that is not UTF-8) become ``?``."""
    if value is None:
        return None
    text = av.safe_str(value, av.NAME_LIMIT)
    if not text:
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "replace").decode("utf-8")
    return text


def _truthy(value: Optional[str]) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes", "on")


@dataclasses.dataclass(frozen=True)
class Config:
    """Settings of one :func:`init`. Environment variables override the arguments; a value
    that cannot be used falls back to its default, with one warning (docs/capture-safety.md)."""

    trace_dir: Path
    service: str
    flush_interval_s: float = DEFAULT_FLUSH_INTERVAL_S
    max_queue: int = DEFAULT_MAX_QUEUE
    propagate_threads: bool = True
    propagate_subprocess: bool = True
    disabled: bool = False

    @classmethod
    def resolve(cls, trace_dir: "str | os.PathLike[str] | None", service: Optional[str],
                flush_interval_s: Optional[float], max_queue: Optional[int],
                propagate_threads: bool, propagate_subprocess: bool,
                environ: Optional[Mapping[str, str]] = None) -> "Config":
        """Raises :class:`UnusableTraceDir` when the trace directory cannot be named as a
        path (nothing else raises)."""
        env = os.environ if environ is None else environ
        directory, where = _given(env, "AGENTSCOPE_TRACE_DIR", trace_dir, "trace_dir")
        try:
            path = Path("traces" if directory is None else directory).expanduser().resolve()
        except Exception as e:
            raise UnusableTraceDir(where, directory, f"not a usable path: {e}") from None
        name = (_text(env.get("AGENTSCOPE_SERVICE")) or _text(service)
                or _text(env.get("OTEL_SERVICE_NAME")) or _script_name())
        disabled = _truthy(env.get("AGENTSCOPE_DISABLED")) or _truthy(env.get("OTEL_SDK_DISABLED"))
        return cls(path, name, _flush_interval(env, flush_interval_s), _max_queue(env, max_queue),
                   bool(propagate_threads), bool(propagate_subprocess), disabled)


def _script_name() -> str:
    try:
        return _text(Path(sys.argv[0] if sys.argv and sys.argv[0] else "python").stem) \
            or "python"
    except Exception:
        return "python"


class UnusableTraceDir(Exception):
    """The trace directory cannot be written: tracing stays off (said once)."""

    def __init__(self, where: str, given: Any, why: str) -> None:
        super().__init__(why)
        self.where, self.given, self.why = where or "trace_dir", given, why


def _check_trace_dir(path: Path, where: str) -> None:
    """Make the trace directory, and raise :class:`UnusableTraceDir` if it cannot be
    written (a file, under /proc, read-only, no permission)."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise UnusableTraceDir(where, path, "it is not a directory") from None
    except OSError as e:
        raise UnusableTraceDir(where, path, e.strerror or str(e)) from None
    if not path.is_dir():
        raise UnusableTraceDir(where, path, "it is not a directory")
    if not os.access(path, os.W_OK | os.X_OK):
        raise UnusableTraceDir(where, path, "not writable")


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
    state.init_called = True
    try:
        with _init_lock:
            if state.active is not None:
                return state.active
            return _start(trace_dir, service, flush_interval_s, max_queue, tracer_provider,
                          propagate_threads, propagate_subprocess, collect)
    except UnusableTraceDir as e:
        given = av.safe_str(e.given, 1024)
        log_once(f"trace dir {given}", "agentscope: cannot write traces to %s (%s: %s); "
                 "tracing is off", given, e.where, e.why)
    except Exception as e:  # never into the application: it runs untraced
        log_once("init", "agentscope: cannot start tracing (%r); the program runs untraced", e)
    return None


def _start(trace_dir: Any, service: Any, flush_interval_s: Any, max_queue: Any,
           tracer_provider: Any, propagate_threads: bool, propagate_subprocess: bool,
           collect: Any) -> Optional[Runtime]:
    global _atexit_registered
    config = Config.resolve(trace_dir, service, flush_interval_s, max_queue,
                            propagate_threads, propagate_subprocess)
    if config.disabled:
        log.info("agentscope: tracing disabled by the environment")
        return None
    where = "AGENTSCOPE_TRACE_DIR" if os.environ.get("AGENTSCOPE_TRACE_DIR", "").strip() \
        else "trace_dir"
    _check_trace_dir(config.trace_dir, where)
    try:
        writer = SpanFileWriter(config.trace_dir, service=config.service,
                                flush_interval_s=config.flush_interval_s,
                                max_queue=config.max_queue)
    except OSError as e:
        raise UnusableTraceDir(where, config.trace_dir, e.strerror or str(e)) from None
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
    rt = Runtime(config, writer, mode, tracer, _remote_parent())
    try:
        if config.propagate_threads:
            propagation.install_thread_propagation()
        children.current_node = _current_node
        children.fill_env = propagation.fill_env if config.propagate_subprocess else None
        children.install()
        children.enabled = True
        if not _atexit_registered:
            atexit.register(_at_exit)
            _atexit_registered = True
    except BaseException:
        children.enabled = False
        raise
    state.active = rt
    try:
        hz, full = _collect_rate(collect, os.environ.get("AGENTSCOPE_COLLECT"))
        if hz:
            rt.sampler = _start_sampler(config.trace_dir, hz, full)
    except Exception as e:  # tracing runs on without counters
        log_once("collect", "agentscope: cannot start the counter sampler (%r); spans are "
                 "recorded without counters", e)
    return rt


def _remote_parent() -> Optional[trace.Span]:
    """The parent named by ``TRACEPARENT`` (None, with a warning, if it cannot be read)."""
    try:
        return propagation.parse_environment(os.environ)
    except Exception as e:
        _ignoring("TRACEPARENT", os.environ.get("TRACEPARENT"), f"unreadable: {e!r}",
                  "no parent")
        return None


def _collect_rate(collect: "bool | float", env: Optional[str]) -> tuple:
    """(rate in Hz or 0, whether to read every source or only probe this process's GIL).
    ``AGENTSCOPE_COLLECT``: ``1`` or a rate, ``gil`` (the probe only: set by ``agentscope run``
    and for the children of a sampling process), or ``0``. A rate that is not a positive
    number up to MAX_COLLECT_HZ is taken as 10 Hz, with a warning."""
    if env is not None and env.strip():
        value = env.strip().lower()
        if value in ("0", "false", "no", "off"):
            return 0.0, False
        if value == "gil":
            return 10.0, False
        if value in ("1", "true", "yes", "on"):
            return 10.0, True
        hz = _rate(value, "AGENTSCOPE_COLLECT")
        return (hz if hz > 1 else 10.0), True
    if collect is True:
        return 10.0, True
    if collect is None or collect is False:
        return 0.0, False
    if _number(collect) == 0:
        return 0.0, False
    return _rate(collect, "collect"), True


def _rate(given: Any, where: str) -> float:
    hz = _number(given)
    if not (math.isfinite(hz) and 0 < hz <= MAX_COLLECT_HZ):
        _ignoring(where, given, f"not a rate in Hz up to {MAX_COLLECT_HZ:g}", "10 Hz")
        return 10.0
    return hz


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
    """Flush and close the trace files; instrumentation becomes a no-op until the next init.
    Never raises."""
    timeout_s = _number(timeout_s)
    if not math.isfinite(timeout_s) or timeout_s < 0:
        timeout_s = 5.0
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
    """Write everything recorded so far (without stopping). Never raises."""
    rt = state.active
    if rt is None:
        return True
    timeout = _number(timeout_s) if timeout_s is not None else None
    if timeout is not None and not math.isfinite(timeout):
        timeout = None if timeout > 0 else 0.0
    return rt.writer.flush(timeout)


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
        """The exception event (ours, bounded and safe: the SDK's record_exception calls the
        exception's __str__ unguarded) and the error status. Never raises."""
        try:
            self.span.add_event("exception", exception_attributes(exc))
        except Exception as e:
            log_once("sdk-exception", "agentscope: cannot record an exception (%r)", e)
        try:
            self.span.set_status(Status(StatusCode.ERROR, av.describe(exc)))
        except Exception as e:
            log_once("sdk-status", "agentscope: cannot set a span's status (%r)", e)

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
            sys_ns = round((ru1.ru_stime - ru0.ru_stime) * 1e9)
            if ru1.ru_majflt != ru0.ru_majflt or sys_ns >= SYSTEM_CPU_MIN_NS:
                attrs[SYSTEM_CPU] = sys_ns
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
