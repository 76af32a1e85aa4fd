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


# ---- what a record may hold ---------------------------------------------------------------
# The store keeps these in BIGINT/INTEGER columns and the analysis adds and subtracts them:
# a value past these bounds is not a measurement (a corrupt line, another unit), and would
# overflow the arithmetic (or the column) instead of being analysed. Every reader checks its
# records with :func:`span_problem` / :func:`sample_problem` (docs/bad-input.md).
INT32_MAX = (1 << 31) - 1
INT64_MAX = (1 << 63) - 1
# Epoch nanoseconds before this (1973-03-03) are almost surely another unit given as ns
MIN_EPOCH_NS = 10**17
# ... and after this (2116-02-20) not a time at all: far below INT64_MAX, so that a span's
# end plus its duration, or a time plus a what-if's delay, cannot overflow 64 bits
MAX_EPOCH_NS = 1 << 62
# CPU nanoseconds, context switches and page faults of one span: 2^60 ns is 36 CPU-years;
# two of them added (a span's own and its children's) stay far inside 64 bits
MAX_COUNT = 1 << 60
KINDS = ("internal", "server", "client", "producer", "consumer")
STATUSES = ("unset", "ok", "error")
# SpanRecord's integer columns: (name, smallest, largest value). Ids (pid, tid) are only
# compared, so any value of their column's type is kept; counts are added up, so they are
# counts: from 0 to MAX_COUNT.
INT_FIELDS = (("pid", -INT32_MAX - 1, INT32_MAX), ("tid", -INT64_MAX - 1, INT64_MAX),
              ("thread_cpu_ns", 0, MAX_COUNT), ("child_cpu_ns", 0, MAX_COUNT),
              ("children", 0, INT32_MAX), ("vcsw", 0, MAX_COUNT), ("ivcsw", 0, MAX_COUNT),
              ("minflt", 0, MAX_COUNT), ("majflt", 0, MAX_COUNT), ("child_majflt", 0, MAX_COUNT))
_HEX_DIGITS = frozenset("0123456789abcdef")
# where INT_FIELDS are in a SpanRecord (pid ... child_majflt, in that order)
_INTS = slice(SpanRecord._fields.index("pid"), SpanRecord._fields.index("attrs"))
assert SpanRecord._fields[_INTS] == tuple(f[0] for f in INT_FIELDS)


def unit_problem(ns: int) -> Optional[str]:
    """Why a timestamp that should be Unix epoch nanoseconds is not (None if it looks fine;
    0, "no time", is the caller's to judge)."""
    if ns >= MIN_EPOCH_NS or ns == 0:
        return None
    unit = "seconds" if ns < 10**11 else "milliseconds" if ns < 10**14 else "microseconds"
    return f"timestamp {ns} looks like {unit} since the epoch, not nanoseconds"


def _is_int(value: Any) -> bool:
    return type(value) is int  # bool (an int subclass) is not a count


def _hex_id(value: Any, digits: int) -> bool:
    return (isinstance(value, str) and len(value) == digits and _HEX_DIGITS.issuperset(value)
            and value != "0" * digits)


def time_problem(name: str, ns: Any) -> Optional[str]:
    """Why ``ns`` is not a usable time for field ``name`` (None: it is)."""
    if not _is_int(ns):
        return f"{name} must be an integer (Unix epoch ns); got {ns!r}"
    if ns == 0:
        return f"{name} is 0: the span has no start time" if "start" in name else \
            f"{name} is 0: no time"
    if ns < 0:
        return f"{name} must not be negative; got {ns}"
    if ns > MAX_EPOCH_NS:
        return f"{name} {ns} is past 2116: not epoch nanoseconds"
    units = unit_problem(ns)
    return f"{name}: {units}" if units else None


def span_problem(r: SpanRecord) -> Optional[str]:
    """Why the store cannot take span ``r`` as it is (None: it can). The one check every
    reader's records pass (and the loader's last one before an insert): the ids are ours,
    the strings are strings, the integers fit their columns and the analysis' arithmetic,
    the times are epoch nanoseconds with the end not before the start, a span has a start
    time, and events and links are what their tuples should hold."""
    if not _hex_id(r.trace_id, 32):
        return f"trace_id must be 32 lowercase hex digits, not all zero; got {r.trace_id!r}"
    if not _hex_id(r.span_id, 16):
        return f"span_id must be 16 lowercase hex digits, not all zero; got {r.span_id!r}"
    if r.parent_span_id is not None and not (
            isinstance(r.parent_span_id, str) and len(r.parent_span_id) == 16
            and _HEX_DIGITS.issuperset(r.parent_span_id)):
        return f"parent_span_id must be null or 16 lowercase hex digits; got {r.parent_span_id!r}"
    if not isinstance(r.name, str):
        return f"name must be a string; got {r.name!r}"
    for field in ("stage", "status_message", "service", "host"):
        value = getattr(r, field)
        if value is not None and not isinstance(value, str):
            return f"{field} must be a string or null; got {value!r}"
    if r.kind not in KINDS:
        return f"kind must be one of {', '.join(KINDS)}; got {r.kind!r}"
    if r.status not in STATUSES:
        return f"status must be one of {', '.join(STATUSES)}; got {r.status!r}"
    problem = time_problem("start_ns", r.start_ns)
    if problem:
        return problem
    if not _is_int(r.end_ns):
        return f"end_ns must be an integer (Unix epoch ns); got {r.end_ns!r}"
    if r.end_ns < r.start_ns:
        return f"end_ns {r.end_ns} is before start_ns {r.start_ns}"
    if r.end_ns > MAX_EPOCH_NS:
        return f"end_ns {r.end_ns} is past 2116: not epoch nanoseconds"
    for value, (field, smallest, largest) in zip(r[_INTS], INT_FIELDS):
        if value is not None and (type(value) is not int or not smallest <= value <= largest):
            return f"{field} must be null or an integer from {smallest} to {largest}; " \
                   f"got {value!r}"
    if not isinstance(r.attrs, Mapping):
        return f"attrs must be an object; got {type(r.attrs).__name__}"
    if not isinstance(r.events, tuple) or not isinstance(r.links, tuple):
        return "events and links must be lists"
    for i, e in enumerate(r.events):
        if not isinstance(e, SpanEvent) or not isinstance(e.name, str) \
                or not isinstance(e.attrs, Mapping):
            return f"events[{i}] must have a string name and an object of attributes"
        if not _is_int(e.time_ns) or not 0 <= e.time_ns <= MAX_EPOCH_NS:
            return f"events[{i}].time_ns must be an integer from 0 to {MAX_EPOCH_NS}; " \
                   f"got {e.time_ns!r}"
    for i, k in enumerate(r.links):
        if not isinstance(k, SpanLink) or not isinstance(k.trace_id, str) \
                or not isinstance(k.span_id, str) or not isinstance(k.attrs, Mapping):
            return f"links[{i}] must have string ids and an object of attributes"
    return None


def sample_problem(s: SampleRecord) -> Optional[str]:
    """Why the store cannot take sample ``s`` (None: it can): the counterpart of
    :func:`span_problem` for the ``samples`` table."""
    if not _is_int(s.ts_ns) or not 0 <= s.ts_ns <= MAX_EPOCH_NS:
        return f"ts_ns must be an integer from 0 to {MAX_EPOCH_NS}; got {s.ts_ns!r}"
    if not isinstance(s.metric, str) or not s.metric:
        return f"metric must be a non-empty string; got {s.metric!r}"
    if not isinstance(s.source, str):
        return f"source must be a string; got {s.source!r}"
    for field in ("host", "device"):
        value = getattr(s, field)
        if value is not None and not isinstance(value, str):
            return f"{field} must be a string or null; got {value!r}"
    if s.pid is not None and not (_is_int(s.pid) and -INT32_MAX - 1 <= s.pid <= INT32_MAX):
        return f"pid must be null or a 32-bit integer; got {s.pid!r}"
    if not isinstance(s.value, float):
        return f"value must be a number or null; got {s.value!r}"
    return None
