"""What the other threads of a span's process did while it ran: the facts the span-only rules
for a blocked event loop and for library worker threads read (evidence.classify).

* **A blocked event loop.** On an asyncio loop every span's thread CPU counts whatever the
  loop ran meanwhile, other tasks' synchronous work included: a call that awaited a 0.2 s
  reply while another task computed 0.5 s on the loop reads as on-CPU. Two spans of one loop
  thread that overlap ran interleaved, so at least one of them was suspended. A span that was
  on-CPU, or preempted (waiting for a CPU, not for anything it awaited), for most of its own
  interval (:data:`HELD`), inside which no span of another task started (it did not yield),
  and that lies inside another span's interval (or overlaps part of it) held the loop there:
  it ran while the other was suspended. For each loop span, the spans of *other* tasks (or
  branches: neither its ancestors nor its descendants) that held the loop inside its
  interval are its blockers; the
  time they cover is the time its task could not resume (``blocked_ns``), their CPU in it
  (``blocked_cpu``) is not the span's own, and the blocker named is the one that covered most
  of it (the innermost span of that blocker's task that covered nearly as much).
  Where the in-process sampler ran, it measured the loop's lag directly (a callback it
  scheduled ran late: the loop was held meanwhile) and which span's task the loop was running
  then; those intervals and holders come first, and a span they contradict held nothing.
* **Threads without spans.** ``other_cpu`` is the CPU of the process's other threads over a
  span (recorded by the capture). Less what the threads that had spans of their own used
  over the same interval (each such thread's outermost span, its CPU pro rata of the
  overlap), it is what threads *without* spans computed meanwhile (``unowned_cpu``): a
  library's worker threads (BLAS, a pool inside a library), or threads that held Python's
  interpreter lock.

Both are computed per process (host, pid) and thread, in numpy, only for the spans that need
them (loop spans; spans with ``other_cpu`` recorded).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

HELD = 0.8  # on-CPU share of its own interval from which a loop span held the loop
INNER = 0.9  # a blocker's descendant covering this share of what it covered is named instead
MIN_NS = 1_000_000  # spans shorter than this neither block nor count as blocked


@dataclasses.dataclass(frozen=True)
class ThreadFacts:
    """Per span: ``blocked_ns`` (time its loop was held by other tasks' spans inside its
    interval), ``blocked_cpu`` (its loop's CPU in that time), ``blocker`` (row of the span that
    held it longest, -1: none), ``unowned_cpu`` (CPU of its process's threads without spans
    while it ran)."""

    blocked_ns: Any
    blocked_cpu: Any
    blocker: Any
    unowned_cpu: Any
    blocker_label: dict = dataclasses.field(default_factory=dict)  # row -> "`x` in task `y`"

    @classmethod
    def none(cls, n: int) -> "ThreadFacts":
        return cls(np.zeros(n), np.zeros(n), np.full(n, -1, dtype=np.int64), np.zeros(n), {})


def thread_facts(inp: Any, lags: Any = None) -> ThreadFacts:
    """The facts of every span of ``inp`` (an AnalysisInput, or anything with its columns);
    ``lags``: the loop lags the in-process sampler measured (the store's
    :class:`~agentscope.store.schema.LoopLags`, or None)."""
    n = len(inp.start_ns)
    out = ThreadFacts.none(n)
    if not n or getattr(inp, "pid", None) is None:
        return out
    start = np.asarray(inp.start_ns, dtype=np.int64)
    end = np.asarray(inp.end_ns, dtype=np.int64)
    dur = np.maximum(end - start, 1)
    cpu = np.asarray(inp.thread_cpu, dtype=np.float64)
    parent = np.asarray(inp.parent_idx, dtype=np.int64)
    pid, tid = np.asarray(inp.pid, dtype=np.int64), np.asarray(inp.tid, dtype=np.int64)
    # the host: its name where the input has it (with counters, as the lags have), else a hash
    hosts = getattr(inp, "host", None)
    code_of: Any = None
    if hosts is not None:
        names_of_hosts, host = np.unique(np.asarray(hosts, dtype=object).astype(str),
                                         return_inverse=True)
        code_of = {h: k for k, h in enumerate(names_of_hosts.tolist())}
    else:
        host = np.asarray(inp.host_hash, dtype=np.int64)
    # a thread preempted while it ran a span did not yield its loop: of the span's time off
    # CPU, the part its switches tell was preemption (involuntary, against voluntary: blocked)
    # counts as running, for whether the span held the loop (on a busy host a span that
    # computes 0.5 s spends a third of its time waiting for a CPU)
    ivcsw = np.asarray(getattr(inp, "ivcsw", np.zeros(n)), dtype=np.float64)
    vcsw = np.asarray(getattr(inp, "vcsw", np.zeros(n)), dtype=np.float64)
    ran = np.where(cpu >= 0, cpu + np.maximum(dur - cpu, 0) * ivcsw / np.maximum(ivcsw + vcsw,
                                                                                  1.0), cpu)
    others, lagged = _blocked(out, np.asarray(inp.loop, dtype=bool), start, end, dur, cpu,
                              ran, parent, (host, pid, tid),
                              _lag_intervals(lags, code_of, getattr(inp, "span_id", None)))
    names = getattr(inp, "name", None)
    for i in np.flatnonzero(out.blocked_ns > 0).tolist():
        j, more = int(out.blocker[i]), others.get(i, 0)
        label = (_label(j, parent, names) if names is not None else "another task's span") \
            if j >= 0 else "code of another task outside any span"
        if more:
            label += f" (and {more} other span{'s' if more > 1 else ''})"
        if i in lagged:
            label += f" (its lag measured: {lagged[i] / 1e9:.3g} s)"
        out.blocker_label[i] = label
    _unowned(out, np.asarray(inp.other_cpu, dtype=np.float64), start, end, dur, cpu, parent,
             np.asarray(inp.host_hash, dtype=np.int64), pid, tid)
    return out


def _lag_intervals(lags: Any, code_of: "dict | None", span_ids: Any) -> dict:
    """{(host code, pid, tid): [(start ns, end ns, row of the span that held it or -1)]}:
    each measured lag held its loop from when the probe was due to when it ran.
    ``code_of``: host name -> code (None: the input has no host names, so nothing can be
    matched); ``span_ids``: the input's span ids (to find the holders' rows)."""
    out: dict = {}
    if lags is None or code_of is None:
        return out
    named = {sid for sid in lags.span_id.tolist() if sid is not None}
    row_of: dict = {}
    if named:
        ids = np.asarray(span_ids, dtype=object)
        for r in np.flatnonzero(np.isin(ids, list(named))).tolist():
            row_of.setdefault(ids[r], r)
    for host, p, t, sid, ts, lag in zip(lags.host, lags.pid, lags.tid, lags.span_id,
                                        lags.ts_ns, lags.lag_s):
        if host in code_of:
            out.setdefault((code_of[host], int(p), int(t)), []).append(
                (int(ts) - int(lag * 1e9), int(ts), row_of.get(sid, -1)))
    return out


def _label(row: int, parent: np.ndarray, names: Any) -> str:
    """A span and its task, in words: "`embed` in task `index-docs`"."""
    root, hops = row, 0
    while parent[root] >= 0 and hops < 10_000:
        root, hops = int(parent[root]), hops + 1
    name = f"`{names[row]}`"
    return name if root == row else f"{name} in task `{names[root]}`"


def _ancestors(row: int, parent: np.ndarray) -> set:
    seen = set()
    p = int(parent[row])
    while p >= 0 and p not in seen and len(seen) < 10_000:
        seen.add(p)
        p = int(parent[p])
    return seen


def _measure(pieces: list, minus: list = ()) -> int:
    """The length of the union of the intervals ``pieces`` less the union of ``minus``."""
    def merged(ivs: list) -> list:
        out: list = []
        for x, y in sorted(ivs):
            if y <= x:
                continue
            if out and x <= out[-1][1]:
                out[-1][1] = max(out[-1][1], y)
            else:
                out.append([x, y])
        return out

    total = 0
    cut = merged(list(minus))
    for x, y in merged(pieces):
        total += y - x
        for u, v in cut:
            total -= max(0, min(y, v) - max(x, u))
    return total


def _blocked(out: ThreadFacts, loop: np.ndarray, start: np.ndarray, end: np.ndarray,
             dur: np.ndarray, cpu: np.ndarray, ran: np.ndarray, parent: np.ndarray,
             key: tuple, lags: dict) -> dict:
    """Fill ``out.blocked_*`` and ``out.blocker`` of the loop spans; returns {row: how many
    other spans held its loop} and {row: ns of measured lag counted} for the words. ``ran``:
    each span's thread CPU plus its time preempted (what :data:`HELD` is of). ``key``:
    (host, pid, tid) arrays; ``lags``: {(host, pid, tid): [(start, end)]} of the intervals
    the sampler measured the loop held."""
    others_of: dict = {}
    lag_of: dict = {}
    rows = np.flatnonzero(loop & (cpu >= 0) & (dur >= MIN_NS))
    if len(rows) < 2:
        return others_of, lag_of
    busy = ran / dur
    host, pid, tid = key
    order = np.lexsort((start[rows], tid[rows], pid[rows], host[rows]))
    rows = rows[order]
    keys = np.stack([host[rows], pid[rows], tid[rows]], axis=1)
    cuts = np.flatnonzero(np.any(keys[1:] != keys[:-1], axis=1)) + 1
    ancestors: dict = {}

    def anc(r: int) -> set:
        got = ancestors.get(r)
        if got is None:
            got = ancestors[r] = _ancestors(r, parent)
        return got

    def related(i: int, j: int) -> bool:
        return i == j or j in anc(i) or i in anc(j)

    for group in np.split(rows, cuts):
        if len(group) < 2:
            continue
        first = int(group[0])
        measured = lags.get((int(host[first]), int(pid[first]), int(tid[first])), [])
        holders = group[busy[group] >= HELD]
        # a span that held the loop ran without yielding: no span of another task (nor of a
        # branch of its own) can have started inside it; one that did was suspended meanwhile,
        # and its thread CPU is the others' (it only looks busy)
        starts = start[group]
        held = []
        for j in holders.tolist():
            lo, hi = np.searchsorted(starts, [start[j], end[j]], side="right")
            inside = [k for k in group[lo:hi].tolist() if k != j and start[k] < end[j]]
            # ... nor over a lag the sampler saw another task's span hold
            seen_other = any(h >= 0 and not related(j, h) and x < end[j] and y > start[j]
                             for x, y, h in measured)
            if all(j in anc(k) for k in inside) and not seen_other:
                held.append(j)
        holders = np.asarray(held, dtype=np.int64)
        if not len(holders) and not measured:
            continue
        h_start, h_end = start[holders], end[holders]
        for i in group.tolist():
            a, b = int(start[i]), int(end[i])
            near = (h_start < b) & (h_end > a)
            # a holder that contains the span was suspended while the span ran (not a blocker)
            inner = near & ~((h_start <= a) & (h_end >= b))
            cand = [j for j in holders[inner].tolist() if not related(i, j)]
            mine = [(int(start[j]), int(end[j])) for j in holders[near].tolist()
                    if related(i, j)]
            pieces = [(max(int(start[j]), a), min(int(end[j]), b)) for j in cand]
            # the lag the sampler measured: held by the span it saw (its own or a relative's:
            # not a delay), or by no span seen, where a span of another task was open on the
            # loop (else it may have been this span's own code)
            lagged = []
            for x, y, h in measured:
                if not (x < b and y > a):
                    continue
                piece = (max(x, a), min(y, b))
                if h >= 0 and related(i, h):
                    mine.append(piece)
                elif h >= 0:
                    lagged.append(piece)
                    if h not in cand:
                        cand.append(h)
                        pieces.append(piece)
                elif any(start[k] < y and end[k] > x and not related(i, k)
                         for k in group.tolist()):
                    lagged.append(piece)
            covered = _measure(pieces + lagged, mine)
            if covered <= 0:
                continue
            out.blocked_ns[i] = covered
            if lagged:
                lag_of[i] = _measure(lagged, mine)
            # the loop ran the blocking code meanwhile: that much of its thread's CPU
            out.blocked_cpu[i] = min(covered, max(cpu[i], 0.0))
            if not cand:  # held by code in no span of its own: measured only
                continue
            over = np.asarray([y - x for x, y in pieces], dtype=np.float64)
            best = int(np.argmax(over))
            changed = True
            while changed:  # the innermost span that covered nearly as much
                changed = False
                for c, j in enumerate(cand):
                    if c != best and over[c] >= INNER * over[best] and cand[best] in anc(j):
                        best, changed = c, True
                        break
            j = cand[best]
            # the others: the innermost of the rest (a task's span and the step inside it that
            # held the loop are one blocker)
            outer = set().union(*(anc(k) for k in cand))
            others = len([k for k in cand if k not in outer and not related(j, k)])
            if others:
                others_of[i] = others
            out.blocker[i] = j
    return others_of, lag_of


def _unowned(out: ThreadFacts, other: np.ndarray, start: np.ndarray, end: np.ndarray,
             dur: np.ndarray, cpu: np.ndarray, parent: np.ndarray, host: np.ndarray,
             pid: np.ndarray, tid: np.ndarray) -> None:
    rows = np.flatnonzero(other > 0)
    if not len(rows):
        return
    safe = np.maximum(parent, 0)
    # each thread's outermost spans: no parent, or a parent on another thread or process
    top = (cpu >= 0) & ((parent < 0) | (pid[safe] != pid) | (tid[safe] != tid) |
                        (host[safe] != host))
    tops = np.flatnonzero(top)
    by_proc: dict = {}
    for r in tops.tolist():
        by_proc.setdefault((int(host[r]), int(pid[r])), []).append(r)
    arrays = {k: np.asarray(v, dtype=np.int64) for k, v in by_proc.items()}
    for i in rows.tolist():
        mates = arrays.get((int(host[i]), int(pid[i])))
        owned = 0.0
        if mates is not None:
            sel = mates[(tid[mates] != tid[i]) & (start[mates] < end[i]) & (end[mates] > start[i])]
            if len(sel):
                ov = np.minimum(end[sel], end[i]) - np.maximum(start[sel], start[i])
                owned = float((cpu[sel] * ov / dur[sel]).sum())
        out.unowned_cpu[i] = max(other[i] - owned, 0.0)
