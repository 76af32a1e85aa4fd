"""The fleet engine: every trace's critical path, classified and aggregated with numpy.

From the store's :class:`~agentscope.store.schema.AnalysisInput` (and its counter series, if
any) to a :class:`~agentscope.analyzers.results.Fleet`, for a million spans at a time:

1. walk every trace's critical path (:func:`~.critical_path.walk_many`) into flat section
   arrays (task, span row, start, end);
2. classify every span at once (:func:`~.evidence.classify`; spans without accounting of their
   own judged by the CPU of the sampled process tree that emitted them, where it is known:
   :func:`~.process_share.process_share`), and give each section its span's class shares (a
   gap between root spans: untraced waiting);
3. where there are counters, their means over each section (:func:`~.counters.section_means`)
   change the shares (:func:`~.counters.adjust`);
4. sum section lengths times shares per task with ``np.bincount``; the verdict, confidence
   and evidence sentences by the rules of :mod:`.verdict`.

The per-trace reference of the same rules (:mod:`.reference`) is checked against this.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

import numpy as np

from .._gc import gc_paused
from .counters import adjust, children_timed, section_means
from .critical_path import walk_many
from .evidence import (CLASSES, GAP_CLASS, GAP_CONFIDENCE, GAP_SHARES, MEASURED_BASIS,
                       SELF_TIME_STAGES, UNTRACED_BASIS, classify, process_confidence)
from .process_share import ProcessShare, process_share
from .reliability import lost_time
from .results import (CODE, Fleet, JoinedEvidence, LazySegments, SectionEvidence, Sections,
                      Shares, SpanIds, TaskResult, assumed_columns, per_class, sliced_evidence)
from .threads import thread_facts
from .verdict import (NO_CLASS, assumed_parts, bottlenecks, evidence_kept, evidence_line,
                      span_label, summarize, task_confidence)

_GAP = CLASSES.index(GAP_CLASS)
_GAP_SHARES = [GAP_SHARES.get(c, 0.0) for c in CLASSES]


def analyze(inp: Any, counters: Any = None, lags: Any = None, trees: Any = None) -> Fleet:
    """Analyse every trace of ``inp`` (an AnalysisInput); ``counters`` (the store's
    CounterSeries for the metrics :data:`~.counters.METRICS`, or None) join each section
    where ``inp`` carries the counter columns; ``lags``: the event-loop lags the in-process
    samplers measured (the store's LoopLags, or None); ``trees``: the process trees the
    sidecars sampled (the store's ProcessTrees, or None)."""
    with gc_paused():
        return _analyze(inp, counters, lags, trees)


def _analyze(inp: Any, counters: Any, lags: Any = None, trees: Any = None) -> Fleet:
    trace_no = np.asarray(inp.trace_no)
    n = len(trace_no)
    cuts = (np.flatnonzero(np.diff(trace_no)) + 1).tolist() if n else []
    bounds = list(zip([0] + cuts, cuts + [n])) if n else []

    # 1. the walks; a task per trace that has a root (a parent cycle alone has none)
    w = walk_many(inp.parent_idx, inp.start_ns, inp.end_ns, inp.kind, bounds)
    heads = [t for t in range(len(bounds)) if w.roots[t]]
    task_of_trace = np.full(len(bounds), -1, dtype=np.int64)
    task_of_trace[heads] = np.arange(len(heads))

    # 2. every span classified; each section gets its span's shares
    proc, spans = _classified(inp, lags, trees)
    task = task_of_trace[np.asarray(w.trace, dtype=np.int64)]  # sections exist under roots
    span = np.asarray(w.span, dtype=np.int64)
    start = np.asarray(w.start, dtype=np.int64)
    end = np.asarray(w.end, dtype=np.int64)
    is_gap = span < 0
    row = np.where(is_gap, 0, span)
    if n:
        sec_shares = spans.shares[row]
        sec_conf = np.where(is_gap, GAP_CONFIDENCE, spans.confidence[row])
        sec_cls = np.where(is_gap, _GAP, spans.cls[row])
        sec_basis = np.where(is_gap, UNTRACED_BASIS, spans.basis[row])
    else:
        sec_shares, sec_conf = np.zeros((len(span), len(CLASSES))), np.zeros(len(span))
        sec_cls = np.full(len(span), _GAP)
        sec_basis = np.full(len(span), UNTRACED_BASIS)
    sec_shares[is_gap] = _GAP_SHARES
    stage = np.asarray(inp.stage, dtype=object)
    orchestrates = np.isin(stage, SELF_TIME_STAGES)
    # the agents' own code: a task's or agent's own time, where measured (unmeasured, it is
    # untraced: nothing says the agent was computing rather than waiting for something)
    sec_orch = ~is_gap & (orchestrates[row] if n else False) & (sec_basis == MEASURED_BASIS)

    # 3. the counters over each section (host, GPU, model server), where there are any
    notes = None
    if counters is not None and inp.with_counters and len(span):
        before = sec_shares
        sec_shares, sec_conf, notes = _with_counters(inp, counters, row, is_gap, start, end,
                                                     sec_shares, sec_conf, sec_orch, stage,
                                                     proc, spans)
        if notes is not None:
            sec_cls = np.where(is_gap, _GAP, np.argmax(sec_shares, axis=1))
            # where the counters moved a section's time to another class, that class rests on
            # them (a note alone, such as "host not saturated", leaves the basis as it was)
            moved = np.any(np.abs(sec_shares - before) > 1e-9, axis=1)
            sec_basis = np.where(moved & ~is_gap, MEASURED_BASIS, sec_basis)

    # 4. per task: shares, bottleneck, confidence
    length = (end - start).astype(np.float64)
    n_tasks = len(heads)
    # (float even when no task has a section: tasks whose spans all last 0 ns have none, and
    # bincount then gives integers that the shares' division below cannot write into)
    totals = np.stack([np.bincount(task, length * sec_shares[:, c], n_tasks)
                       for c in range(len(CLASSES))], axis=1).astype(np.float64, copy=False) \
        if n_tasks else np.zeros((0, len(CLASSES)))
    weight = np.bincount(task, length, n_tasks)
    quality = np.divide(np.bincount(task, length * sec_conf, n_tasks), weight,
                        out=np.zeros(n_tasks), where=weight > 0)
    orchestration = np.bincount(task, length * sec_orch, n_tasks)
    measured = np.bincount(task, length * (sec_basis == MEASURED_BASIS), n_tasks)
    # the part of each section (in one class) that rests on a stage label or an assumption,
    # not on measurement; per task and class
    sec_assumed, sec_assumed_cls = assumed_parts(sec_shares, sec_basis, spans.wait_cls[row]) \
        if n else (np.zeros(len(span)), np.zeros(len(span), dtype=np.int8))
    assumed = np.bincount(task * len(CLASSES) + sec_assumed_cls, length * sec_assumed,
                          n_tasks * len(CLASSES)).astype(np.float64, copy=False).reshape(
                              n_tasks, len(CLASSES))  # (float even when empty)
    t_start = np.asarray([w.starts[t] for t in heads], dtype=np.int64)
    duration = np.maximum(np.asarray([w.ends[t] for t in heads], dtype=np.int64) - t_start, 0)
    task_shares = np.divide(totals, duration[:, None].astype(np.float64),
                            out=np.zeros_like(totals), where=duration[:, None] > 0)
    task_assumed = np.divide(assumed, duration[:, None].astype(np.float64),
                             out=np.zeros_like(assumed), where=duration[:, None] > 0)
    task_conf = task_confidence(quality, task_shares) if n_tasks else np.zeros(0)
    task_conf[weight <= 0] = 0.0
    firsts = np.asarray(w.first, dtype=np.int64)[heads] if n_tasks else \
        np.zeros(0, dtype=np.int64)
    has_first = firsts < len(task)
    first_cls = np.where(has_first, sec_cls[np.minimum(firsts, max(len(task) - 1, 0))]
                         if len(task) else NO_CLASS, NO_CLASS)
    verdicts = bottlenecks(task_shares, duration, first_cls) if n_tasks else np.zeros(0, int)

    seq = np.arange(len(task)) - firsts[task] if len(task) else task
    span_ids, names = np.asarray(inp.span_id, dtype=object), np.asarray(inp.name, dtype=object)
    sections = Sections(
        task, seq, SpanIds.of(_pick(span_ids, row, is_gap, None)),
        _shared(_pick(names, row, is_gap, "(gap)")), _shared(_pick(stage, row, is_gap, None)),
        start, end, sec_cls.astype(CODE), sec_conf, sec_shares,
        SectionEvidence(spans, np.where(is_gap, -1, span), notes), sec_basis.astype(CODE),
        *assumed_columns(sec_assumed, sec_assumed_cls))

    # time lost to timeouts and to retried failures, on each task's path
    timeout_ns, retry_ns = lost_time(inp, task, span, start, end, n_tasks)
    timeout_l, retry_l = timeout_ns.tolist(), retry_ns.tolist()

    # the evidence: the spans holding each task's path longest, in words
    tops = _longest_held(task, span, end - start, n_tasks, duration)
    words = sections.evidence.texts_at([k for top in tops for _, _, k in top])
    sec_cls_l = sec_cls.tolist()
    stages = stage.tolist()
    bounds_of_task = firsts.tolist() + [len(task)]
    share_rows, conf_l = task_shares.tolist(), task_conf.tolist()
    assumed_rows = task_assumed.tolist()
    verdict_l, orch_l = verdicts.tolist(), orchestration.tolist()
    measured_l = np.divide(measured, weight, out=np.zeros(n_tasks), where=weight > 0).tolist()
    orphan = np.asarray(inp.orphan, dtype=bool) if n else np.zeros(0, dtype=bool)
    orphans_of_trace = np.bincount(trace_no - trace_no[0], orphan, len(bounds)).astype(
        np.int64).tolist() if n else []
    orphan_root = orphan & (np.asarray(inp.parent_idx) < 0) if n else orphan
    orphan_roots_of_trace = np.bincount(trace_no - trace_no[0], orphan_root,
                                        len(bounds)).astype(np.int64).tolist() if n else []
    durations, starts = duration.tolist(), t_start.tolist()
    tasks = []
    at = 0
    for t, trace in enumerate(heads):
        lo, hi = bounds[trace]
        a, b = bounds_of_task[t], bounds_of_task[t + 1]
        dur = durations[t]
        evidence = []
        for i, held, k in tops[t]:
            label = "(gap)" if i < 0 else span_label(names[i], stages[i])
            evidence.append(evidence_line(label, held, dur, CLASSES[sec_cls_l[k]], words[at]))
            at += 1
        roots = w.roots[trace]
        root = next((r for r in roots if stages[r] == "task"), roots[0])
        trace_id = inp.trace_id[root]
        if trace_id is None:
            trace_id = next((x for x in inp.trace_id[lo:hi] if x is not None), "")
        tasks.append(TaskResult(
            trace_id, names[root], inp.lane[root], inp.service[root], starts[t], dur,
            CLASSES[verdict_l[t]], conf_l[t], per_class(share_rows[t]),
            tuple(evidence),
            LazySegments(sections, a, b), hi - lo, int(orch_l[t]), 0, w.off_path[trace],
            round(measured_l[t], 4), orphans_of_trace[trace], span_ids[root],
            per_class(assumed_rows[t]), int(timeout_l[t]), int(retry_l[t]),
            orphan_roots_of_trace[trace]))
    orphan_roots = int(orphan_root.sum()) if n else 0
    return Fleet(tuple(tasks), sections, summarize(tasks, sections, orphan_roots),
                 proc.warnings)


def joined(parts: Any) -> Fleet:
    """The analyses of batches of traces (each an :func:`analyze` of its traces, batches in
    trace order) as one: tasks and sections in order, the summary over all of them. The
    same as one analysis of all the traces where no trace's analysis reads another's
    (the store's ``coupled_traces``)."""
    parts = list(parts)
    offsets = np.cumsum([0] + [len(p.tasks) for p in parts])
    secs = [p.sections for p in parts]

    def cat(name: str) -> Any:
        values = [getattr(x, name) for x in secs]
        if any(v is None for v in values):  # (absent in a part: all measured, nothing assumed)
            if all(v is None for v in values):
                return None
            values = [_absent(name, x) if v is None else v for v, x in zip(values, secs)]
        if name == "span_id":
            return SpanIds.joined(values)
        return np.concatenate(values) if values else values

    sections = Sections(
        np.concatenate([np.asarray(x.task, dtype=np.int64) + off
                        for x, off in zip(secs, offsets.tolist())]),
        cat("seq"), cat("span_id"), cat("name"), cat("stage"), cat("start_ns"),
        cat("end_ns"), cat("cls"), cat("confidence"),
        Shares.joined([x.shares for x in secs]),
        JoinedEvidence([x.evidence for x in secs]), cat("basis"), cat("assumed"),
        cat("assumed_cls"))
    return over(parts, sections)


def over(parts: Any, sections: Sections) -> Fleet:
    """The tasks of ``parts`` (batches of traces, in trace order) over ``sections`` (theirs,
    one after another), with the summary of them all and every part's warnings."""
    tasks = repointed([t for p in parts for t in p.tasks], sections)
    warnings = tuple(dict.fromkeys(w for p in parts for w in p.warnings))
    return Fleet(tasks, sections, _summary(tasks, sections), warnings)


def repointed(tasks: Any, sections: Optional[Sections]) -> tuple:
    """``tasks`` with their segments read from ``sections`` (theirs, joined) rather than
    from their part's: else the tasks keep every part's arrays alive beside the joined ones
    (every section held twice). None: segments that read no sections until a later
    ``repointed`` points them (a part whose sections went to files). Segments already made
    are carried over; segments that are not lazy are kept as they are."""
    bounds = [0] * (len(tasks) + 1) if sections is None else np.searchsorted(
        np.asarray(sections.task, dtype=np.int64), np.arange(len(tasks) + 1)).tolist()
    out = []
    for k, t in enumerate(tasks):
        if isinstance(t.segments, LazySegments):
            segments = LazySegments(sections, bounds[k], bounds[k + 1])
            segments._items = t.segments._items
            t = t._replace(segments=segments)
        out.append(t)
    return tuple(out)


def _summary(tasks: Any, sections: Sections) -> Any:
    """The summary of ``tasks`` (with their ``sections``): each task knows its orphan
    roots."""
    return summarize(tasks, sections, sum(t.orphan_roots for t in tasks))


def part(fleet: Fleet, lo: int, hi: int, summary: bool = True) -> Fleet:
    """Tasks ``lo`` .. ``hi`` - 1 of ``fleet`` (and their sections) as a fleet of their own,
    with their own summary (None without ``summary``: a piece to be :func:`joined`)."""
    sec = fleet.sections
    task = np.asarray(sec.task, dtype=np.int64)
    a, b = np.searchsorted(task, [lo, hi]).tolist()

    def cut(value: Any) -> Any:
        return None if value is None else value[a:b]

    sections = Sections(task[a:b] - lo, cut(sec.seq), cut(sec.span_id), cut(sec.name),
                        cut(sec.stage), cut(sec.start_ns), cut(sec.end_ns), cut(sec.cls),
                        cut(sec.confidence), cut(sec.shares), sliced_evidence(sec.evidence, a, b),
                        cut(sec.basis), cut(sec.assumed), cut(sec.assumed_cls))
    tasks = fleet.tasks[lo:hi]
    return Fleet(tasks, sections, _summary(tasks, sections) if summary else None,
                 fleet.warnings)


def merged(previous: Fleet, fresh: Fleet, traces: Any) -> Fleet:
    """``previous`` with the tasks of the trace ids ``traces`` taken out and those ``fresh``
    found for them (an analysis of just those traces) put in, in trace-id order: what one
    analysis of all the traces gives, where no trace's analysis reads another's spans."""
    redone = set(traces)
    kept = [(t.trace_id, 0, i) for i, t in enumerate(previous.tasks) if t.trace_id not in redone]
    if not kept and not fresh.tasks:
        return part(fresh, 0, 0)
    out = _interleaved([previous, fresh], kept + [(t.trace_id, 1, i)
                                                  for i, t in enumerate(fresh.tasks)])
    return dataclasses.replace(out, warnings=tuple(dict.fromkeys(previous.warnings
                                                                 + fresh.warnings)))


def in_trace_order(fleets: Any) -> Fleet:
    """The analyses of parts of the traces that are not ranges of trace ids (a ClickHouse
    window split by the hash of the trace id) as one, tasks in trace-id order as
    :func:`joined` gives them of batches in trace order: the same as one analysis of all the
    traces, where no trace's analysis reads another's."""
    fleets = list(fleets)
    out = _interleaved(fleets, [(t.trace_id, k, i) for k, f in enumerate(fleets)
                                for i, t in enumerate(f.tasks)])
    return dataclasses.replace(out, warnings=tuple(dict.fromkeys(
        w for f in fleets for w in f.warnings)))


def _interleaved(fleets: list, tasks: list) -> Fleet:
    """The tasks ``tasks`` ((trace id, which fleet, its index there)) of ``fleets``, with
    their sections, as one fleet in trace-id order: runs of consecutive tasks of one fleet
    sliced out (:func:`part`) and :func:`joined`."""
    parts, run = [], None
    for _, which, i in sorted(tasks):
        if run is not None and run[0] == which and run[2] == i:
            run[2] = i + 1
            continue
        if run is not None:
            parts.append(part(fleets[run[0]], run[1], run[2], False))
        run = [which, i, i + 1]
    if run is not None:
        parts.append(part(fleets[run[0]], run[1], run[2], False))
    if not parts:
        return part(fleets[-1], 0, 0)
    return joined(parts)


def _absent(name: str, sections: Any) -> Any:
    """What a missing optional section column means, as an array."""
    n = len(sections)
    if name == "basis":
        return np.full(n, MEASURED_BASIS, dtype=CODE)
    if name == "assumed_cls":
        return np.zeros(n, dtype=np.int8)
    return np.zeros(n, dtype=np.float64)


def _classified(inp: Any, lags: Any, trees: Any) -> tuple:
    """(the process trees' shares, every span classified): spans without accounting of
    their own judged by their sampled process tree's CPU where there is one."""
    proc = process_share(inp, trees) if trees is not None and inp.with_counters else \
        ProcessShare.none(len(inp.trace_no))
    return proc, classify(inp, thread_facts(inp, lags), proc)


def span_shares(inp: Any, counters: Any = None, lags: Any = None, trees: Any = None) -> Any:
    """Every span's class shares of its own time ((n, len(CLASSES)) float64), by the same
    rules as the sections of :func:`analyze`: the classifier's, then what the counters said
    over the span's whole interval (where ``inp`` carries the counter columns). What-if
    predictions (:mod:`.whatif`) read them for the spans off the critical path too."""
    with gc_paused():
        n = len(inp.trace_no)
        proc, spans = _classified(inp, lags, trees)
        shares = np.array(spans.shares, dtype=np.float64)
        if counters is None or not inp.with_counters or not n:
            return shares
        row = np.arange(n)
        is_gap = np.zeros(n, dtype=bool)
        stage = np.asarray(inp.stage, dtype=object)
        orch = np.isin(stage, SELF_TIME_STAGES) & (spans.basis == MEASURED_BASIS)
        start = np.asarray(inp.start_ns, dtype=np.int64)
        end = np.maximum(np.asarray(inp.end_ns, dtype=np.int64), start)
        shares, _, _ = _with_counters(inp, counters, row, is_gap, start, end, shares,
                                      np.array(spans.confidence, dtype=np.float64), orch,
                                      stage, proc, spans)
        return shares


def _with_counters(inp: Any, counters: Any, row: Any, is_gap: Any, start: Any, end: Any,
                   shares: Any, confidence: Any, orchestration: Any, stage: Any,
                   proc: Any, spans: Any) -> tuple:
    """The sections' shares and confidences changed by the counters over them, and what the
    counters said (None: no counter covered any section). Spans that named no host take
    their process tree's (``proc``); those judged by its counters (``spans.via``) keep the
    confidence that their share of it allows."""
    span_host = np.asarray(inp.host, dtype=object)
    if np.not_equal(proc.host, None).any():
        span_host = np.where(np.equal(span_host, None), proc.host, span_host)
    hosts = span_host[row]
    hosts[is_gap] = None
    pids = np.where(is_gap, -1, np.asarray(inp.pid)[row])
    means = section_means(counters, hosts, start, end, pids)
    if not means:
        return shares, confidence, None

    def col(values: Any, gap: Any = 0) -> Any:
        return np.where(is_gap, gap, np.asarray(values)[row])

    span_ns = np.maximum(col(inp.end_ns) - col(inp.start_ns), 1).astype(np.float64)
    via = col(spans.via, False)
    # those judged by their tree's counters computed where their share of it did
    tree_busy = np.where(via, col(spans.busy, 0.0), 0.0)
    shares, confidence, notes = adjust(
        shares, confidence, means, ~is_gap & (stage[row] == "inference"), col(inp.ivcsw),
        col(inp.vcsw), col(inp.child_cpu_ns), server_local=col(inp.server_local, False),
        children=(col(inp.child_ivcsw), col(inp.child_vcsw), col(inp.child_cpu_ns) / span_ns),
        orchestration=orchestration, length_ns=end - start, model_s=col(inp.model_s, 0.0),
        faults=col(inp.own_faults, 0.0),
        thread_busy=np.maximum(col(inp.thread_cpu, 0), 0) / span_ns,
        children_timed=children_timed(col(inp.child_run_delay, -1.0),
                                      col(inp.child_own_cpu, -1.0), col(inp.child_cpu_ns)),
        tree_busy=tree_busy)
    if via.any():
        confidence = np.where(via, np.minimum(confidence, col(process_confidence(proc), 1.0)),
                              confidence)
    return shares, confidence, notes


def _shared(values: Any) -> Any:
    """``values`` (an object array) with each distinct text one object: names and stages
    repeat across sections, and each row read from the store is an object of its own (held
    by every section of a large analysis: about 100 bytes a section for the two)."""
    seen: dict = {}
    out = np.empty(len(values), dtype=object)
    out[:] = [seen.setdefault(v, v) for v in values.tolist()]
    return out


def _pick(values: Any, row: Any, is_gap: Any, gap_value: Any) -> Any:
    """``values`` gathered per section (an object array), ``gap_value`` for gaps."""
    out = values[row] if len(values) else np.empty(len(row), dtype=object)  # a new array
    out[is_gap] = gap_value
    return out


def _longest_held(task: Any, span: Any, length: Any, n_tasks: int, duration: Any) -> list:
    """Per task, [(span row, time held, its longest section)] of the spans holding its path
    longest (those ``evidence_kept`` names); ties in order of first appearance on the path.
    The longest section is the first of the longest ones."""
    tops: list = [[] for _ in range(n_tasks)]
    if not len(task):
        return tops
    key = task * (int(span.max()) + 2) + (span + 1)
    _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    held = np.bincount(inverse, weights=length.astype(np.float64))  # exact below 2**53 ns
    held_int = held.astype(np.int64)
    # each (task, span)'s longest section: by group, longest first, then earliest
    by_group = np.lexsort((np.arange(len(key)), -length, inverse))
    group_start = np.flatnonzero(np.r_[True, inverse[by_group][1:] != inverse[by_group][:-1]])
    longest = np.empty(len(first), dtype=np.int64)
    longest[inverse[by_group[group_start]]] = by_group[group_start]
    u_task = task[first]
    u_span = span[first]
    order = np.lexsort((first, -held, u_task))
    ranked_task = u_task[order]
    rank = np.arange(len(order)) - np.searchsorted(ranked_task, ranked_task, side="left")
    ranked_held = held_int[order]
    for j in np.flatnonzero(evidence_kept(rank, ranked_held,
                                          np.asarray(duration)[ranked_task])).tolist():
        k = order[j]
        tops[int(u_task[k])].append((int(u_span[k]), int(held_int[k]), int(longest[k])))
    return tops
