"""The process-wide tracing state, read on every span. ``active`` is None while tracing is off.

Kept in its own tiny module so the hot path reads one module attribute and nothing imports
in a cycle.
"""

from __future__ import annotations

import weakref
from asyncio import current_task
from typing import Any, Optional

active: Optional[Any] = None  # an agentscope.capture.runtime.Runtime while tracing is on
# agentscope.init() was called in this process (tracing may since have been shut down, or been
# turned off by the environment): instrumented code without it is told once that nothing is
# recorded
init_called = False

# the asyncio event loops instrumented code ran on: the in-process sampler probes their lag
loops: "weakref.WeakSet[Any]" = weakref.WeakSet()


# asyncio task -> the innermost open span it started on its loop: what the sampler names when
# it finds the loop held (holder)
task_spans: "weakref.WeakKeyDictionary[Any, Any]" = weakref.WeakKeyDictionary()


def enter_loop_span(handle: Any) -> None:
    """``handle`` (a span begun on a running loop) is now its task's innermost span; the loop
    is remembered, for the sampler to probe."""
    task = current_task()
    if task is not None:
        loop = task.get_loop()
        if loop not in loops:
            loops.add(loop)
        handle.loop_task, handle.loop_prev = task, task_spans.get(task)
        task_spans[task] = handle


def leave_loop_span(handle: Any) -> None:
    """``handle`` ended: its task's innermost span is the one before it again."""
    task = handle.loop_task
    if task is not None:
        handle.loop_task = None
        if task_spans.get(task) is handle:
            if handle.loop_prev is None:
                task_spans.pop(task, None)
            else:
                task_spans[task] = handle.loop_prev
        handle.loop_prev = None


def holder(loop: Any) -> Optional[str]:
    """The span (16 hex digits) of the task running on ``loop`` now, or None: called from
    another thread (the sampler) while ``loop`` is held."""
    try:
        task = current_task(loop)
        handle = task_spans.get(task) if task is not None else None
        if handle is None:
            return None
        span = getattr(handle, "span", handle)
        return f"{span.get_span_context().span_id:016x}"
    except Exception:  # the loop closed meanwhile, a task gone: nothing to name
        return None
