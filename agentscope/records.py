"""The flat records that flow between layers: one span, one counter sample.

A record is immutable. Its fields are the columns of the store's tables (ARCHITECTURE §5)
and of the line-delimited capture files (docs/file-formats.md).
"""

from __future__ import annotations

from typing import Any, Mapping, NamedTuple, Optional


class SpanEvent(NamedTuple):
    name: str
    time_ns: int
    attrs: Mapping[str, Any]


class SpanLink(NamedTuple):
    trace_id: str
    span_id: str
    attrs: Mapping[str, Any]


class SpanRecord(NamedTuple):
    """One finished span. Times are Unix epoch nanoseconds; ids are lowercase hex.

    Resource accounting (``thread_cpu_ns`` ... ``child_majflt``) is ``None`` where it was not
    measured: a span from foreign instrumentation in SDK mode, or a span that started on one
    thread and ended on another.
    """

    trace_id: str  # 32 hex digits
    span_id: str  # 16 hex digits
    parent_span_id: Optional[str]  # 16 hex digits, None for a root
    name: str
    stage: Optional[str]  # agentscope.vocab.Stage value, None when not instrumented by us
    kind: str  # internal | server | client | producer | consumer
    start_ns: int
    end_ns: int
    status: str  # unset | ok | error
    status_message: Optional[str]
    service: Optional[str]
    host: Optional[str]
    pid: Optional[int]
    tid: Optional[int]  # OS thread id (gettid) the span started on
    thread_cpu_ns: Optional[int]  # on-CPU time of that thread during the span (user + system)
    child_cpu_ns: Optional[int]  # CPU of child processes the span waited for (user + system)
    children: Optional[int]  # how many child processes it waited for
    vcsw: Optional[int]  # voluntary context switches of the thread (it blocked)
    ivcsw: Optional[int]  # involuntary context switches (it was preempted)
    minflt: Optional[int]  # minor page faults of the thread
    majflt: Optional[int]  # major page faults of the thread (read from disk/swap)
    child_majflt: Optional[int]  # major page faults of the waited-for child processes
    attrs: Mapping[str, Any]
    events: tuple = ()
    links: tuple = ()

    @property
    def duration_ns(self) -> int:
        return self.end_ns - self.start_ns


class SampleRecord(NamedTuple):
    """One counter reading: ``metric`` of ``source`` (on ``device``, if any) at ``ts_ns``."""

    ts_ns: int
    host: Optional[str]
    pid: Optional[int]
    source: str
    device: Optional[str]
    metric: str
    value: float
