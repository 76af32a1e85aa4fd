"""What each span waited for before it started and before it ended, inferred from a trace,
so that a trace can be re-timed when some of its work gets faster (:mod:`.whatif`) or replayed
on other capacity (:mod:`.replay`).

A trace records when each span started and ended, not why. The rule used here (docs/whatif.md,
"starts after"), for the children of one span, in order of start (then end, then position):

* a child **starts after every earlier sibling that had ended** by its start (a join: the
  agent waited for all of them), plus its parent's own time from the last of those ends;
* unless a sibling **still running** at its start started later than that last end: then it
  starts as long after that sibling's start as it did (that time was the sibling's, not its
  parent's own: two tools launched together stay together; a tool launched while a model
  call streams stays that far into it);
* with neither, it starts that much of its parent's own time after its parent's start.

A span's **end** follows the same rule, as if it were one more child that starts where the
span ends: a span ends after the children that ended inside it, plus its own time after the
last of them (a leaf: its own duration after its start). A child that ran past its parent's
end was not waited for; one that started after it does not delay it.

The roots of a trace are the children of the task (one virtual span per trace, from the first
root's start to the last root's end, whose own time, the gaps between roots, never changes).
Tasks arrive at their recorded start, except a task that started within
:data:`FOLLOW_NS` of another task's end on the same service and lane: it followed that task
(a worker taking the next job), and follows it in a re-timed fleet too (at high arrival rates
an unrelated end may fall in that window: the follow is then a guess). A gap that is negative
(a child that started before its parent: clocks of two hosts apart) is kept as it is and
never scaled.

Everything is expressed as *anchors*, so that a re-timing (fixed durations) and a replay
(durations that come out of a simulation) use the same dependencies: each start and each end
has a kind (:data:`PARENT`, :data:`JOIN`, :data:`SIBLING`, :data:`ARRIVAL`, :data:`FOLLOW`), a
reference and a gap (own time of the span whose time it is, in ns).
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
import heapq
from typing import Any

import numpy as np

PARENT, JOIN, SIBLING, ARRIVAL, FOLLOW = 0, 1, 2, 3, 4
# a task that starts this soon after another task of its service and lane ended followed it
FOLLOW_NS = 20_000_000


@dataclasses.dataclass(frozen=True)
class Deps:
    """The anchors of every span's start and end, for ``n`` spans and ``tasks`` virtual task
    spans (rows ``n`` .. ``n + tasks - 1``, the task of trace ``t`` at ``n + t``).

    ``ops``: the order to evaluate them in (a value ``i`` >= 0 is the start of row ``i``,
    ``~i`` its end): every anchor is evaluated before what depends on it. For a start,
    ``s_*`` give the anchor, whose gap is its parent's own time (``owner`` = the parent); for
    an end, ``e_*``, whose gap is the span's own time. ``JOIN`` refers to a prefix of
    ``done[parent]``: the siblings that had ended, in the order they were found ended."""

    n: int
    parent: list  # per row (n + tasks): parent row, the virtual task for roots, -1 for tasks
    start: list  # recorded ns (virtual tasks: first root start)
    end: list
    s_kind: list
    s_ref: list
    s_gap: list
    e_kind: list
    e_ref: list
    e_gap: list
    done: dict  # parent row -> [child rows in the order they were found ended]
    ops: list
    task_rows: list  # per task: its virtual row
    # the first arrival (ns): an ARRIVAL's gap counts from it, so that times stay exact in
    # float64 (ns since the epoch do not)
    origin: int = 0

    @functools.cached_property
    def plan(self) -> list:
        """``ops`` as tuples (is_start, row, kind, ref, parent or owner, gap, whose scale:
        the row whose own time the gap is, or ``len(parent)`` for none): what the re-timing
        loop reads."""
        total = len(self.parent)
        out = []
        for op in self.ops:
            if op >= 0:
                kind, p = self.s_kind[op], self.parent[op]
                own = p if kind in (PARENT, JOIN) and p >= 0 else total
                out.append((True, op, kind, self.s_ref[op], p, self.s_gap[op], own))
            else:
                i = ~op
                kind = self.e_kind[i]
                own = i if kind in (PARENT, JOIN) else total
                out.append((False, i, kind, self.e_ref[i], i, self.e_gap[i], own))
        return out

    def own_ns(self) -> np.ndarray:
        """Each span's own time as the anchors count it: the gaps that are its own (from its
        start or its children's ends to a child's start or its end; a gap counted from a
        sibling's start was covered by that sibling), where positive."""
        own = np.zeros(len(self.parent), dtype=np.float64)
        for p, kind, g in zip(self.parent, self.s_kind, self.s_gap):
            if p >= 0 and kind in (PARENT, JOIN) and g > 0:
                own[p] += g
        for i, (kind, g) in enumerate(zip(self.e_kind, self.e_gap)):
            if kind in (PARENT, JOIN) and g > 0:
                own[i] += g
        return own


def dependencies(parent: Any, start: Any, end: Any, bounds: list, services: Any = None,
                 lanes: Any = None) -> Deps:
    """The anchors of every span of traces ``bounds`` (rows ``lo`` .. ``hi`` - 1 each; ``parent``
    holds row indices, -1 for a root). ``services``/``lanes``: per trace, to tell which tasks
    followed which (None: tasks arrive at their recorded starts)."""
    n = len(parent)
    T = len(bounds)
    par = [int(p) for p in np.asarray(parent, dtype=np.int64).tolist()] + [-1] * T
    st = np.asarray(start, dtype=np.int64).tolist()
    en = np.maximum(np.asarray(end, dtype=np.int64), np.asarray(start, dtype=np.int64)).tolist()
    kids: list = [[] for _ in range(n + T)]
    for t, (lo, hi) in enumerate(bounds):
        rs = []
        for i in range(lo, hi):
            p = par[i]
            if p < 0 or p == i or not lo <= p < hi:
                par[i] = n + t
                rs.append(i)
            else:
                kids[p].append(i)
        kids[n + t] = rs
        st.append(min((st[i] for i in rs), default=0))
        en.append(max((en[i] for i in rs), default=0))
    total = n + T
    s_kind, s_ref, s_gap = [PARENT] * total, [-1] * total, [0] * total
    e_kind, e_ref, e_gap = [PARENT] * total, [-1] * total, [0] * total
    done: dict = {}
    for p in range(total):
        if kids[p]:
            _anchor_children(p, kids[p], st, en, s_kind, s_ref, s_gap, e_kind, e_ref, e_gap,
                             done)
        else:
            e_ref[p], e_gap[p] = p, en[p] - st[p]

    # the tasks: at their arrival, or after the task they followed
    order = sorted(range(T), key=lambda t: (st[n + t], t))
    origin = st[n + order[0]] if order else 0
    ends: dict = {}  # (service, lane) -> sorted [(end, task)] of the tasks arrived so far
    for t in order:
        v = n + t
        s_kind[v], s_gap[v] = ARRIVAL, st[v] - origin
        if services is not None:
            key = (services[t], lanes[t] if lanes is not None else None)
            seen = ends.setdefault(key, [])
            k = bisect.bisect_right(seen, (st[v], T)) - 1  # the latest end at or before it
            if k >= 0 and st[v] - seen[k][0] <= FOLLOW_NS:
                s_kind[v], s_ref[v], s_gap[v] = FOLLOW, n + seen[k][1], st[v] - seen[k][0]
            bisect.insort(seen, (en[v], t))

    ops = _order(order, n, kids, st, en)
    # cycles (a span its own ancestor) were cut by the store; any row not reached is left
    # where it was: evaluate it last, from its recorded times
    return Deps(n, par, st, en, s_kind, s_ref, s_gap, e_kind, e_ref, e_gap, done, ops,
                [n + t for t in range(T)], origin)


def _anchor_children(p: int, children: list, st: list, en: list, s_kind: list, s_ref: list,
                     s_gap: list, e_kind: list, e_ref: list, e_gap: list, done: dict) -> None:
    """The anchors of ``p``'s children's starts and of ``p``'s end (module docstring)."""
    children.sort(key=lambda c: (st[c], en[c], c))
    found: list = []  # siblings found ended, in that order
    ended = []  # heap of (end, order) of siblings not yet found ended
    running: list = []  # siblings in start order; the top one not ended is the latest
    is_done = set()
    last_end = None

    def settle(t: int) -> None:
        nonlocal last_end
        while ended and ended[0][0] <= t:
            e, k = heapq.heappop(ended)
            c = children[k]
            found.append(c)
            is_done.add(c)
            last_end = e if last_end is None or e > last_end else last_end
        while running and running[-1] in is_done:
            running.pop()

    def anchor(t: int) -> tuple:
        settle(t)
        top = running[-1] if running else None
        if top is not None and (last_end is None or st[top] > last_end):
            return SIBLING, top, t - st[top]
        if last_end is not None:
            return JOIN, len(found), t - last_end
        return PARENT, p, t - st[p]

    end_at = en[p]
    marked = False
    for k, c in enumerate(children):
        if not marked and st[c] > end_at:
            e_kind[p], e_ref[p], e_gap[p] = anchor(end_at)
            marked = True
        s_kind[c], s_ref[c], s_gap[c] = anchor(st[c])
        heapq.heappush(ended, (en[c], k))
        running.append(c)
    if not marked:
        e_kind[p], e_ref[p], e_gap[p] = anchor(end_at)
    done[p] = found


def _order(tasks: list, n: int, kids: list, st: list, en: list) -> list:
    """Evaluation order: per task in arrival order, depth first, each span's start, then its
    children (in start order) with its end placed where its end falls among them."""
    ops: list = []
    for t in tasks:
        stack = [n + t]
        while stack:
            op = stack.pop()
            if op < 0:
                ops.append(op)
                continue
            ops.append(op)
            ch = kids[op]
            # children start after their parent's start; its end goes before the children
            # that start after it
            seq: list = []
            placed = False
            for c in ch:
                if not placed and st[c] > en[op]:
                    seq.append(~op)
                    placed = True
                seq.append(c)
            if not placed:
                seq.append(~op)
            stack.extend(reversed(seq))
    return ops


def retime(deps: Deps, scale: Any) -> tuple:
    """New (start, end) per row (numpy int64, ``n + tasks`` rows) when each span's own time
    is multiplied by ``scale`` (per row, the first ``n``; virtual tasks keep theirs). Rows
    no task reaches keep their recorded times."""
    total = len(deps.parent)
    sc = np.ones(total, dtype=np.float64)
    sc[: deps.n] = np.asarray(scale, dtype=np.float64)
    scl = sc.tolist()
    origin = deps.origin
    new_s = [float(x - origin) for x in deps.start]
    new_e = [float(x - origin) for x in deps.end]
    # per parent: how many of its ended children (in the order found) the running max of
    # their new ends covers, and that max (a JOIN's prefixes only grow, in evaluation order)
    pm_k = [0] * total
    pm_v = [0.0] * total
    scl.append(1.0)  # the scale of time that is nobody's own (arrivals, follow-ons)
    done = deps.done
    for is_start, i, kind, ref, p, gap, own_row in deps.plan:
        if kind == PARENT or kind == SIBLING:
            b = new_s[ref]
        elif kind == JOIN:
            k = pm_k[p]
            if k < ref:
                seq = done[p]
                v = pm_v[p] if k else new_e[seq[0]]
                while k < ref:
                    x = new_e[seq[k]]
                    if x > v:
                        v = x
                    k += 1
                pm_k[p], pm_v[p] = k, v
            b = pm_v[p]
        elif kind == FOLLOW:
            b = new_e[ref]
        else:  # ARRIVAL: the gap is the time since the origin
            b = 0.0
        # a negative gap (a child that started before its parent: clock skew between
        # hosts) is nobody's own time and does not scale
        at = b + gap * scl[own_row] if gap > 0 else b + gap
        if is_start:
            new_s[i] = at
        else:  # never before its own start (its children may have begun before it)
            new_e[i] = at if at >= new_s[i] else new_s[i]
    return (np.rint(new_s).astype(np.int64) + origin,
            np.rint(new_e).astype(np.int64) + origin)


def covered_ns(starts: Any, ends: Any) -> int:
    """The length of the union of the intervals [starts, ends) (ns)."""
    starts = np.asarray(starts, dtype=np.int64)
    ends = np.asarray(ends, dtype=np.int64)
    order = np.argsort(starts, kind="stable")
    total, cur_a, cur_b = 0, None, None
    for a, b in zip(starts[order].tolist(), ends[order].tolist()):
        if cur_b is None or a > cur_b:
            if cur_b is not None:
                total += cur_b - cur_a
            cur_a, cur_b = a, b
        elif b > cur_b:
            cur_b = b
    if cur_b is not None:
        total += cur_b - cur_a
    return total
