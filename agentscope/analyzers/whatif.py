"""What a change would buy: every task re-timed with some of its work made faster, its
critical path walked again, and the fleet's latency and throughput before and after.

* :class:`Speedup` (``stage:tool=2``, ``name:pytest=3``, ``class:io=2``, ``service:NAME=1.5``)
  says whose own time gets how much faster. A span matched by several is sped up by each
  (the factors multiply); ``class:`` speeds up only that class's part of each span's own time
  (the classifier's shares of it), so ``class:io=2`` halves the waiting of a span that was
  half waiting and half computing, and leaves its computing alone.
* :func:`predict` re-times each trace (:func:`.timing.retime`: a span starts after what it
  waited for, so a faster branch can hand the path to another one) and walks the new critical
  path (:func:`.critical_path.walk_many`); with ``cpus`` or ``slots`` it replays the tasks on
  other capacity instead (:mod:`.replay`).
* The naive prediction beside it (the saved own time on the recorded critical path, simply
  subtracted) is the figure to beat (``benchmarks/whatif_accuracy.py``).

The rules and the assumptions are in docs/whatif.md; every result lists the assumptions it
rests on (:attr:`Prediction.assumptions`).
"""

from __future__ import annotations

import dataclasses
import fnmatch
import functools
import math
from typing import Any, Optional, Sequence

import numpy as np

from .critical_path import walk_many
from .evidence import CLASSES, GAP_SHARES
from .timing import Deps, covered_ns, dependencies, retime

KINDS = ("stage", "name", "class", "service")
SCHEMA = "agentscope.whatif/v1"


@dataclasses.dataclass(frozen=True)
class Speedup:
    """Spans whose ``kind`` (stage, name, class, service) is ``value`` (a glob for names and
    services: ``name:pytest*``) get ``factor`` times faster at their own work."""

    kind: str
    value: str
    factor: float

    @classmethod
    def parse(cls, text: str) -> "Speedup":
        """``KIND:VALUE=FACTOR``, e.g. ``stage:tool=2``. Raises ValueError, saying what is
        wrong."""
        head, sep, factor_text = str(text).rpartition("=")
        kind, colon, value = head.partition(":")
        if not sep or not colon or not value:
            raise ValueError(f"--speedup {text!r}: expected KIND:VALUE=FACTOR, e.g. "
                             "stage:tool=2 (kinds: " + ", ".join(KINDS) + ")")
        kind = kind.strip().lower()
        if kind not in KINDS:
            raise ValueError(f"--speedup {text!r}: unknown kind {kind!r}; one of "
                             + ", ".join(KINDS))
        try:
            factor = float(factor_text)
        except ValueError:
            raise ValueError(f"--speedup {text!r}: factor {factor_text!r} is not a number") \
                from None
        if not math.isfinite(factor) or factor <= 0:
            raise ValueError(f"--speedup {text!r}: the factor must be a positive number "
                             "(2 = twice as fast, 0.5 = twice as slow)")
        if kind == "class" and value not in CLASSES:
            raise ValueError(f"--speedup {text!r}: unknown class {value!r}; one of "
                             + ", ".join(CLASSES))
        return cls(kind, value, factor)

    def __str__(self) -> str:
        return f"{self.kind}:{self.value}={self.factor:g}"

    def matches(self, values: Any) -> np.ndarray:
        """Which of ``values`` (an object array of stages, names or services) it selects."""
        values = np.asarray(values, dtype=object)
        if self.kind in ("name", "service") and any(ch in self.value for ch in "*?["):
            uniq = {v for v in values.tolist() if v is not None}
            hit = {v for v in uniq if fnmatch.fnmatchcase(str(v), self.value)}
            return np.isin(values, list(hit)) if hit else np.zeros(len(values), dtype=bool)
        return np.equal(values, self.value)


def speedups(items: Sequence) -> tuple:
    """Speedups from strings or :class:`Speedup` objects."""
    return tuple(s if isinstance(s, Speedup) else Speedup.parse(s) for s in items)


@dataclasses.dataclass(frozen=True)
class Spans:
    """What a prediction reads of every span, each task's spans contiguous (``bounds``).
    Times in ns; ``shares`` (n, len(CLASSES)): the classes of each span's own time (the
    classifier's, with the counters' verdict over the span); ``cpu_ns``: on-CPU ns of its own
    time (its thread and the child processes it waited for; -1: not measured);
    ``queue_ns``: server-reported queueing in it; ``request``: the server a span is a request
    to (its top span of a server's service, else None); ``host``: where it ran (None:
    unknown)."""

    bounds: list  # per task: (lo, hi)
    parent: Any  # int64, row within the same task, -1: a root
    start: Any
    end: Any
    kind: Any  # object: producer / consumer / other
    name: Any
    stage: Any
    service: Any
    shares: Any
    cpu_ns: Any
    queue_ns: Any
    request: Any
    host: Any
    task_id: list
    task_name: list
    task_lane: list
    task_service: list
    model_ns: Any = None  # server-reported model compute (prefill + decode) in it

    def __len__(self) -> int:
        return len(self.parent)

    @functools.cached_property
    def deps(self) -> Deps:
        """What each span waited for (:func:`.timing.dependencies`), made once."""
        return dependencies(self.parent, self.start, self.end, self.bounds,
                            self.task_service, self.task_lane)

    def column(self, kind: str) -> Any:
        """The values a speedup of ``kind`` (stage, name, service) selects on."""
        return {"stage": self.stage, "name": self.name, "service": self.service}[kind]

    def every(self, step: int) -> "Spans":
        """Every ``step``-th task, its spans copied out."""
        keep = list(range(0, len(self.bounds), max(step, 1)))
        rows = np.concatenate([np.arange(*self.bounds[t]) for t in keep]) if keep else \
            np.zeros(0, dtype=np.int64)
        bounds, at = [], 0
        shift = np.zeros(len(rows), dtype=np.int64)
        for t in keep:
            lo, hi = self.bounds[t]
            bounds.append((at, at + hi - lo))
            shift[at:at + hi - lo] = at - lo
            at += hi - lo
        parent = np.asarray(self.parent, dtype=np.int64)[rows]
        parent = np.where(parent >= 0, parent + shift, -1)
        def pick(xs: list) -> list:
            return [xs[t] for t in keep]

        fields = {}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            fields[f.name] = v if v is None or isinstance(v, list) else np.asarray(v)[rows]
        fields.update(bounds=bounds, parent=parent, task_id=pick(self.task_id),
                      task_name=pick(self.task_name), task_lane=pick(self.task_lane),
                      task_service=pick(self.task_service))
        return Spans(**fields)

    @functools.cached_property
    def recorded_walk(self) -> Any:
        """The critical paths of the recorded times, walked once."""
        return walk_many(self.parent, self.start, self.end, self.kind, self.bounds)


@dataclasses.dataclass(frozen=True)
class Stats:
    """Latency and throughput of a set of tasks."""

    tasks: int
    mean_s: float
    p50_s: float
    p95_s: float
    p99_s: float
    makespan_s: float
    throughput_per_h: float

    @classmethod
    def of(cls, durations_ns: Any, starts_ns: Any, ends_ns: Any) -> "Stats":
        """Of tasks with these durations, starting and ending then. Throughput counts the
        time at least one task ran (idle time between recordings is left out)."""
        d = np.asarray(durations_ns, dtype=np.float64) / 1e9
        if not len(d):
            return cls(0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
        starts = np.asarray(starts_ns, dtype=np.int64)
        ends = np.maximum(np.asarray(ends_ns, dtype=np.int64), starts)
        span = (float(ends.max()) - float(starts.min())) / 1e9
        busy = covered_ns(starts, ends) / 1e9
        p50, p95, p99 = np.percentile(d, [50, 95, 99]).tolist()
        return cls(len(d), float(d.mean()), p50, p95, p99, span,
                   len(d) / busy * 3600.0 if busy > 0 else 0.0)

    def to_dict(self) -> dict:
        return {k: (round(v, 6) if isinstance(v, float) else v)
                for k, v in dataclasses.asdict(self).items()}


@dataclasses.dataclass(frozen=True)
class TaskChange:
    trace_id: str
    name: str
    lane: Optional[str]
    baseline_s: float
    predicted_s: float
    naive_s: float
    bottleneck_before: str
    # the class holding most of its re-walked path (None after a replay: the classes of a
    # replayed span's time are not re-judged)
    bottleneck_after: Optional[str]


@dataclasses.dataclass(frozen=True)
class Prediction:
    """Baseline and predicted figures of one change (:func:`predict`); ``to_dict()`` is the
    ``agentscope.whatif/v1`` document."""

    change: dict  # what was changed: speedups, cpus, slots
    baseline: Stats
    predicted: Stats
    naive: Stats
    lanes: dict  # lane -> {"baseline": Stats, "predicted": Stats}
    tasks: tuple  # of TaskChange
    assumptions: tuple  # of sentences
    selected_spans: int  # spans the speedups selected
    path_share_after: dict  # class -> share of all predicted critical-path time
    speedups: tuple = ()  # the Speedups applied
    unmatched: tuple = ()  # those of them that selected no span (as written)

    def to_dict(self) -> dict:
        return {
            "schema": SCHEMA, "change": self.change,
            "baseline": self.baseline.to_dict(), "predicted": self.predicted.to_dict(),
            "naive": self.naive.to_dict(),
            "lanes": {lane: {k: v.to_dict() for k, v in d.items()}
                      for lane, d in self.lanes.items()},
            "selected_spans": self.selected_spans,
            "share_of_critical_path_after": {k: round(v, 6)
                                             for k, v in self.path_share_after.items()},
            "tasks": [{"trace_id": t.trace_id, "name": t.name, "lane": t.lane,
                       "baseline_s": round(t.baseline_s, 6),
                       "predicted_s": round(t.predicted_s, 6),
                       "naive_s": round(t.naive_s, 6),
                       "bottleneck_before": t.bottleneck_before,
                       "bottleneck_after": t.bottleneck_after} for t in self.tasks],
            "assumptions": list(self.assumptions)}

    @property
    def gain(self) -> float:
        """Share of the mean task latency the change saves (negative: it costs)."""
        b = self.baseline.mean_s
        return (b - self.predicted.mean_s) / b if b > 0 else 0.0


def scale_of(spans: Spans, changes: Sequence[Speedup]) -> np.ndarray:
    """Per span, what its own time is multiplied by (1: unchanged)."""
    n = len(spans)
    scale = np.ones(n, dtype=np.float64)
    per_class = np.ones(len(CLASSES), dtype=np.float64)
    for s in changes:
        if s.kind == "class":
            per_class[CLASSES.index(s.value)] /= s.factor
        else:
            scale = np.where(s.matches(spans.column(s.kind)), scale / s.factor, scale)
    if np.any(per_class != 1.0) and n:
        shares = np.asarray(spans.shares, dtype=np.float64)
        total = shares.sum(axis=1)
        mixed = shares @ per_class + np.maximum(1.0 - total, 0.0)  # unclassified: unchanged
        scale = scale * mixed
    return scale


def predict(spans: Spans, changes: Sequence[Speedup] = (), cpus: Optional[int] = None,
            slots: Optional[dict] = None, capacity: Any = None) -> Prediction:
    """The fleet of ``spans`` as recorded and with ``changes`` (speedups), and, when ``cpus``
    or ``slots`` ({server: slots}) are given, replayed on that capacity (``capacity``: what
    the recording had, :class:`.replay.Capacity`). ``changes``: Speedups or their strings."""
    changes = speedups(changes)
    scale = scale_of(spans, changes)
    deps = spans.deps
    n, T = len(spans), len(spans.bounds)
    assumptions = [
        "a span starts after every sibling that had ended when it started, plus its parent's "
        "own time since the last of them (or as long after a sibling still running that "
        "started later as it did, or its parent's own time after its parent's start); a span "
        "ends after the children that ended inside it, plus its own time after them "
        "(docs/whatif.md)",
        "a task that started within 20 ms of the end of another task of its service and lane "
        "follows that task; the others arrive when they arrived",
    ]
    unmatched = tuple(str(s) for s in changes
                      if s.kind != "class" and not s.matches(spans.column(s.kind)).any())
    if unmatched:
        assumptions.append("selected no span (check the spelling): " + ", ".join(unmatched))
    if any(s.kind == "class" for s in changes):
        assumptions.append("class: speedups change only that class's part of each span's own "
                           "time, by the classifier's shares of it")
    base_s = np.asarray(deps.start, dtype=np.int64)
    base_e = np.asarray(deps.end, dtype=np.int64)
    replayed = cpus is not None or bool(slots)
    if not replayed:
        new_s, new_e = retime(deps, scale)
    else:
        from .replay import replay

        base_r, new_r, notes = replay(spans, scale, cpus, slots or {}, capacity)
        assumptions.extend(notes)
        # predicted = recorded + what the simulation says the change does (its error at the
        # recorded capacity cancels)
        shift = new_r[0] - base_r[0], new_r[1] - base_r[1]
        new_s, new_e = base_s + shift[0], base_e + shift[1]
        new_e = np.maximum(new_e, new_s)
    tasks_v = np.asarray(deps.task_rows, dtype=np.int64)
    b_dur = base_e[tasks_v] - base_s[tasks_v] if T else np.zeros(0, dtype=np.int64)
    p_dur = new_e[tasks_v] - new_s[tasks_v] if T else np.zeros(0, dtype=np.int64)

    # the paths, before and after
    shares = np.asarray(spans.shares, dtype=np.float64)
    before = _path_classes(spans, spans.start, spans.end, shares)
    after = _path_classes(spans, new_s[:n], new_e[:n], shares)
    naive_saved = _naive_saved(spans, spans.start, spans.end, scale)
    if replayed:
        naive_saved = naive_saved - _naive_capacity(spans, spans.start, spans.end, cpus,
                                                    slots or {}, capacity)
    naive_d = np.maximum(b_dur - naive_saved, 0)

    lanes = {}
    lane_of = [lane or "(none)" for lane in spans.task_lane]
    for lane in sorted(set(lane_of)):
        rows = np.asarray([t for t in range(T) if lane_of[t] == lane], dtype=np.int64)
        v = tasks_v[rows]
        lanes[lane] = {"baseline": Stats.of(b_dur[rows], base_s[v], base_e[v]),
                       "predicted": Stats.of(p_dur[rows], new_s[v], new_e[v])}
    naive_e = base_s[tasks_v] + naive_d
    task_changes = tuple(
        TaskChange(spans.task_id[t], spans.task_name[t], spans.task_lane[t],
                   int(b_dur[t]) / 1e9, int(p_dur[t]) / 1e9, int(naive_d[t]) / 1e9,
                   before[0][t], None if replayed else after[0][t]) for t in range(T))
    total_after = after[1].sum()
    return Prediction(
        {"speedups": [str(s) for s in changes], "cpus": cpus, "slots": dict(slots or {})},
        Stats.of(b_dur, base_s[tasks_v], base_e[tasks_v]),
        Stats.of(p_dur, new_s[tasks_v], new_e[tasks_v]),
        Stats.of(naive_d, base_s[tasks_v], naive_e), lanes, task_changes, tuple(assumptions),
        int(np.count_nonzero(scale != 1.0)),
        {} if replayed else {c: float(v / total_after) if total_after > 0 else 0.0
                             for c, v in zip(CLASSES, after[1])}, changes, unmatched)


def _walk(spans: Spans, start: Any, end: Any) -> Any:
    if start is spans.start and end is spans.end:
        return spans.recorded_walk
    return walk_many(spans.parent, start, end, spans.kind, spans.bounds)


def _path_classes(spans: Spans, start: Any, end: Any, shares: Any) -> tuple:
    """(per task: the class holding most of its critical path, per class: seconds on all
    paths, per task: ns on its path) of the walk over these times."""
    T = len(spans.bounds)
    w = _walk(spans, start, end)
    span = np.asarray(w.span, dtype=np.int64)
    length = (np.asarray(w.end, dtype=np.int64) - np.asarray(w.start, dtype=np.int64)).astype(
        np.float64)
    trace = np.asarray(w.trace, dtype=np.int64)
    gap = span < 0
    sec_shares = np.zeros((len(span), len(CLASSES)))
    if len(span) and len(shares):
        sec_shares = shares[np.where(gap, 0, span)].copy()
    sec_shares[gap] = 0.0
    for c, v in GAP_SHARES.items():  # untraced waiting, as the analysis says
        sec_shares[gap, CLASSES.index(c)] = v
    per_task = np.zeros((T, len(CLASSES)))
    for c in range(len(CLASSES)):
        per_task[:, c] = np.bincount(trace, length * sec_shares[:, c], T) if len(span) else 0
    top = [CLASSES[int(np.argmax(r))] if r.sum() > 0 else "unknown" for r in per_task]
    return top, per_task.sum(axis=0), np.bincount(trace, length, T) if len(span) else np.zeros(T)


def _naive_saved(spans: Spans, start: Any, end: Any, scale: Any) -> np.ndarray:
    """Per task, the ns its recorded critical path would lose if each section simply got
    its span's speedup: sum of section length times (1 - scale)."""
    T = len(spans.bounds)
    w = _walk(spans, start, end)
    span = np.asarray(w.span, dtype=np.int64)
    if not len(span):
        return np.zeros(T, dtype=np.int64)
    length = (np.asarray(w.end, dtype=np.int64) - np.asarray(w.start, dtype=np.int64)).astype(
        np.float64)
    saved = np.where(span < 0, 0.0, length * (1.0 - np.asarray(scale)[np.maximum(span, 0)]))
    return np.rint(np.bincount(np.asarray(w.trace, dtype=np.int64), saved, T)).astype(np.int64)


def _naive_capacity(spans: Spans, start: Any, end: Any, cpus: Optional[int], slots: dict,
                    capacity: Any) -> np.ndarray:
    """Per task, the ns the naive reading of a capacity change adds to its recorded path:
    its ``cpu`` time scaled by recorded cores / new cores, and the queueing of the requests
    to a server scaled by recorded slots / new slots."""
    from .replay import recorded_slots, requests_to

    T = len(spans.bounds)
    w = _walk(spans, start, end)
    span = np.asarray(w.span, dtype=np.int64)
    added = np.zeros(T)
    if not len(span):
        return added.astype(np.int64)
    length = (np.asarray(w.end, dtype=np.int64) - np.asarray(w.start, dtype=np.int64)).astype(
        np.float64)
    trace = np.asarray(w.trace, dtype=np.int64)
    row = np.maximum(span, 0)
    shares = np.asarray(spans.shares, dtype=np.float64)
    if cpus is not None and capacity is not None:
        hosts = np.asarray(spans.host, dtype=object)
        ratio = np.asarray([(capacity.cores_of(h) or cpus) / cpus for h in hosts.tolist()])
        cpu = np.where(span < 0, 0.0, length * shares[row, CLASSES.index("cpu")])
        added += np.bincount(trace, cpu * (ratio[row] - 1.0), T)
    for name, n in slots.items():
        rows = requests_to(spans, name)
        rec = recorded_slots(spans, np.flatnonzero(rows))
        queued = np.where((span >= 0) & rows[row],
                          length * shares[row, CLASSES.index("queue")], 0.0)
        added += np.bincount(trace, queued * (rec / n - 1.0), T)
    return np.rint(added).astype(np.int64)


# ---- what would help -----------------------------------------------------------------------
# a change is proposed for a stage, span name or class holding at least this share of all
# critical-path time; names: the few holding most
PROPOSE_MIN_SHARE = 0.05
PROPOSE_NAMES = 3
PROPOSE_FACTOR = 2.0
# above this many spans, the proposals are judged on every k-th task (the reports stay quick
# on large fleets; `agentscope whatif` always predicts every task)
PROPOSE_MAX_SPANS = 20_000
# above this many spans, the reports leave the proposals out (reading every span again would
# cost them as much as the analysis itself) and point at `agentscope whatif`
PROPOSE_SKIP_ABOVE = 100_000


def proposals_left_out(spans: int) -> bool:
    """Whether the reports leave the proposals out for a fleet of this many spans."""
    return spans > PROPOSE_SKIP_ABOVE


def what_would_help(spans: Spans, capacity: Any = None, top: int = 3) -> list:
    """The ``top`` changes with the largest predicted gain in mean task latency, best first
    (:class:`Prediction` each; only those that gain at least 0.5 %): each stage, class and
    span name holding much of the critical paths made twice as fast, one more slot at each
    server whose requests queued, and twice the cores where the paths computed."""
    from .replay import recorded_slots, requests_to, server_of

    if not len(spans) or not spans.bounds:
        return []
    in_tasks = sum(hi - lo for lo, hi in spans.bounds)
    step = -(-in_tasks // PROPOSE_MAX_SPANS)
    sampled = None
    if step > 1:
        sampled = (f"judged on one task in {step} ({-(-len(spans.bounds) // step)} of "
                   f"{len(spans.bounds)}): `agentscope whatif` predicts them all")
        spans = spans.every(step)
    w = _walk(spans, spans.start, spans.end)
    span = np.asarray(w.span, dtype=np.int64)
    length = (np.asarray(w.end, dtype=np.int64) - np.asarray(w.start, dtype=np.int64)).astype(
        np.float64)
    total = float(length.sum())
    if total <= 0:
        return []
    on = span >= 0
    rows = span[on]
    held = length[on]
    options: list = []

    def by(values: Any, kind: str, limit: Optional[int] = None) -> None:
        tally: dict = {}
        for v, t in zip(np.asarray(values, dtype=object)[rows].tolist(), held.tolist()):
            if v is not None and str(v) != "":
                tally[v] = tally.get(v, 0.0) + t
        ranked = sorted(tally.items(), key=lambda kv: -kv[1])
        for v, t in ranked[:limit]:
            if t / total >= PROPOSE_MIN_SHARE and not (kind == "name" and any(
                    ch in str(v) for ch in "*?[")):
                options.append(([Speedup(kind, str(v), PROPOSE_FACTOR)], None, None))

    by(spans.stage, "stage")
    by(spans.name, "name", PROPOSE_NAMES)
    shares = np.asarray(spans.shares, dtype=np.float64)
    path_cls = (shares[rows] * held[:, None]).sum(axis=0) if len(rows) else np.zeros(
        len(CLASSES))
    for k, c in enumerate(CLASSES):
        # queueing is a matter of capacity (slots), not speed; untraced time is unknown
        if c not in ("untraced", "queue") and path_cls[k] / total >= PROPOSE_MIN_SHARE:
            options.append(([Speedup("class", c, PROPOSE_FACTOR)], None, None))
    queued = np.asarray(spans.queue_ns, dtype=np.float64) > 0
    for server in sorted({s for s in server_of(spans)[queued].tolist() if s is not None}):
        reqs = np.flatnonzero(requests_to(spans, server))
        if len(reqs):
            options.append(([], None, {server: recorded_slots(spans, reqs) + 1}))
    cores = sorted(set((capacity.cores if capacity is not None else {}).values()))
    cpu_share = path_cls[CLASSES.index("cpu")] / total
    if cores and cpu_share >= PROPOSE_MIN_SHARE:
        options.append(([], 2 * max(cores), None))
    out = []
    for changes, cpus, slots in options:
        try:
            p = predict(spans, changes, cpus, slots, capacity)
        except ValueError:
            continue
        if p.gain >= 0.005:
            if sampled:
                p = dataclasses.replace(p, assumptions=p.assumptions + (sampled,))
            out.append(p)
    out.sort(key=lambda p: -p.gain)
    return out[:top]


def describe(p: Prediction) -> str:
    """A change in words: 'tool spans twice as fast', 'one more slot at model-server'."""
    parts = []
    for sp in p.speedups:
        what = {"stage": f"{sp.value} spans", "name": f"'{sp.value}'",
                "class": f"{sp.value} time", "service": f"service {sp.value}"}[sp.kind]
        parts.append(f"{what} {'twice' if sp.factor == 2 else f'{sp.factor:g}x'} as fast")
    if p.change.get("cpus") is not None:
        parts.append(f"{p.change['cpus']} cores per host")
    for k, v in p.change.get("slots", {}).items():
        parts.append(f"{v} slots at {k}")
    return ", ".join(parts)
