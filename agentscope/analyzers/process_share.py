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
   are the ones whose own time it is (the claimants). The tree's demand in each sampling
   interval (its CPU and its threads' time runnable, less what spans with their own accounting
   used meanwhile) is shared among the claimants exposed to it, in proportion to each one's
   estimated rate; the rates are fitted to what was measured (:func:`_fit`: an EM fit, spans
   of one name tied first: a span that ran alone at one core and overlapped another keeps its
   core, the one that waited gets little). Claims add up to exactly what was measured, never
   more.
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

from .counters import MAX_HOLD_NS
from .evidence import PROCESS_SHORT as SHORT_INTERVALS

FIT_ROUNDS = 400  # EM rounds at most ...
FIT_TOLERANCE = 1e-4  # ... until no rate moves more than this (cores)
PRIOR = 0.05  # weight of the even split in each group's rate (a share of its exposure)
GROUP_PRIOR = 0.2  # weight of its group's rate in each span's (a share of its exposure)
SLACK_NS = 2_000_000_000  # a span joins a tree sampled from this long after its start


@dataclasses.dataclass(frozen=True)
class ProcessShare:
    """Per span: ``tree`` (index into the ProcessTrees, -1: none), ``root`` (its root pid),
    ``cpu_ns`` (CPU of its tree claimed by its own time, -1: no estimate: it has its own
    accounting, or no tree, or too little of its time was sampled), ``own_ns`` (its own time:
    open with no open child in its tree), ``sharers`` (mean number of spans whose own time it
    was, itself included, over its own time), ``short`` (own time under SHORT_INTERVALS
    sampling intervals), ``host`` (its tree's host, for spans that named none; else None),
    ``tree_cores`` (the cores its whole tree used, on average, over its own time),
    ``wait_ns`` (the time its tree's threads waited runnable for a CPU that it claimed);
    ``warnings``: what could not be joined, in words."""

    tree: Any
    root: Any
    cpu_ns: Any
    own_ns: Any
    sharers: Any
    short: Any
    host: Any
    tree_cores: Any
    wait_ns: Any
    warnings: tuple = ()

    @classmethod
    def none(cls, n: int) -> "ProcessShare":
        return cls(np.full(n, -1, dtype=np.int64), np.full(n, -1, dtype=np.int64),
                   np.full(n, -1.0), np.zeros(n), np.zeros(n), np.zeros(n, dtype=bool),
                   np.full(n, None, dtype=object), np.zeros(n), np.zeros(n))


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
    cores, runnable = np.zeros(n), np.zeros(n)
    for k in np.unique(tree[joined]).tolist():
        rows = joined[tree[joined] == k]
        claim = rows[own_cpu[rows] < 0]
        if not len(claim):
            continue
        lo, hi = trees.offsets[k], trees.offsets[k + 1]
        wait = trees.wait[lo:hi] if trees.wait is not None else np.zeros(hi - lo)
        got = _share(inp, rows, own_cpu, trees.ts_ns[lo:hi], trees.value[lo:hi], wait)
        if got is None:
            continue
        r, c, o, m, s, t, w = got
        cpu[r], own[r], sharers[r], short[r], cores[r], runnable[r] = c, o, m, s, t, w
    return ProcessShare(tree, root, cpu, own, sharers, short, host, cores, runnable, warnings)


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


def _share(inp: Any, rows: Any, own_cpu: Any, ts: Any, value: Any,
           wait: Any) -> "tuple | None":
    """The tree's demand shared among the spans ``rows`` of one tree (module docstring, 2):
    (claimant rows, their CPU ns, own ns, mean claimants, short, the cores their tree used
    meanwhile, the ns its threads waited runnable that they claimed) for those with enough of
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
    pk = np.asarray(pair_k, dtype=np.int64)
    pi = np.asarray(pair_i, dtype=np.int64)
    length = (b - a).astype(np.float64)
    own_all = np.bincount(pi, length[pk], m)  # its own time, sampled or not
    per_stretch = np.bincount(pk, None, len(a))
    sharers = np.bincount(pi, length[pk] * per_stretch[pk], m) / np.maximum(own_all, 1.0)
    # spans of one name in one tree (the same tool, the same model call) are alike a priori
    names = np.asarray(inp.name, dtype=object)[rows]
    _, group = np.unique(np.asarray([str(x) for x in names.tolist()], dtype=object),
                         return_inverse=True)
    got = _fit(ts, value, a, b, np.asarray(iv_fixed), pk, pi, m, group, wait)
    if got is None:
        return None
    claimed, own, cores, waited = got
    interval = float(np.median(np.diff(ts)))
    ok = claimant & (own > 0) & (own * 2 >= own_all)
    short = own_all < SHORT_INTERVALS * interval
    sel = np.flatnonzero(ok)
    return (rows[sel], claimed[sel], own[sel], sharers[sel], short[sel], cores[sel],
            waited[sel])


def _fit(ts: Any, value: Any, a: Any, b: Any, fixed: Any, pk: Any, pi: Any,
         m: int, group: Any, wait: Any) -> "tuple | None":
    """The tree's CPU in each sampling interval shared among the spans whose own time
    overlapped it, by the maximum a posteriori fit of constant per-span rates (module
    docstring, 2). ``a``, ``b``: the stretches between span boundaries; ``fixed``: the rate
    (cores) of accounted spans in each; ``(pk, pi)``: which claimant owned each stretch.
    Returns (CPU ns each claimant claimed, its own ns in sampled intervals, the cores its
    tree used meanwhile, the ns its tree's threads waited runnable that it claimed), or None.

    What is shared is the tree's *demand* in each interval: its CPU and the time its threads
    waited runnable for a CPU (``wait``: on a saturated host a computing span's thread waits
    as much as it runs, and its demand, not its CPU, is what stays the same beside other
    spans); each claimant's part of an interval's demand is split into CPU and waiting in
    the interval's proportions.

    The fit works on the samples as measured: each sampling interval's CPU (value x length)
    is what is known, and each span's exposure to it is the time its own time overlapped it
    (no finer than the samples). Time in an interval that no span owned is one more claimant
    (the process's own background: threads without spans), so that a span does not take CPU
    that was used while it was not there.

    Two stages (empirical Bayes): first the rate of each *group* of spans (``group``: one per
    span name in the tree: the same tool, the same model call), spans of a group tied, with a
    weak prior toward an even split (PRIOR); then each span's own rate, starting from its
    group's and pulled toward it (GROUP_PRIOR of its exposure). Where spans overlap in ways
    that cannot tell them apart one by one (a computing tool always beside another task's
    waiting one), the groups still can (across tasks, the same tool meets different
    partners); where two spans of one name can be told apart, the data decide."""
    ts = np.asarray(ts, dtype=np.int64)
    value = np.asarray(value, dtype=np.float64)
    # sampling intervals (ts[k-1], ts[k]] that describe their time (no hole between runs)
    dt = np.diff(ts)
    held = dt <= MAX_HOLD_NS
    lo_s, hi_s = ts[:-1], ts[1:]
    # the pieces: stretches cut at sample times, each in one sampling interval
    cuts = np.unique(np.concatenate([a, b, ts[(ts > a.min()) & (ts < b.max())]]))
    p_a, p_b = cuts[:-1], cuts[1:]
    stretch = np.searchsorted(a, p_a, side="right") - 1
    inside = (stretch >= 0) & (p_b <= b[np.maximum(stretch, 0)])
    sample = np.searchsorted(hi_s, p_b, side="left")  # the interval ending at or after p_b
    inside &= (sample < len(hi_s))
    sample = np.minimum(sample, len(hi_s) - 1)
    inside &= (p_a >= lo_s[sample]) & held[sample]
    p_a, p_b, stretch, sample = p_a[inside], p_b[inside], stretch[inside], sample[inside]
    if not len(p_a):
        return None
    plen = (p_b - p_a).astype(np.float64)
    # exposures: (sampling interval, claimant) -> ns; the stretch's claimants over each piece
    order = np.argsort(pk, kind="stable")
    pk_sorted, pi_sorted = pk[order], pi[order]
    first = np.searchsorted(pk_sorted, stretch, side="left")
    count = np.searchsorted(pk_sorted, stretch, side="right") - first
    rep = np.repeat(np.arange(len(p_a)), count)
    idx = np.repeat(first - np.cumsum(np.concatenate([[0], count[:-1]])), count) + \
        np.arange(count.sum())
    e_span = pi_sorted[idx]
    e_samp = sample[rep]
    e_len = plen[rep]
    nk = len(hi_s)
    # the background claimant (index m): the part of each used interval no span owned
    used = np.unique(sample)
    owned = np.zeros(nk)
    np.add.at(owned, sample, plen)  # time covered by some claimant's own time
    span_len = (hi_s - lo_s).astype(np.float64)
    free = np.maximum(span_len[used] - owned[used], 0.0)
    e_span = np.concatenate([e_span, np.full(len(used), m)])
    e_samp = np.concatenate([e_samp, used])
    e_len = np.concatenate([e_len, free])
    key = e_samp * (m + 1) + e_span
    key, inv = np.unique(key, return_inverse=True)
    exp = np.bincount(inv, e_len)
    ek, es = key // (m + 1), key % (m + 1)
    # what each used interval measured, less what accounted spans used in it
    fixed_ns = np.zeros(nk)
    np.add.at(fixed_ns, sample, fixed[stretch] * plen)
    cpu_only = np.maximum(value[1:] * span_len - fixed_ns, 0.0)
    waiting = np.asarray(wait, dtype=np.float64)[1:] * span_len
    cpu = cpu_only + waiting  # the demand each interval measured
    n = m + 1
    exposure = np.bincount(es, exp, n)
    # the even split, per claimant: its part of each interval by exposure alone
    by_k = np.bincount(ek, exp, nk)
    even = np.bincount(es, cpu[ek] * exp / np.where(by_k[ek] > 0, by_k[ek], 1.0), n)
    # stage 1: the groups' rates (the background is a group of its own)
    grp = np.concatenate([np.asarray(group, dtype=np.int64), [-1]])
    _, grp = np.unique(grp, return_inverse=True)
    ng = int(grp.max()) + 1
    g_key, g_inv = np.unique(ek * ng + grp[es], return_inverse=True)
    g_exp = np.bincount(g_inv, exp)
    g_k, g_g = g_key // ng, g_key % ng
    g_rate = _em(cpu, g_k, g_g, g_exp, nk, ng, np.bincount(grp, even, ng), PRIOR,
                 np.bincount(grp, exposure, ng))[0]
    # stage 2: each span's rate, from its group's and pulled toward it
    prior = g_rate[grp] * exposure
    _, alloc = _em(cpu, ek, es, exp, nk, n, prior, GROUP_PRIOR, exposure, start=g_rate[grp])
    on_cpu = np.where(cpu[ek] > 0, cpu_only[ek] / np.where(cpu[ek] > 0, cpu[ek], 1.0), 0.0)
    claimed = np.bincount(es, alloc * on_cpu, n)[:m]
    waited = np.bincount(es, alloc * (1.0 - on_cpu), n)[:m]
    # the cores the whole tree used while each span ran (its intervals, by its exposure)
    cores = np.bincount(es, cpu_only[ek] / np.maximum(span_len[ek], 1.0) * exp, n)[:m] / \
        np.maximum(exposure[:m], 1.0)
    return claimed, exposure[:m], cores, waited


def _em(cpu: Any, k: Any, j: Any, exp: Any, nk: int, n: int, prior: Any, weight: float,
        exposure: Any, start: Any = None) -> tuple:
    """Rates of ``n`` claimants whose exposures ``exp`` (ns) to sampling interval ``k`` explain
    its measured ``cpu`` (ns), as sums of constant rates: the EM fit (maximum likelihood of a
    Poisson model, as emission tomography fits), with ``prior`` core-ns per claimant weighted
    ``weight`` of its exposure. Returns (rates, each pair's part of its interval's CPU: they
    sum to the interval's CPU)."""
    w = np.maximum(prior / np.maximum(exposure, 1.0) if start is None else start, 1e-9)
    alloc = np.zeros(len(k))
    for _ in range(FIT_ROUNDS):
        pred = np.bincount(k, w[j] * exp, nk)
        alloc = cpu[k] * w[j] * exp / np.where(pred[k] > 0, pred[k], 1.0)
        new = (np.bincount(j, alloc, n) + weight * prior) / \
            np.maximum((1 + weight) * exposure, 1.0)
        done = np.max(np.abs(new - w)) < FIT_TOLERANCE
        w = np.maximum(new, 1e-9)
        if done:
            break
    return w, alloc
