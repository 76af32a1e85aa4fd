"""The critical path of one trace: which span was holding the task up, at every instant.

The walk is Jaeger's (jaeger-ui ``CriticalPath``, summarized in the test corpus's
ALGORITHM.md), in our own code, with the changes agent traces need:

1. Start at the end of the root. Repeatedly take the *last finishing child* (LFC) of the
   current span among the children that were running before the current time ``t`` (a child
   still running at ``t`` counts as ending at ``t``); the time between that child's end and
   ``t`` is the current span's own (self) time. Descend into the child. When a span has no
   such child left, its time back to its start is self time, and the walk returns to its
   parent with ``t`` = the span's start.
2. Before walking, each child is clipped to its parent's interval (children entirely outside it
   are left off: fire-and-forget work that did not delay the task), and a CONSUMER child of a
   PRODUCER is left off with its subtree (the producer did not wait for it). Such spans stay in
   the store and in resource totals; they are just not on the path.

Where we differ from Jaeger, on purpose (each has a test):

* **Overlapping children keep their time.** Jaeger takes a previous sibling only if it
  ended before the returning child started, so where children overlap (an LLM call 0-10 s,
  then a tool 9-12 s that the model's streamed output started early, under an agent 0-12 s)
  the overlapped child's time (0-9 s) went to the parent as self time: on traces without
  resource accounting, to a guess. We take a child that was still running when the returning
  child started, cut at that instant (the LLM call holds 0-9 s, the tool 9-12 s): the time
  it ran belongs to a child, not to the parent. Where no children overlap, both walks agree
  (Jaeger's upstream cases without overlap are tested for it).
* **Abutting children are on the path.** Jaeger takes a previous sibling only if it ends
  *strictly* before the returning child starts, so with millisecond timestamps a child that
  ends exactly when the next starts loses its time to the parent. We take ``end <= t``; each
  child is used at most once, so zero-length children cannot loop.
* **A partial trace is analysed.** A span whose parent is missing from the trace is a root
  here (Jaeger drops it and returns an empty path); before the walk, the store has such a span
  adopted by the innermost true root of its trace that encloses it, where one does
  (``store/sql/analysis_input.sql``), so it reaches the walk as that root's child.
* **Several roots make one path.** The task runs from the earliest root start to the latest
  root end, and the roots are walked as the children of one span over that time: walking
  back from the end, of the roots that ran before ``t`` the one that ends last holds the path
  (a root that overlaps the next one is cut where that one takes over); time covered by no
  root is a gap section (``span_id`` None). Jaeger concatenates per-root paths, which can
  overlap.
* **Duplicate spans** (same id) are counted once; **parent cycles** are broken (their spans
  are reported as unreachable).
* Sections are returned in ascending time order, and adjacent sections of the same span are
  merged. The sections are contiguous, do not overlap, and cover [start, end] exactly.

:func:`walk_many` walks every trace of a fleet at once (clipping and ordering in numpy, the
descent in numpy lockstep, stragglers in Python); :func:`critical_path` is the same for one
trace, by span ids. The walk written the plain way, one trace at a time, is kept apart as the
reference the tests check this against (:mod:`agentscope.analyzers.reference`).
"""

from __future__ import annotations

from typing import Any, Iterable, NamedTuple, Optional, Sequence


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


def _over_roots(roots: list, cs: Any, ce: Any, start: int, end: int, sections: list,
                descend: Any) -> None:
    """Walk back over one or several roots as over the children of a span that runs from
    ``start`` to ``end``; ``descend(top, t)`` walks ``top``'s subtree back from time ``t``,
    appending sections, and returns ``top``'s start. At each time ``t`` the root that ran
    before ``t`` and ends last (cut at ``t``; ties to the earlier start, then the earlier
    row) holds the path; time no root covers is a gap (-1)."""
    if len(roots) == 1:
        descend(roots[0], ce[roots[0]])
        return
    t = end
    for r in sorted(roots, key=lambda r: (-ce[r], cs[r], r)):
        if ce[r] > t and cs[r] >= t:  # began at or after t: ran beside the later roots
            continue
        e = ce[r] if ce[r] < t else t
        if t > e:
            sections.append((-1, e, t))
        t = descend(r, e)
    if t > start:
        sections.append((-1, start, t))


def critical_path(spans: Iterable, root_id: Optional[str] = None) -> CriticalPath:
    """The critical path of one trace given as span-like objects (``span_id``, ``parent_id``,
    ``start``, ``end``, ``kind``), or of the subtree under ``root_id`` when given and present
    (then ``off_path`` counts the spans of that subtree only): :func:`walk_many` over that one
    trace."""
    uniq, index, parent, duplicates = unique_spans(spans)
    if root_id in index:  # only the subtree under it, with it as the root
        uniq, parent = _subtree(uniq, parent, index[root_id])
    if not uniq:
        return CriticalPath((), 0, 0, (), 0, duplicates)
    w = walk_many(parent, [s.start for s in uniq], [s.end for s in uniq],
                  [s.kind for s in uniq], [(0, len(uniq))])
    ids = [s.span_id for s in uniq]
    sections = tuple(Section(ids[i] if i >= 0 else None, a, b)
                     for i, a, b in zip(w.span.tolist(), w.start.tolist(), w.end.tolist()))
    return CriticalPath(sections, w.starts[0], w.ends[0], tuple(ids[r] for r in w.roots[0]),
                        w.off_path[0], duplicates)


def unique_spans(spans: Iterable) -> tuple:
    """(the spans with each id once, the first kept; {span_id: index}; each one's parent
    index or -1; how many repeats were dropped)."""
    index: dict = {}
    uniq: list = []
    duplicates = 0
    for s in spans:
        if s.span_id in index:
            duplicates += 1
        else:
            index[s.span_id] = len(uniq)
            uniq.append(s)
    parent = [-1 if s.parent_id is None else index.get(s.parent_id, -1) for s in uniq]
    return uniq, index, parent, duplicates


def _subtree(spans: list, parent: list, root: int) -> tuple:
    """The spans under ``root`` (itself included, as a root), and their parents re-indexed."""
    kids: dict = {}
    for i, p in enumerate(parent):
        if p >= 0 and p != i:
            kids.setdefault(p, []).append(i)
    order, seen = [root], {root}
    for i in order:
        for k in kids.get(i, ()):
            if k not in seen:
                seen.add(k)
                order.append(k)
    order.sort()
    at = {old: new for new, old in enumerate(order)}
    return ([spans[i] for i in order],
            [-1 if i == root else at.get(parent[i], -1) for i in order])


def merge_adjacent(sections: Sequence[Section]) -> list:
    """Sort ascending and merge touching sections of the same span (to compare with Jaeger)."""
    out: list = []
    for sec in sorted(sections, key=lambda s: (s.start, s.end)):
        if out and out[-1].span_id == sec.span_id and out[-1].end == sec.start:
            out[-1] = Section(sec.span_id, out[-1].start, sec.end)
        else:
            out.append(sec)
    return out


class ManyWalks(NamedTuple):
    """The walks of every trace of flat arrays (see :func:`walk_many`)."""

    trace: Any  # per section (numpy): the trace's number (position in ``bounds``)
    span: Any  # per section: row index, -1 for a gap
    start: Any
    end: Any
    first: Any  # per trace: index of its first section
    starts: list  # per trace: path start
    ends: list  # per trace: path end
    roots: list  # per trace: list of root rows
    off_path: list  # per trace


# below this many traces still walking together, the rest finish one by one in Python
LOCKSTEP_MIN = 48


def walk_many(parent: Any, starts: Any, ends: Any, kinds: Any, bounds: list,
              lockstep_min: int = LOCKSTEP_MIN) -> ManyWalks:
    """The walk of every trace at once (the per-trace walk of :mod:`.reference` gives the same
    sections, trace by trace). Clipping,
    pruning and the ordering of children are done with numpy over all spans. The descent
    along the paths runs for all single-root traces in lockstep, one numpy step moving every
    trace's walk by one span; when fewer than ``lockstep_min`` traces are still walking (a
    few long traces), and for traces with several roots, it continues in Python.
    ``bounds[t]`` = (lo, hi) rows of trace t; ``parent`` holds row indices within the same
    trace, or -1."""
    import numpy as np

    parent = np.asarray(parent, dtype=np.int64)
    n = len(parent)
    start = np.asarray(starts, dtype=np.int64)
    end = np.maximum(np.asarray(ends, dtype=np.int64), start)
    kinds = np.asarray(kinds, dtype=object)
    producer = kinds == "producer"
    consumer = kinds == "consumer"
    rows = np.arange(n)
    is_root = (parent < 0) | (parent == rows)
    safe_parent = np.where(is_root, rows, parent)

    # depth by repeated parent lookups over the spans still without one: round d finds the
    # spans of depth d (in row order); spans never reached from a root (cycles) stay -1
    depth = np.where(is_root, 0, -1)
    levels = []
    pending = np.flatnonzero(~is_root)
    while len(pending):
        pd = depth[safe_parent[pending]]
        found = pd >= 0
        if not found.any():
            break
        at = pending[found]
        depth[at] = pd[found] + 1
        levels.append(at)
        pending = pending[~found]

    # clip top down, level by level, and prune what falls outside or does not block
    cs, ce = start.copy(), end.copy()
    alive = is_root.copy()
    for at in levels:
        p = safe_parent[at]
        p_start, p_end = cs[p], ce[p]
        c_start, c_end = start[at], end[at]
        point = c_start == c_end
        keep = alive[p] & ~(producer[p] & consumer[at])
        keep &= ~((c_start >= p_end) & ~(point & (c_start == p_end)))
        keep &= ~((c_end <= p_start) & ~(point & (c_end == p_start)))
        alive[at] = keep
        cs[at] = np.where(keep, np.maximum(c_start, p_start), cs[at])
        ce[at] = np.where(keep, np.minimum(c_end, p_end), ce[at])

    # children of every span, last finishing first; ties to the earlier start, then row order
    kids = np.flatnonzero(alive & ~is_root)
    order = kids[np.lexsort((cs[kids], -ce[kids], parent[kids]))]  # stable: row order last
    count = np.bincount(parent[order], minlength=n) if len(order) else np.zeros(n, np.int64)
    offset = np.zeros(n, dtype=np.int64)
    if n:
        np.cumsum(count[:-1], out=offset[1:])
    cursor = np.zeros(n, dtype=np.int64)

    root_rows = np.flatnonzero(is_root)
    his = np.asarray([hi for _, hi in bounds], dtype=np.int64)
    root_trace = np.searchsorted(his, root_rows, side="right")
    n_roots = np.bincount(root_trace, minlength=len(bounds))
    roots_of: list = [[] for _ in bounds]
    for row, t in zip(root_rows.tolist(), root_trace.tolist()):
        roots_of[t].append(row)
    w_start = np.zeros(len(bounds), dtype=np.int64)
    w_end = np.zeros(len(bounds), dtype=np.int64)
    if len(root_rows):
        w_start[:] = np.iinfo(np.int64).max
        w_end[:] = np.iinfo(np.int64).min
        np.minimum.at(w_start, root_trace, cs[root_rows])
        np.maximum.at(w_end, root_trace, ce[root_rows])
        w_start[n_roots == 0] = 0
        w_end[n_roots == 0] = 0

    # the descent: raw sections in descending time per trace, emitted in steps; each step's
    # arrays are (trace, span, start, end); sorted into ascending time per trace below
    emitted: list = []
    single = np.flatnonzero(n_roots == 1)
    tops = root_rows[np.isin(root_trace, single)]
    left = _lockstep(tops, root_trace[np.isin(root_trace, single)], cs, ce, order, offset,
                     count, safe_parent, cursor, emitted, lockstep_min)
    views = (memoryview(cs), memoryview(ce), memoryview(order), memoryview(offset),
             memoryview(count), memoryview(safe_parent), memoryview(cursor))
    for trace, top, cur, t in left:  # stragglers, from where the lockstep stopped
        sections: list = []
        _descend_flat(top, t, *views, sections, cur)
        _emit_list(emitted, trace, sections)
    for trace in np.flatnonzero(n_roots > 1).tolist():
        sections = []
        _over_roots(roots_of[trace], views[0], views[1], int(w_start[trace]),
                    int(w_end[trace]), sections,
                    lambda top, t: _descend_flat(top, t, *views, sections))
        _emit_list(emitted, trace, sections)

    if emitted:
        tr, sp, st, en = (np.concatenate([e[k] for e in emitted]) for k in range(4))
        # emission order is descending time within a trace: reverse it, trace by trace
        ranked = np.lexsort((-np.arange(len(tr)), tr))
        tr, sp, st, en = tr[ranked], sp[ranked], st[ranked], en[ranked]
    else:
        tr = sp = st = en = np.zeros(0, dtype=np.int64)
    # merge touching sections of the same span, all traces at once
    if len(sp):
        new = np.ones(len(sp), dtype=bool)
        new[1:] = ~((tr[1:] == tr[:-1]) & (sp[1:] == sp[:-1]) & (st[1:] == en[:-1]))
        heads = np.flatnonzero(new)
        tails = np.append(heads[1:], len(sp)) - 1
        tr, sp, st, en = tr[heads], sp[heads], st[heads], en[tails]
    first = np.searchsorted(tr, np.arange(len(bounds)), side="left")
    trace_of_row = np.repeat(np.arange(len(bounds)), [hi - lo for lo, hi in bounds])
    off_path = np.bincount(trace_of_row[~alive], minlength=len(bounds)) if n else \
        np.zeros(len(bounds), np.int64)
    return ManyWalks(tr, sp, st, en, first, w_start.tolist(), w_end.tolist(), roots_of,
                     off_path.tolist())


def _emit_list(emitted: list, trace: int, sections: list) -> None:
    import numpy as np

    if sections:
        a = np.asarray(sections, dtype=np.int64).reshape(-1, 3)
        emitted.append((np.full(len(a), trace, dtype=np.int64), a[:, 0], a[:, 1], a[:, 2]))


def _lockstep(tops: Any, traces: Any, cs: Any, ce: Any, order: Any, off: Any, cnt: Any,
              parent_of: Any, cursor: Any, emitted: list, lockstep_min: int) -> list:
    """:func:`_descend_flat` for many single-root traces at once, each numpy step moving
    every walk by one span (into a child, past a child that ended too late, or back up to
    the parent). Returns [(trace, top, cur, t)] of the walks left to finish in Python once
    fewer than ``lockstep_min`` are still going."""
    import numpy as np

    cur = tops.copy()
    t = ce[tops].copy()
    top, trace = tops, traces
    while len(cur) >= max(lockstep_min, 1):
        m = cnt[cur]
        k = cursor[cur]
        has = k < m
        child = order[np.where(has, off[cur] + k, 0)] if len(order) else cur
        c_end = np.minimum(ce[child], t)  # a child still running at t is cut at t
        take = has & ((ce[child] <= t) | (cs[child] < t))
        # a child that started at or after t is passed over; one that ran before t is entered
        cursor[cur] = np.where(has, k + 1, k)
        up = ~has
        c_start = cs[cur]
        gap_down = take & (t > c_end)  # the parent held the path from the child's end to t
        own = up & (t > c_start)  # back at the start of this span: it held [start, t]
        emit = gap_down | own
        if emit.any():
            e_start = np.where(gap_down, c_end, c_start)
            emitted.append((trace[emit], cur[emit], e_start[emit], t[emit]))
        done = up & (cur == top)
        new_cur = np.where(take, child, np.where(up, parent_of[cur], cur))
        new_t = np.where(take, c_end, np.where(up, np.minimum(c_start, t), t))
        if done.any():
            keep = ~done
            cur, t, top, trace = new_cur[keep], new_t[keep], top[keep], trace[keep]
        else:
            cur, t = new_cur, new_t
    return list(zip(trace.tolist(), top.tolist(), cur.tolist(), t.tolist()))


def _descend_flat(top: int, t: int, cs: Any, ce: Any, order: Any, off: Any, cnt: Any,
                  parent_of: Any, cursor: Any, sections: list, cur: int = -1) -> int:
    """Walk back from time ``t`` inside ``top``'s subtree, taking at each span the last
    finishing child that ran before ``t``, cut at ``t`` (children stored flat,
    ``order[off[p]:off[p] + cnt[p]]``, last finishing first); returns ``top``'s start.
    ``cur``: where in the subtree a walk that was begun elsewhere stands (``t`` is its time
    there)."""
    if cur < 0:
        cur = top
    while True:
        m = cnt[cur]
        if m:
            base = off[cur]
            k = cursor[cur]
            # passed over: children that started at or after t (ran in parallel with the
            # returning child, inside its time); one still running at t is cut at t
            while k < m and ce[order[base + k]] > t and cs[order[base + k]] >= t:
                k += 1
            if k < m:
                cursor[cur] = k + 1
                child = order[base + k]
                c_end = ce[child] if ce[child] < t else t
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
