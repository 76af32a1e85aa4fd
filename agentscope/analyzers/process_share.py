"""Spans without resource accounting of their own, judged by the counters of the process tree
that emitted them.

An agent built on a framework that emits OpenTelemetry spans (``invoke_agent``, ``chat``,
``execute_tool``) and started under ``agentscope run`` has spans with no CPU accounting of
ours, while the sidecar sampled its process tree (``agentscope.tree.cpu.utilization``: the
cores the process and its children used, every sampling interval). This module joins the two
(docs/identity.md):

1. **Which tree.** A span joins the tree whose processes include its resource's
   ``process.pid`` on its ``host.name`` (``agentscope run`` gives the program both, through
   ``OTEL_RESOURCE_ATTRIBUTES``), sampled while it ran; without a host, the pid alone where one
   tree has it. A trace whose spans carry no pid joins a tree where its service's pid-less
   traces overlap exactly one sampled tree (on their host, where they name one); several: none,
   and a warning.
2. **Whose CPU.** At each moment the spans of a tree that are open and have no open child in it
   are the ones whose own time it is (the claimants). The tree's CPU over each stretch between
   two span boundaries (less what spans with their own accounting used meanwhile) is shared
   among the claimants of that stretch, in proportion to each one's estimated rate; the rates
   are the maximum-likelihood fit of the measured CPU as sums of constant per-span rates (an
   EM fit: a span that ran alone at one core and overlapped another keeps its core, the one
   that waited gets little). Claims add up to exactly what was measured, never more.
3. **How sure.** A span alone in its tree is judged as surely as the samples allow; one that
   shared its time is told so, with a lower confidence (where spans always overlapped the same
   way, the fit cannot tell them apart and splits evenly); one whose own time spans fewer than
   :data:`SHORT_INTERVALS` sampling intervals has a stated low confidence.

The result (:class:`ProcessShare`) gives such spans an own CPU time and own time, which
:func:`~.evidence.classify` judges by its one rule for measured spans.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from .counters import integrate
from .evidence import PROCESS_SHORT as SHORT_INTERVALS

FIT_ROUNDS = 400  # EM rounds at most ...
FIT_TOLERANCE = 1e-4  # ... until no rate moves more than this (cores)
SLACK_NS = 2_000_000_000  # a span joins a tree sampled from this long after its start


@dataclasses.dataclass(frozen=True)
class ProcessShare:
    """Per span: ``tree`` (index into the ProcessTrees, -1: none), ``root`` (its root pid),
    ``cpu_ns`` (CPU of its tree claimed by its own time, -1: no estimate: it has its own
    accounting, or no tree, or too little of its time was sampled), ``own_ns`` (its own time:
    open with no open child in its tree), ``sharers`` (mean number of spans whose own time it
    was, itself included, over its own time), ``short`` (own time under SHORT_INTERVALS
    sampling intervals), ``host`` (its tree's host, for spans that named none; else None);
    ``warnings``: what could not be joined, in words."""

    tree: Any
    root: Any
    cpu_ns: Any
    own_ns: Any
    sharers: Any
    short: Any
    host: Any
    warnings: tuple = ()

    @classmethod
    def none(cls, n: int) -> "ProcessShare":
        return cls(np.full(n, -1, dtype=np.int64), np.full(n, -1, dtype=np.int64),
                   np.full(n, -1.0), np.zeros(n), np.zeros(n), np.zeros(n, dtype=bool),
                   np.full(n, None, dtype=object))

    @property
    def estimated(self) -> Any:
        return np.asarray(self.cpu_ns) >= 0


def process_share(inp: Any, trees: Any) -> ProcessShare:
    """The process-tree evidence of every span of ``inp`` (an AnalysisInput) without
    accounting of its own, from ``trees`` (the store's ProcessTrees, or None)."""
    n = len(inp.start_ns)
    out = ProcessShare.none(n)
    if trees is None or not len(trees) or not n:
        return out
    tree, warnings = _join(inp, trees)
    if not (tree >= 0).any():
        return dataclasses.replace(out, warnings=warnings)
    own_cpu = np.asarray(inp.own_cpu, dtype=np.float64)
    host = np.full(n, None, dtype=object)
    span_host = np.asarray(inp.host, dtype=object) if inp.host is not None else \
        np.full(n, None, dtype=object)
    joined = np.flatnonzero(tree >= 0)
    no_host = joined[np.equal(span_host[joined], None)]
    host[no_host] = np.asarray(trees.host, dtype=object)[tree[no_host]]
    root = np.where(tree >= 0, trees.root[np.maximum(tree, 0)], -1)
    cpu, own, sharers, short = out.cpu_ns.copy(), out.own_ns.copy(), out.sharers.copy(), \
        out.short.copy()
    for k in np.unique(tree[joined]).tolist():
        rows = joined[tree[joined] == k]
        claim = rows[own_cpu[rows] < 0]
        if not len(claim):
            continue
        lo, hi = trees.offsets[k], trees.offsets[k + 1]
        got = _share(inp, rows, own_cpu, trees.ts_ns[lo:hi], trees.value[lo:hi])
        if got is None:
            continue
        r, c, o, m, s = got
        cpu[r], own[r], sharers[r], short[r] = c, o, m, s
    return ProcessShare(tree, root, cpu, own, sharers, short, host, warnings)


def _join(inp: Any, trees: Any) -> tuple:
    """The tree of each span (-1: none) and warnings (see the module docstring, 1)."""
    n = len(inp.start_ns)
    tree = np.full(n, -1, dtype=np.int64)
    pid = np.asarray(inp.pid, dtype=np.int64)
    start = np.asarray(inp.start_ns, dtype=np.int64)
    end = np.asarray(inp.end_ns, dtype=np.int64)
    host = np.asarray(inp.host, dtype=object) if inp.host is not None else \
        np.full(n, None, dtype=object)
    first = np.asarray(trees.first_ns, dtype=np.int64) - SLACK_NS
    last = np.asarray(trees.last_ns, dtype=np.int64) + SLACK_NS
    by_pid: dict = {}
    for k, members in enumerate(trees.members):
        for p in members:
            by_pid.setdefault(p, []).append(k)
    warnings = []
    # 1a. by process.pid (and host.name, where the span names one)
    with_pid = np.flatnonzero(pid >= 0)
    if len(with_pid):
        keys = list(zip(host[with_pid].tolist(), pid[with_pid].tolist()))
        groups: dict = {}
        for row, key in zip(with_pid.tolist(), keys):
            groups.setdefault(key, []).append(row)
        for (h, p), rows in groups.items():
            cands = [k for k in by_pid.get(p, ()) if h is None or trees.host[k] == h]
            if not cands:
                continue
            rows = np.asarray(rows, dtype=np.int64)
            for k in cands:  # the first tree sampled while the span ran
                inside = (tree[rows] < 0) & (start[rows] >= first[k]) & (start[rows] <= last[k])
                tree[rows[inside]] = k
    # 1b. a trace with no pid on any span: by its service, where one tree overlaps it
    trace_no = np.asarray(inp.trace_no, dtype=np.int64)
    if (pid < 0).any():
        cuts = np.flatnonzero(np.diff(trace_no)) + 1
        lo = np.concatenate([[0], cuts])
        hi = np.concatenate([cuts, [n]])
        no_pid = np.maximum.reduceat((pid >= 0).astype(np.int64), lo) == 0
        t_start = np.minimum.reduceat(start, lo)
        t_end = np.maximum.reduceat(end, lo)
        service = np.asarray(inp.service, dtype=object)
        by_service: dict = {}
        for t in np.flatnonzero(no_pid).tolist():
            rows = slice(lo[t], hi[t])
            names = [s for s in service[rows].tolist() if s is not None]
            hosts = {h for h in host[rows].tolist() if h is not None}
            overlapping = [k for k in range(len(trees)) if first[k] <= t_end[t]
                           and last[k] >= t_start[t] and (not hosts or trees.host[k] in hosts)]
            entry = by_service.setdefault(names[0] if names else None, [set(), []])
            entry[0].update(overlapping)
            entry[1].append((t, overlapping))
        for svc, (seen, traces) in by_service.items():
            if len(seen) == 1:
                (k,) = seen
                for t, overlapping in traces:
                    if overlapping:
                        tree[lo[t]:hi[t]] = k
            elif len(seen) > 1:
                name = "with no service" if svc is None else f"of service {svc!r}"
                warnings.append(
                    f"{len(traces)} trace(s) {name} carry no process.pid and overlap "
                    f"{len(seen)} sampled process trees: not joined to any (their spans are "
                    "judged by their stage alone); run the agent under `agentscope run`, or "
                    "set process.pid on its OpenTelemetry resource (docs/identity.md)")
    return tree, tuple(warnings)


def _share(inp: Any, rows: Any, own_cpu: Any, ts: Any, value: Any) -> "tuple | None":
    """The tree's CPU shared among the spans ``rows`` of one tree (module docstring, 2):
    (claimant rows, their CPU ns, own ns, mean claimants, short) for those with enough of
    their own time sampled; None where no interval was."""
    if len(ts) < 2:
        return None
    start = np.asarray(inp.start_ns, dtype=np.int64)[rows]
    end = np.asarray(inp.end_ns, dtype=np.int64)[rows]
    m = len(rows)
    local = {r: i for i, r in enumerate(rows.tolist())}
    parent_idx = np.asarray(inp.parent_idx, dtype=np.int64)[rows]
    par = np.asarray([local.get(p, -1) for p in parent_idx.tolist()], dtype=np.int64)
    depth = np.zeros(m, dtype=np.int64)
    up = par.copy()
    for _ in range(m):  # each round climbs one level
        has = up >= 0
        if not has.any():
            break
        depth += has
        up = np.where(has, par[np.maximum(up, 0)], -1)
    claimant = own_cpu[rows] < 0
    # spans with their own accounting: their CPU (spread over their interval) is theirs
    rate = np.where(claimant, 0.0, np.maximum(own_cpu[rows], 0.0)
                    / np.maximum(end - start, 1).astype(np.float64))
    # events: starts outermost first, ends innermost first, ends before starts at one time
    t = np.concatenate([start, end])
    kind = np.concatenate([np.ones(m, dtype=np.int64), np.zeros(m, dtype=np.int64)])
    who = np.concatenate([np.arange(m), np.arange(m)])
    order = np.lexsort((np.concatenate([depth, -depth]), kind, t))
    is_open = np.zeros(m, dtype=bool)
    counted = np.zeros(m, dtype=bool)  # it took its parent's turn while open
    open_kids = np.zeros(m, dtype=np.int64)
    active: dict = {}  # insertion-ordered set of the spans whose own time it is
    iv_a, iv_b, iv_fixed = [], [], []
    pair_k, pair_i = [], []
    prev = None
    par_l, claim_l, rate_l = par.tolist(), claimant.tolist(), rate.tolist()
    for ti, ki, i in zip(t[order].tolist(), kind[order].tolist(), who[order].tolist()):
        if prev is not None and ti > prev and active:
            k = len(iv_a)
            fixed = 0.0
            for j in active:
                if claim_l[j]:
                    pair_k.append(k)
                    pair_i.append(j)
                else:
                    fixed += rate_l[j]
            iv_a.append(prev)
            iv_b.append(ti)
            iv_fixed.append(fixed)
        prev = ti
        p = par_l[i]
        if ki == 1:
            if p >= 0 and is_open[p]:
                counted[i] = True
                open_kids[p] += 1
                active.pop(p, None)
            is_open[i] = True
            if open_kids[i] == 0:
                active[i] = None
        else:
            is_open[i] = False
            active.pop(i, None)
            if counted[i] and p >= 0 and is_open[p]:
                open_kids[p] -= 1
                if open_kids[p] == 0:
                    active[p] = None
    if not pair_k:
        return None
    a = np.asarray(iv_a, dtype=np.int64)
    b = np.asarray(iv_b, dtype=np.int64)
    length = (b - a).astype(np.float64)
    total, covered = integrate(ts, value, a, b)
    sampled = (covered * 2 >= length) & (covered > 0)
    # the CPU of each stretch, over its whole length, less what accounted spans used
    cpu = np.where(sampled, np.maximum(total / np.maximum(covered, 1.0) * length
                                       - np.asarray(iv_fixed) * length, 0.0), 0.0)
    pk = np.asarray(pair_k, dtype=np.int64)
    pi = np.asarray(pair_i, dtype=np.int64)
    keep = sampled[pk]
    own_all = np.bincount(pi, length[pk], m)
    pk, pi = pk[keep], pi[keep]
    nk = len(a)
    own = np.bincount(pi, length[pk], m)  # own time in sampled stretches
    per_stretch = np.bincount(pk, None, nk)
    # EM: rates w; each stretch's CPU split in proportion to the rates of its claimants
    w = np.where(own > 0, 1.0, 0.0)
    alloc = np.zeros(len(pk))
    for _ in range(FIT_ROUNDS):
        d = np.bincount(pk, w[pi], nk)
        alloc = np.where(d[pk] > 0, cpu[pk] * w[pi] / np.where(d[pk] > 0, d[pk], 1.0),
                         cpu[pk] / np.maximum(per_stretch[pk], 1))
        new = np.bincount(pi, alloc, m) / np.maximum(own, 1.0)
        done = np.max(np.abs(new - w)) < FIT_TOLERANCE
        w = np.maximum(new, 1e-12)
        if done:
            break
    claimed = np.bincount(pi, alloc, m)
    sharers = np.bincount(pi, length[pk] * per_stretch[pk], m) / np.maximum(own, 1.0)
    interval = float(np.median(np.diff(ts))) if len(ts) > 1 else 0.0
    ok = claimant & (own > 0) & (own * 2 >= own_all)
    short = own_all < SHORT_INTERVALS * interval
    sel = np.flatnonzero(ok)
    return rows[sel], claimed[sel], own[sel], sharers[sel], short[sel]
