"""Carrying the current span across threads and processes.

Threads: Python's ``contextvars`` (which OpenTelemetry's context uses) do not follow a new
thread or a ``ThreadPoolExecutor`` job. :func:`install_thread_propagation` makes them: a
``threading.Thread`` runs in a copy of the context its ``start()`` was called from, and an
executor job in a copy of the context its ``submit()`` was called from (so ``executor.map``
and ``loop.run_in_executor`` are covered too). This is what ``asyncio.to_thread`` already
does. Code that starts threads by other means can use :func:`wrap`.

Pool waits: a job handed to a ``ThreadPoolExecutor`` from inside a span while every worker
of the pool was taken (as many unfinished jobs ahead of it as the pool has workers), that
then waited for a worker (from ``submit()`` to the moment a worker started it) at least
:data:`POOL_WAIT_MIN_NS`, is recorded as a ``queue`` span of that wait (``pool.wait``, or
``<thread_name_prefix>.wait``), a child of the submitting span, with the pool's size, its
busy workers and the jobs queued before it at submit. A job that starts at once records
nothing; nor does one that waited only for a new worker thread to start. Such a span used
no CPU: it is written with zero on-CPU time and no thread.

Processes: W3C trace context. :func:`traceparent` formats a span context as the
``TRACEPARENT`` value; :func:`parse_environment` reads it back in the child.
"""

from __future__ import annotations

import concurrent.futures
import contextvars
import functools
import os
import re
import threading
import time
from typing import Any, Callable, Mapping, Optional, TypeVar

from opentelemetry import trace
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from .. import semconv
from .._log import log, log_once
from ..vocab import Stage
from . import children, otelctx, state
from .span import LeanSpan

F = TypeVar("F", bound=Callable[..., Any])

_installed = False


def wrap(fn: F) -> F:
    """Return ``fn`` bound to the current context (span), to run later on any thread.

    Each call runs in its own copy of the captured context, so the wrapper may be called
    concurrently.
    """
    captured = contextvars.copy_context()

    @functools.wraps(fn)
    def in_context(*args: Any, **kwargs: Any) -> Any:
        return captured.copy().run(fn, *args, **kwargs)

    return in_context  # type: ignore[return-value]


# called (no arguments) whenever a thread is started, once install_thread_propagation() ran:
# the in-process sampler's GIL probe wakes up (collectors.sampler.Sampler.wake)
thread_start_hooks: list = []


def install_thread_propagation() -> None:
    """Make ``threading.Thread`` and ``ThreadPoolExecutor`` carry the context (once)."""
    global _installed
    if _installed:
        return
    _installed = True

    thread_start = threading.Thread.start
    bootstrap_inner = getattr(threading.Thread, "_bootstrap_inner", None)
    submit = concurrent.futures.ThreadPoolExecutor.submit

    @functools.wraps(thread_start)
    def start(self: threading.Thread) -> None:
        try:
            self._agentscope_context = contextvars.copy_context()  # type: ignore[attr-defined]
            self._agentscope_node = children.current_node()  # type: ignore[attr-defined]
            for hook in thread_start_hooks:
                hook()
        except Exception:
            pass
        return thread_start(self)

    if bootstrap_inner is not None:
        @functools.wraps(bootstrap_inner)
        def _bootstrap_inner(self: threading.Thread) -> None:
            ctx = getattr(self, "_agentscope_context", None)
            if ctx is None:
                return bootstrap_inner(self)
            self._agentscope_context = None  # type: ignore[attr-defined]
            node, self._agentscope_node = getattr(self, "_agentscope_node", None), None
            return ctx.run(_credited, node, bootstrap_inner, self)

        threading.Thread._bootstrap_inner = _bootstrap_inner  # type: ignore[attr-defined]
        threading.Thread.start = start  # type: ignore[method-assign]
    else:  # pragma: no cover - other Python implementations
        log.info("agentscope: threading.Thread is not patched; use agentscope.wrap()")

    @functools.wraps(submit)
    def submit_in_context(self: Any, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        node = children.current_node()
        if state.active is not None:
            job = _pool_job(self, node)
            if job is not None:
                try:
                    future = submit(self, contextvars.copy_context().run, job.run, fn, *args,
                                    **kwargs)
                except BaseException:  # refused (shut down): it will never run
                    job.jobs.discard(job)
                    raise
                job.future = future
                return future
        if node is None:
            return submit(self, contextvars.copy_context().run, fn, *args, **kwargs)
        return submit(self, contextvars.copy_context().run, _credited, node, fn, *args,
                      **kwargs)

    concurrent.futures.ThreadPoolExecutor.submit = submit_in_context  # type: ignore[method-assign]


def _credited(node: Any, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
    """Run ``fn`` on this (worker) thread and credit its CPU time to the span ``node`` that
    handed it over (None: no span), while that span is open: the span waited for its
    workers' computing as for a child process's (docs/analysis.md, worker threads)."""
    if node is None:
        return fn(*args, **kwargs)
    cpu0 = time.thread_time_ns()
    try:
        return fn(*args, **kwargs)
    finally:
        try:
            children.credit_workers(node, time.thread_time_ns() - cpu0)
        except Exception:  # never break the job
            pass


# ---- pool waits ----------------------------------------------------------------------------
# A pool job submitted from inside a span, when every worker of the pool was taken, that then
# waited at least this long for one gets a `queue` span of its wait; shorter waits cannot be
# what slowed a task. A job that found a worker free costs a set insertion and removal (about
# 1 us in all, against the tens of us of a pool's hand-over) and records nothing
POOL_WAIT_MIN_NS = 1_000_000
POOL_WAIT_NAME = "pool.wait"  # ... or "<thread_name_prefix>.wait" for a pool with a prefix
POOL_SIZE = "agentscope.pool.size"  # the pool's max_workers
POOL_BUSY = "agentscope.pool.busy"  # its workers running a job when this one was submitted
POOL_QUEUED = "agentscope.pool.queued"  # jobs waiting for a worker ahead of it at submit
# the prefix CPython gives a pool that was given none
_DEFAULT_PREFIX = re.compile(r"ThreadPoolExecutor-\d+\Z")
_JOBS_ATTR = "_agentscope_jobs"  # on an executor: its jobs submitted and not yet finished
_time_ns = time.time_ns
_current_span = otelctx.current_span


class _PoolJob:
    """A job handed to a pool while tracing was on. It is one of the pool's unfinished jobs
    from its submit to its end (so the jobs ahead of the next one are known exactly, including
    one a worker has just taken); submitted inside a span (``parent``) while every worker was
    taken, it times its wait for one."""

    __slots__ = ("jobs", "node", "parent", "future", "submit_ns", "size", "busy_at_submit",
                 "queued_at_submit", "name")

    def __init__(self, executor: Any, jobs: set, node: Any, parent: Any) -> None:
        self.jobs, self.node, self.parent, self.future = jobs, node, None, None
        if parent is not None:
            size = executor._max_workers
            ahead = len(jobs)
            if ahead >= size:
                queued = executor._work_queue.qsize()
                if not queued:  # no backlog: cheap to drop jobs cancelled before they ran
                    ahead = _forget_cancelled(jobs)
                if ahead >= size:  # every worker taken: it will wait, unless one frees up
                    self.parent, self.size = parent, size
                    self.busy_at_submit = min(max(ahead - queued, 0), size)
                    self.queued_at_submit = queued
                    self.name = pool_wait_name(executor)
                    self.submit_ns = _time_ns()
        jobs.add(self)  # set.add/discard are atomic: no lock on the job's path

    def run(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        try:
            parent = self.parent
            if parent is not None:
                self.parent = None
                try:
                    started = _time_ns()
                    if started - self.submit_ns >= POOL_WAIT_MIN_NS:
                        _record_wait(self, parent, started)
                except Exception:  # never break the job
                    pass
            node = self.node
            if node is None:
                return fn(*args, **kwargs)
            return _credited(node, fn, *args, **kwargs)
        finally:
            self.jobs.discard(self)


def _forget_cancelled(jobs: set) -> int:
    """Drop the jobs whose futures were cancelled before they ran (their ``run`` never comes);
    how many jobs are left."""
    for job in list(jobs):
        future = job.future
        if future is not None and future.cancelled():
            jobs.discard(job)
    return len(jobs)


def _pool_job(executor: Any, node: Any) -> Optional[_PoolJob]:
    """The job wrapper for a submit while tracing is on (None: leave the job as it was)."""
    try:
        jobs = executor.__dict__.get(_JOBS_ATTR)
        if jobs is None:
            jobs = executor.__dict__.setdefault(_JOBS_ATTR, set())
        span = _current_span()
        if span is not None and type(span) is not LeanSpan and \
                not span.get_span_context().is_valid:
            span = None
        return _PoolJob(executor, jobs, node, span)
    except Exception as e:  # an executor unlike CPython's: the job runs as before
        log_once("pool-job", "agentscope: cannot time a thread-pool job's wait (%r)", e)
        return None


def pool_wait_name(executor: Any) -> str:
    """``pool.wait``, or ``<thread_name_prefix>.wait`` for a pool given a prefix."""
    prefix = getattr(executor, "_thread_name_prefix", None) or ""
    if not prefix or _DEFAULT_PREFIX.match(prefix):
        return POOL_WAIT_NAME
    return f"{prefix}.wait"


def _record_wait(job: _PoolJob, parent: Any, started_ns: int) -> None:
    """Record the ``queue`` span of ``job``'s wait, from its submit to ``started_ns``, under
    ``parent`` (the submitting context's span). Never raises."""
    try:
        rt = state.active
        if rt is None:
            return
        name = job.name
        attrs = {POOL_SIZE: int(job.size), POOL_BUSY: job.busy_at_submit,
                 POOL_QUEUED: job.queued_at_submit}
        if rt.lean:
            span = LeanSpan(name, Stage.QUEUE.value, attrs, parent, "internal", (),
                            job.submit_ns)
            # the wait used no thread and no CPU: not this worker's, whose readings end()
            # would otherwise take
            span.ident = span.tid = None
            span.thread_cpu_ns = 0
            span.end(started_ns)
        else:
            attrs[semconv.STAGE] = Stage.QUEUE.value
            attrs[semconv.ACCOUNTING_ATTRIBUTES["thread_cpu_ns"]] = 0
            span = rt.tracer.start_span(name, context=trace.set_span_in_context(parent),
                                        attributes=attrs, start_time=job.submit_ns)
            span.end(end_time=started_ns)
    except Exception as e:  # never break the job
        log_once("pool-wait", "agentscope: cannot record a thread-pool wait (%r)", e)


# ---- processes ------------------------------------------------------------------------------
_propagator = TraceContextTextMapPropagator()


def traceparent(span_context: trace.SpanContext) -> str:
    return (f"00-{span_context.trace_id:032x}-{span_context.span_id:016x}-"
            f"{int(span_context.trace_flags):02x}")


def parse_environment(environ: Mapping[str, str]) -> Optional[trace.Span]:
    """The remote parent named by ``TRACEPARENT``/``TRACESTATE``, or None (warns if malformed)."""
    value = environ.get("TRACEPARENT")
    if not value:
        return None
    carrier = {"traceparent": value}
    if environ.get("TRACESTATE"):
        carrier["tracestate"] = environ["TRACESTATE"]
    span = trace.get_current_span(_propagator.extract(carrier))
    if not span.get_span_context().is_valid:
        log.warning("agentscope: ignoring malformed TRACEPARENT=%r (expected "
                    "00-<32 hex>-<16 hex>-<2 hex>)", value)
        return None
    return span


def fill_env(env: dict) -> None:
    """Add the current span's trace context and the trace directory to a child's environment.

    A ``TRACEPARENT`` the caller set explicitly (different from the one this process inherited)
    is kept.
    """
    rt = state.active
    if rt is None:
        return
    sc = trace.get_current_span().get_span_context()
    if sc.is_valid and env.get("TRACEPARENT") in (None, os.environ.get("TRACEPARENT")):
        env["TRACEPARENT"] = traceparent(sc)
        if sc.trace_state:
            env["TRACESTATE"] = sc.trace_state.to_header()
        else:
            env.pop("TRACESTATE", None)
    if not env.get("AGENTSCOPE_TRACE_DIR"):  # unset or empty (empty counts as unset)
        env["AGENTSCOPE_TRACE_DIR"] = str(rt.trace_dir)


def trace_env(env: Optional[Mapping[str, str]] = None) -> dict:
    """A copy of ``env`` (default ``os.environ``) that lets a child process continue the trace."""
    out = dict(os.environ if env is None else env)
    try:
        fill_env(out)
    except Exception as e:  # the child then starts a trace of its own
        log_once("trace-env", "agentscope: cannot pass the trace context on (%r)", e)
    return out
