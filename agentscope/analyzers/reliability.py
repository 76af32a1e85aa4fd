"""Critical-path time lost to timeouts and to retried failures.

An agent whose tool call hangs until its timeout, or whose model call fails and is made again,
is slow for a reason the resource classes (gpu, cpu, memory, io, queue) do not name: the time
was spent on work whose result was thrown away. Per task, :func:`lost_time` measures that
time on the task's critical path, from the store's two status columns
(``AnalysisInput.error`` and ``.timeout``: store/sql/analysis_input.sql).

The rules:

* **Timed out.** A span *timed out* when its status is error and its status message, the
  ``exception.type`` of one of its events or its ``error.type`` attribute names a timeout
  (TimeoutError, asyncio.TimeoutError, socket.timeout, ReadTimeout, ConnectTimeout, "timed
  out", "timeout", a gRPC DEADLINE_EXCEEDED; case-insensitive). A timeout raised inside a span
  usually propagates: its ancestors fail with the same exception. So the time counted is that
  of the *innermost* timed-out spans (those with no timed-out span below them): the
  critical-path time held by such a span or by any of its descendants is **timeout time**.
  An ancestor that failed only because a timeout propagated into it adds nothing of its own
  (its other children and its own time were not spent waiting for the timeout).
* **Retried.** A span is a *failed attempt* when its status is error and a *sibling* (same
  parent; for root spans: another root of the same trace) with the *same name* started at or
  after it ended: the work was made again. The critical-path time held by a failed attempt or
  by any of its descendants is **retry time**. An error that no later same-name sibling
  followed (the failure was given up on, or handled otherwise) is not retry time; neither is
  the successful attempt itself, nor the time between attempts (a back-off sleep has its own
  span, or is its parent's own time).
* The two overlap: a timed-out attempt that was retried counts in both (both say what it
  cost). Each section of the path counts at most once in each (a failed attempt nested inside
  another is not counted twice). Both are at most the task's duration.

Everything is numpy over all spans and sections at once; only failed spans are looked at one
by one. The engine calls :func:`lost_time` with its section arrays (task, span row, start,
end, as :func:`~.critical_path.walk_many` gives them): ``TaskResult.timeout_ns`` and
``.retry_ns``, ``Summary.timeout_share`` and ``.retry_share``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

MAX_DEPTH = 10_000  # parent chains are followed at most this far (a parent cycle ends there)


def failed_attempts(inp: Any) -> np.ndarray:
    """Per span: it failed and a same-name sibling started at or after it ended (bool).

    ``inp``: an AnalysisInput, or anything with its columns ``parent_idx``, ``name``,
    ``start_ns``, ``end_ns``, ``error`` (and ``trace_no``, which groups root spans; without
    it every root is one family)."""
    n = len(inp.start_ns)
    out = np.zeros(n, dtype=bool)
    error = np.asarray(inp.error, dtype=bool)
    if not n or not error.any():
        return out
    parent = np.asarray(inp.parent_idx, dtype=np.int64)
    trace_no = getattr(inp, "trace_no", None)
    trace_no = np.zeros(n, dtype=np.int64) if trace_no is None else \
        np.asarray(trace_no, dtype=np.int64)
    # the family of a span: its parent's row, or (a root) -1 - its trace's number
    family = np.where(parent >= 0, parent, -1 - trace_no)
    start = np.asarray(inp.start_ns, dtype=np.int64)
    end = np.asarray(inp.end_ns, dtype=np.int64)
    names = np.asarray(inp.name, dtype=object)
    failed = np.flatnonzero(error)
    # the spans that could have retried one: in a family that holds a failure, with the name
    # of a failed span (few, usually), as numbers: their (family, name) and start
    kin = np.flatnonzero(np.isin(family, np.unique(family[failed])))
    code_of: dict = {}
    for nm in names[failed].tolist():
        code_of.setdefault(nm, len(code_of))
    codes = np.fromiter((code_of.get(nm, -1) for nm in names[kin].tolist()), dtype=np.int64,
                        count=len(kin))
    kin, codes = kin[codes >= 0], codes[codes >= 0]
    m = len(kin)
    fam = np.unique(family[kin], return_inverse=True)[1].reshape(-1)
    group = np.unique(fam * len(code_of) + codes, return_inverse=True)[1].reshape(-1)
    starts = start[kin]
    order = np.argsort(starts, kind="stable")
    rank = np.empty(m, dtype=np.int64)
    rank[order] = np.arange(m)
    # each candidate as one sortable number: its group, then its start's rank
    keys = np.sort(group.astype(np.int64) * m + rank)
    where = np.full(n, -1, dtype=np.int64)
    where[kin] = np.arange(m)
    g = group[where[failed]].astype(np.int64)
    # the rank from which starts are at or after each failure's end
    after = np.searchsorted(starts[order], end[failed], side="left")
    later = np.searchsorted(keys, g * m + m, side="left") - \
        np.searchsorted(keys, g * m + after, side="left")
    # ... less the failure itself, where it started at its end (zero length)
    later = later - (start[failed] >= end[failed])
    out[failed] = later > 0
    return out


def timeout_origins(inp: Any) -> np.ndarray:
    """Per span: it timed out and no span below it did (bool): where a timeout was spent,
    not where it propagated to (``inp``: columns ``parent_idx``, ``timeout``)."""
    timeout = np.asarray(inp.timeout, dtype=bool)
    out = timeout.copy()
    if not out.any():
        return out
    parent = np.asarray(inp.parent_idx, dtype=np.int64)
    seen = np.zeros(len(out), dtype=bool)  # ancestors already walked up from
    for t in np.flatnonzero(timeout).tolist():
        p, hops = int(parent[t]), 0
        while p >= 0 and hops < MAX_DEPTH and not seen[p]:
            seen[p] = True
            out[p] = False  # a timeout below it: it is not where the time went
            p, hops = int(parent[p]), hops + 1
    return out


def _under(marked: np.ndarray, parent: np.ndarray) -> np.ndarray:
    """Per span: it or one of its ancestors is marked."""
    out = marked.copy()
    if not out.any():
        return out
    has_parent = parent >= 0
    safe = np.where(has_parent, parent, 0)
    for _ in range(MAX_DEPTH):
        grown = out | (has_parent & out[safe])
        if np.array_equal(grown, out):
            break
        out = grown
    return out


def lost_time(inp: Any, sec_task: Any, sec_span: Any, sec_start: Any, sec_end: Any,
              n_tasks: int) -> tuple:
    """Per task, the critical-path nanoseconds lost to timeouts and to retried failures:
    ``(timeout_ns, retry_ns)``, two int64 arrays of length ``n_tasks`` (rules: the module
    docstring).

    ``inp``: an AnalysisInput (or anything with its columns ``parent_idx``, ``name``,
    ``start_ns``, ``end_ns``, ``error``, ``timeout``, ``trace_no``); the sections of every
    task's critical path: ``sec_task`` (the task's index, 0 .. n_tasks - 1; others are
    ignored), ``sec_span`` (the row of ``inp`` holding it, -1 for a gap between roots),
    ``sec_start``, ``sec_end`` (ns)."""
    task = np.asarray(sec_task, dtype=np.int64)
    span = np.asarray(sec_span, dtype=np.int64)
    length = np.maximum(np.asarray(sec_end, dtype=np.int64) -
                        np.asarray(sec_start, dtype=np.int64), 0)
    zeros = (np.zeros(n_tasks, dtype=np.int64), np.zeros(n_tasks, dtype=np.int64))
    n = len(inp.start_ns)
    if not n_tasks or not len(task) or not n or not np.asarray(inp.error, dtype=bool).any():
        return zeros
    parent = np.asarray(inp.parent_idx, dtype=np.int64)
    timed_out = _under(timeout_origins(inp), parent)
    retried = _under(failed_attempts(inp), parent)
    ok = (span >= 0) & (span < n) & (task >= 0) & (task < n_tasks)
    rows, t, ln = span[ok], task[ok], length[ok]
    out = []
    for flag in (timed_out, retried):
        hit = flag[rows]
        out.append(np.bincount(t[hit], weights=ln[hit], minlength=n_tasks)
                   .round().astype(np.int64)[:n_tasks])
    return out[0], out[1]
