"""Carrying the current span across threads and processes.

Threads: Python's ``contextvars`` (which OpenTelemetry's context uses) do not follow a new
thread or a ``ThreadPoolExecutor`` job. :func:`install_thread_propagation` makes them: a
``threading.Thread`` runs in a copy of the context its ``start()`` was called from, and an
executor job in a copy of the context its ``submit()`` was called from (so ``executor.map``
and ``loop.run_in_executor`` are covered too). This is what ``asyncio.to_thread`` already
does. Code that starts threads by other means can use :func:`wrap`.

Processes: W3C trace context. :func:`traceparent` formats a span context as the
``TRACEPARENT`` value; :func:`parse_environment` reads it back in the child.
"""

from __future__ import annotations

import concurrent.futures
import contextvars
import functools
import os
import threading
import time
from typing import Any, Callable, Mapping, Optional, TypeVar

from opentelemetry import trace
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from .._log import log
from . import children, state

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
    fill_env(out)
    return out
