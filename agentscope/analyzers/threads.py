"""What the other threads of a span's process did while it ran: the facts the span-only rules
for a blocked event loop and for library worker threads read (evidence.classify).

* **A blocked event loop.** On an asyncio loop every span's thread CPU counts whatever the
  loop ran meanwhile, other tasks' synchronous work included: a call that awaited a 0.2 s
  reply while another task computed 0.5 s on the loop reads as on-CPU. Two spans of one loop
  thread that overlap ran interleaved, so at least one of them was suspended. A span that was
  on-CPU for most of its own interval (:data:`HELD`), inside which no span of another task
  started (it did not yield), and that lies inside another span's interval (or overlaps part
  of it) held the loop there: it ran while the other was suspended. For each loop span, the spans of *other* tasks (or branches: neither its
  ancestors nor its descendants) that held the loop inside its interval are its blockers; the
  time they cover is the time its task could not resume (``blocked_ns``), their CPU in it
  (``blocked_cpu``) is not the span's own, and the blocker named is the one that covered most
  of it (the innermost span of that blocker's task that covered nearly as much).
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
    interval), ``blocked_cpu`` (their CPU in that time), ``blocker`` (row of the span that
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


def thread_facts(inp: Any) -> ThreadFacts:
    """The facts of every span of ``inp`` (an AnalysisInput, or anything with its columns)."""
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
    host = np.asarray(inp.host_hash, dtype=np.int64)
    _blocked(out, np.asarray(inp.loop, dtype=bool), start, end, dur, cpu, parent, host, pid,
             tid)
    names = getattr(inp, "name", None)
    if names is not None:
        for i in np.flatnonzero(out.blocker >= 0).tolist():
            more = out.blocker_label.get(i, 0)
            out.blocker_label[i] = _label(int(out.blocker[i]), parent, names) + (
                f" (and {more} other span{'s' if more > 1 else ''})" if more else "")
    _unowned(out, np.asarray(inp.other_cpu, dtype=np.float64), start, end, dur, cpu, parent,
             host, pid, tid)
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


def _blocked(out: ThreadFacts, loop: np.ndarray, start: np.ndarray, end: np.ndarray,
             dur: np.ndarray, cpu: np.ndarray, parent: np.ndarray, host: np.ndarray,
             pid: np.ndarray, tid: np.ndarray) -> None:
    rows = np.flatnonzero(loop & (cpu >= 0) & (dur >= MIN_NS))
    if len(rows) < 2:
        return
    busy = cpu / dur
    order = np.lexsort((start[rows], tid[rows], pid[rows], host[rows]))
    rows = rows[order]
    key = np.stack([host[rows], pid[rows], tid[rows]], axis=1)
    cuts = np.flatnonzero(np.any(np.diff(key, axis=0) != 0, axis=1)) + 1
    ancestors: dict = {}
    extra = out.blocker_label  # row -> how many other spans held it (labelled later)

    def anc(r: int) -> set:
        got = ancestors.get(r)
        if got is None:
            got = ancestors[r] = _ancestors(r, parent)
        return got

    for group in np.split(rows, cuts):
        if len(group) < 2:
            continue
        holders = group[busy[group] >= HELD]
        # a span that held the loop ran without yielding: no span of another task (nor of a
        # branch of its own) can have started inside it; one that did was suspended meanwhile,
        # and its thread CPU is the others' (it only looks busy)
        starts = start[group]
        held = []
        for j in holders.tolist():
            lo, hi = np.searchsorted(starts, [start[j], end[j]], side="right")
            inside = [k for k in group[lo:hi].tolist() if k != j and start[k] < end[j]]
            if all(j in anc(k) for k in inside):
                held.append(j)
        holders = np.asarray(held, dtype=np.int64)
        if not len(holders):
            continue
        h_start, h_end = start[holders], end[holders]
        for i in group.tolist():
            a, b = start[i], end[i]
            near = (h_start < b) & (h_end > a) & (holders != i)
            # a holder that contains the span was suspended while the span ran (not a blocker)
            near &= ~((h_start <= a) & (h_end >= b))
            if not near.any():
                continue
            mine = anc(i)
            cand = [j for j in holders[near].tolist() if j not in mine and i not in anc(j)]
            if not cand:
                continue
            lo = np.maximum(start[cand], a)
            hi = np.minimum(end[cand], b)
            over = (hi - lo).astype(np.float64)
            # the union of what they cover (nested holders count once)
            k = np.argsort(lo)
            covered, reach = 0, a
            for x, y in zip(lo[k].tolist(), hi[k].tolist()):
                if y > reach:
                    covered += y - max(x, reach)
                    reach = y
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
            others = len([k for k in cand if k not in outer and k != j and j not in anc(k)
                          and k not in anc(j)])
            if others:
                extra[i] = others
            out.blocked_ns[i] = covered
            out.blocked_cpu[i] = min(covered * min(busy[j], 1.0), max(cpu[i], 0.0))
            out.blocker[i] = j


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
