"""The critical path of one trace: which span was holding the task up, at every instant.

The walk is Jaeger's (jaeger-ui ``CriticalPath``, summarized in the test corpus's
ALGORITHM.md), in our own code, with the changes agent traces need:

1. Start at the end of the root. Repeatedly take the *last finishing child* (LFC) of the
   current span among the children that end no later than the current time ``t``; the time
   between that child's end and ``t`` is the current span's own (self) time. Descend into the
   child. When a span has no such child left, its time back to its start is self time, and the
   walk returns to its parent with ``t`` = the span's start.
2. Before walking, each child is clipped to its parent's interval (children entirely outside it
   are left off: fire-and-forget work that did not delay the task), and a CONSUMER child of a
   PRODUCER is left off with its subtree (the producer did not wait for it). Such spans stay in
   the store and in resource totals; they are just not on the path.

Where we differ from Jaeger, on purpose (each has a test):

* **Abutting children are on the path.** Jaeger takes a previous sibling only if it ends
  *strictly* before the returning child starts, so with millisecond timestamps a child that
  ends exactly when the next starts loses its time to the parent. We take ``end <= t``; each
  child is used at most once, so zero-length children cannot loop.
* **A partial trace is analysed.** A span whose parent is missing from the trace is a root
  (Jaeger drops it and returns an empty path).
* **Several roots make one path.** The task runs from the earliest root start to the latest
  root end. Walking back from the end, the root still running at ``t`` with the latest end
  holds the path (a root that overlaps the next one is cut where that one takes over); time
  covered by no root is a gap section (``span_id`` None). Jaeger concatenates per-root paths,
  which can overlap.
* **Duplicate spans** (same id) are counted once; **parent cycles** are broken (their spans
  are reported as unreachable).
* Sections are returned in ascending time order, and adjacent sections of the same span are
  merged. The sections are contiguous, do not overlap, and cover [start, end] exactly.
"""

from __future__ import annotations

from typing import Iterable, NamedTuple, Optional, Sequence


class PathSpan(NamedTuple):
    """What the walk needs of a span. Times are integers in any one unit (ns in the store)."""

    span_id: str
    parent_id: Optional[str]
    start: int
    end: int
    kind: str = "internal"  # producer/consumer matter


class Section(NamedTuple):
    span_id: Optional[str]  # None: a gap no span covered (between roots)
    start: int
    end: int


class CriticalPath(NamedTuple):
    sections: tuple  # of Section, ascending, contiguous, merged
    start: int
    end: int
    roots: tuple  # ids of the root spans walked
    off_path: int  # spans left off before the walk: clipped away, non-blocking, unreachable
    duplicates: int


def critical_path(spans: Iterable[PathSpan], root_id: Optional[str] = None) -> CriticalPath:
    """The critical path of one trace (or of the subtree under ``root_id``)."""
    by_id: dict = {}
    duplicates = 0
    for s in spans:
        if s.span_id in by_id:
            duplicates += 1
        else:
            by_id[s.span_id] = s
    if not by_id:
        return CriticalPath((), 0, 0, (), 0, duplicates)

    kids: dict = {}
    roots = []
    for s in by_id.values():
        p = s.parent_id
        if p is not None and p != s.span_id and p in by_id:
            kids.setdefault(p, []).append(s)
        else:
            roots.append(s)
    if root_id is not None and root_id in by_id:
        roots = [by_id[root_id]]

    # clip to parents, prune non-blocking subtrees (breadth first from the roots)
    clipped: dict = {}  # span_id -> (start, end)
    order = []
    for r in roots:
        clipped[r.span_id] = (r.start, max(r.end, r.start))
        order.append(r)
    i = 0
    while i < len(order):
        parent = order[i]
        i += 1
        p_start, p_end = clipped[parent.span_id]
        for c in kids.get(parent.span_id, ()):
            if c.span_id in clipped:  # reached twice: a cycle
                continue
            if parent.kind == "producer" and c.kind == "consumer":
                continue
            c_end = max(c.end, c.start)
            if c.start >= p_end and not (c.start == c_end == p_end):
                continue
            if c_end <= p_start and not (c.start == c_end == p_start):
                continue
            clipped[c.span_id] = (max(c.start, p_start), min(c_end, p_end))
            order.append(c)
    off_path = len(by_id) - len(clipped)

    start = min(clipped[r.span_id][0] for r in roots)
    end = max(clipped[r.span_id][1] for r in roots)
    virtual = len(roots) > 1
    children: dict = {}
    for s in order[len(roots):]:
        children.setdefault(s.parent_id, []).append(s.span_id)
    if virtual:
        children[None] = [r.span_id for r in roots]
    # last finishing child first; ties to the earlier start, then input order
    for key, ids in children.items():
        ids.sort(key=lambda sid: clipped[sid][0])
        ids.sort(key=lambda sid: -clipped[sid][1])
    parent_of = {s.span_id: s.parent_id for s in order[len(roots):]}
    for r in roots:
        parent_of[r.span_id] = None
    bounds = dict(clipped)
    top = None if virtual else roots[0].span_id
    bounds[top] = (start, end) if virtual else clipped[top]

    sections: list = []
    cursor: dict = {}
    unused_roots = [r.span_id for r in roots] if virtual else []
    cur, t = top, bounds[top][1]
    while True:
        if cur is None and virtual:
            # between roots: the root still running at t (latest end, clipped to t) holds it
            child = None
            best = None
            for rid in unused_roots:
                r_start, r_end = bounds[rid]
                if r_start < t and (best is None or min(r_end, t) > best):
                    child, best = rid, min(r_end, t)
            if child is not None:
                unused_roots.remove(child)
                if t > best:
                    sections.append(Section(None, best, t))
                cur, t = child, best
                continue
        else:
            ids = children.get(cur, ())
            k = cursor.get(cur, 0)
            while k < len(ids) and bounds[ids[k]][1] > t:
                k += 1
            cursor[cur] = k + 1 if k < len(ids) else k
            if k < len(ids):
                child = ids[k]
                c_end = bounds[child][1]
                if t > c_end:
                    sections.append(Section(cur, c_end, t))
                cur, t = child, c_end
                continue
        c_start = bounds[cur][0]
        if t > c_start:
            sections.append(Section(cur, c_start, t))
        if cur == top:
            break
        cur, t = parent_of[cur], min(c_start, t)

    sections.reverse()
    merged: list = []
    for sec in sections:
        if merged and merged[-1].span_id == sec.span_id and merged[-1].end == sec.start:
            merged[-1] = Section(sec.span_id, merged[-1].start, sec.end)
        else:
            merged.append(sec)
    return CriticalPath(tuple(merged), start, end, tuple(r.span_id for r in roots), off_path,
                        duplicates)


def merge_adjacent(sections: Sequence[Section]) -> list:
    """Sort ascending and merge touching sections of the same span (to compare with Jaeger)."""
    out: list = []
    for sec in sorted(sections, key=lambda s: (s.start, s.end)):
        if out and out[-1].span_id == sec.span_id and out[-1].end == sec.start:
            out[-1] = Section(sec.span_id, out[-1].start, sec.end)
        else:
            out.append(sec)
    return out
