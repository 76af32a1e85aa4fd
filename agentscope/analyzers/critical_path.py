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


class Walk(NamedTuple):
    """The walk over one trace, by index into ``spans`` (the unique spans, in input order)."""

    spans: list
    sections: list  # of (index or -1 for a gap, start, end), ascending, merged
    start: int
    end: int
    roots: list  # indices
    off_path: int
    duplicates: int


def walk(spans: Iterable) -> Walk:
    """The critical path over any span-like objects (``span_id``, ``parent_id``, ``start``,
    ``end``, ``kind``), by index. :func:`critical_path` is the named form."""
    index: dict = {}
    uniq: list = []
    duplicates = 0
    for s in spans:
        if s.span_id in index:
            duplicates += 1
        else:
            index[s.span_id] = len(uniq)
            uniq.append(s)
    n = len(uniq)
    if not n:
        return Walk(uniq, [], 0, 0, [], 0, duplicates)
    kids: list = [None] * n
    roots = []
    get = index.get
    for i, s in enumerate(uniq):
        p = get(s.parent_id) if s.parent_id is not None else None
        if p is None or p == i:
            roots.append(i)
        elif kids[p] is None:
            kids[p] = [i]
        else:
            kids[p].append(i)
    return _walk(uniq, kids, roots, duplicates)


def _walk(uniq: list, kids: list, roots: list, duplicates: int) -> Walk:
    n = len(uniq)
    cs = [0] * n  # clipped start/end; reached[i] says whether i survived clipping
    ce = [0] * n
    reached = [False] * n
    order = []
    for r in roots:
        s = uniq[r]
        cs[r], ce[r] = s.start, max(s.end, s.start)
        reached[r] = True
        order.append(r)
    children: list = [None] * n
    parent_of = [-1] * n
    i = 0
    while i < len(order):
        p = order[i]
        i += 1
        ks = kids[p]
        if ks is None:
            continue
        p_start, p_end = cs[p], ce[p]
        producer = uniq[p].kind == "producer"
        kept = []
        for c in ks:
            if reached[c]:  # reached twice: a cycle
                continue
            s = uniq[c]
            if producer and s.kind == "consumer":
                continue
            c_start, c_end = s.start, max(s.end, s.start)
            point = c_start == c_end
            if c_start >= p_end and not (point and c_start == p_end):
                continue
            if c_end <= p_start and not (point and c_end == p_start):
                continue
            cs[c] = c_start if c_start > p_start else p_start
            ce[c] = c_end if c_end < p_end else p_end
            reached[c] = True
            parent_of[c] = p
            kept.append(c)
            order.append(c)
        if kept:
            # last finishing child first; ties to the earlier start, then input order
            kept.sort(key=lambda k: (-ce[k], cs[k]))
            children[p] = kept
    off_path = n - len(order)
    start = min(cs[r] for r in roots)
    end = max(ce[r] for r in roots)
    sections: list = []
    if len(roots) == 1:
        top = roots[0]
        _descend(top, ce[top], top, cs, ce, children, parent_of, sections)
    else:  # several roots: the root still running at t (latest end, clipped to t) holds it
        unused = list(roots)
        t = end
        while True:
            best_i, best = -1, None
            for k, r in enumerate(unused):
                if cs[r] < t:
                    e = ce[r] if ce[r] < t else t
                    if best is None or e > best:
                        best_i, best = k, e
            if best_i < 0:
                break
            r = unused.pop(best_i)
            if t > best:
                sections.append((-1, best, t))
            t = _descend(r, best, r, cs, ce, children, parent_of, sections)
        if t > start:
            sections.append((-1, start, t))
    sections.reverse()
    merged: list = []
    for sec in sections:
        if merged and merged[-1][0] == sec[0] and merged[-1][2] == sec[1]:
            merged[-1] = (sec[0], merged[-1][1], sec[2])
        else:
            merged.append(sec)
    return Walk(uniq, merged, start, end, roots, off_path, duplicates)


def _descend(top: int, t: int, cur: int, cs: list, ce: list, children: list, parent_of: list,
             sections: list) -> int:
    """Walk back from time ``t`` inside ``top``'s subtree; returns ``top``'s start."""
    cursor: dict = {}
    while True:
        ids = children[cur]
        if ids is not None:
            k = cursor.get(cur, 0)
            m = len(ids)
            while k < m and ce[ids[k]] > t:
                k += 1
            if k < m:
                cursor[cur] = k + 1
                child = ids[k]
                c_end = ce[child]
                if t > c_end:
                    sections.append((cur, c_end, t))
                cur, t = child, c_end
                continue
            cursor[cur] = k
        c_start = cs[cur]
        if t > c_start:
            sections.append((cur, c_start, t))
        if cur == top:
            return c_start
        cur, t = parent_of[cur], (c_start if c_start < t else t)


def critical_path(spans: Iterable, root_id: Optional[str] = None) -> CriticalPath:
    """The critical path of one trace (or of the subtree under ``root_id``)."""
    w = walk(spans)
    if root_id is not None:
        idx = next((i for i, s in enumerate(w.spans) if s.span_id == root_id), None)
        if idx is not None:
            index = {s.span_id: i for i, s in enumerate(w.spans)}
            kids: list = [None] * len(w.spans)
            for i, s in enumerate(w.spans):
                p = index.get(s.parent_id) if s.parent_id is not None else None
                if p is not None and p != i:
                    kids[p] = [i] if kids[p] is None else kids[p] + [i]
            w = _walk(w.spans, kids, [idx], w.duplicates)
    if not w.spans:
        return CriticalPath((), 0, 0, (), 0, w.duplicates)
    ids = [s.span_id for s in w.spans]
    return CriticalPath(tuple(Section(ids[i] if i >= 0 else None, s, e) for i, s, e in w.sections),
                        w.start, w.end, tuple(ids[r] for r in w.roots), w.off_path, w.duplicates)


def merge_adjacent(sections: Sequence[Section]) -> list:
    """Sort ascending and merge touching sections of the same span (to compare with Jaeger)."""
    out: list = []
    for sec in sorted(sections, key=lambda s: (s.start, s.end)):
        if out and out[-1].span_id == sec.span_id and out[-1].end == sec.start:
            out[-1] = Section(sec.span_id, out[-1].start, sec.end)
        else:
            out.append(sec)
    return out
