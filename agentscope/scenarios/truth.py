"""Ground truth: what a scenario's workload knows it did, written beside its trace, and the
score of an analysis against it.

A scenario's code knows what each step really waited for, because it arranged it and timed it
with its own stopwatch: a lock held by another process, a slot taken by another tenant, pages
it evicted before touching them. It writes that, and nothing from agentscope's analysis, to
``truth-<pid>.jsonl`` in the trace directory, one JSON object per line:

* ``{"kind": "span", "trace_id", "span_id", "name", "truth": {class: share}}``: what the
  span's own time was spent on (one class, or shares where the workload timed a split, e.g. a
  model server's request: its slot wait, then its compute; ``{}`` where the workload cannot
  say). Spans without a line inherit the truth of their nearest ancestor that has one.
* ``{"kind": "task", "trace_id", "name", "scenario", "truth": class, "ledger": {class: s}}``:
  the class that limited the task, and the seconds per class the workload measured on the
  task's longest chain of steps (its own critical path, as it arranged it).

:func:`score` loads a directory, analyses it with agentscope, and compares: the task verdicts
(a confusion matrix over the five classes) and the critical-path time attributed to the right
class (each section's analysed class shares against its span's truth)."""

from __future__ import annotations

import atexit
import dataclasses
import json
import os
import threading
from pathlib import Path
from typing import Any, Optional

from ..analyzers.evidence import CLASSES, STAGE_CLASS, UNKNOWN_STAGE_CLASS
from ..formats import naming

TRUTH_PREFIX = naming.TRUTH_PREFIX  # the label files are named once (formats/naming.py)


class Recorder:
    """Collects truth lines and appends them to ``truth-<pid>.jsonl`` in ``trace_dir`` at
    :meth:`close` (and at exit): writing as it goes would put the workload's own file I/O
    and lock waits inside the spans it describes."""

    def __init__(self, trace_dir: "str | os.PathLike[str]", scenario: str) -> None:
        self.scenario = scenario
        self.path = Path(trace_dir) / f"{TRUTH_PREFIX}{os.getpid()}.jsonl"
        self._lines: list = []
        self._lock = threading.Lock()
        atexit.register(self.close)

    def _write(self, record: dict) -> None:
        self._lines.append(record)  # list.append is atomic: threads need no lock here

    def close(self) -> None:
        """Write what was recorded (idempotent)."""
        with self._lock:
            lines, self._lines = self._lines, []
            if lines:
                with open(self.path, "a", encoding="utf-8") as f:
                    f.write("".join(json.dumps(r, sort_keys=True) + "\n" for r in lines))

    def span(self, span: Any, truth: "str | dict | None") -> None:
        """What ``span``'s own time was spent on: a class, or {class: share}; None: the
        workload cannot say (its time is scored as having no truth)."""
        ctx = span.get_span_context()
        shares = {} if truth is None else {truth: 1.0} if isinstance(truth, str) else \
            _normalised(truth)
        self._write({"kind": "span", "trace_id": f"{ctx.trace_id:032x}",
                     "span_id": f"{ctx.span_id:016x}", "name": getattr(span, "name", None),
                     "truth": shares})

    def children(self, span: Any, name: str, truth: str) -> None:
        """What the time of ``span``'s children named ``name`` was spent on: spans the
        workload cannot reach (those agentscope's instrumentation makes, such as the
        ``pool.wait`` of a thread pool's jobs waiting for a worker), whose class it knows by
        construction."""
        ctx = span.get_span_context()
        self._write({"kind": "children", "trace_id": f"{ctx.trace_id:032x}",
                     "span_id": f"{ctx.span_id:016x}", "name": name, "truth": {truth: 1.0}})

    def task(self, span: Any, ledger: dict, why: str = "") -> str:
        """The task of root span ``span`` was limited by the class with the most seconds in
        ``ledger`` (seconds per class on its own longest chain, as the workload timed them);
        returns that class."""
        ctx = span.get_span_context()
        truth = max(CLASSES, key=lambda c: ledger.get(c, 0.0))
        self._write({"kind": "task", "trace_id": f"{ctx.trace_id:032x}",
                     "name": getattr(span, "name", None), "scenario": self.scenario,
                     "truth": truth, "ledger": {c: round(s, 6) for c, s in ledger.items()},
                     "why": why})
        return truth


def _normalised(shares: dict) -> dict:
    total = sum(max(v, 0.0) for v in shares.values())
    if total <= 0:
        raise ValueError(f"truth shares must have a positive total: {shares}")
    unknown = set(shares) - set(CLASSES)
    if unknown:
        raise ValueError(f"unknown classes {sorted(unknown)}; expected some of {CLASSES}")
    return {c: max(v, 0.0) / total for c, v in shares.items() if v > 0}


def read_truth(trace_dir: "str | os.PathLike[str]") -> tuple:
    """(task truths {trace_id: record}, span truths {(trace_id, span_id): shares} and
    {(trace_id, parent span_id, name): shares} for the children a workload named
    (:meth:`Recorder.children`)) of every truth file below ``trace_dir``. A bad line raises
    ValueError naming file and line."""
    tasks: dict = {}
    spans: dict = {}
    for path in sorted(Path(trace_dir).rglob(f"{TRUTH_PREFIX}*.jsonl")):
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    rec = json.loads(line)
                    if rec["kind"] == "task":
                        tasks[rec["trace_id"]] = rec
                    elif rec["kind"] == "span":
                        spans[(rec["trace_id"], rec["span_id"])] = rec["truth"]
                    elif rec["kind"] == "children":
                        spans[(rec["trace_id"], rec["span_id"], rec["name"])] = rec["truth"]
                except (ValueError, KeyError, TypeError) as e:
                    raise ValueError(f"{path}:{n}: not a truth record ({e})") from e
    return tasks, spans


# a task's truth is a near tie where its ledger's second class is within this share of the
# first (whatif-slots' second request: 0.095 s computing, 0.092 s queued behind the first)
NEAR_TIE = 0.1


@dataclasses.dataclass
class TaskScore:
    scenario: str
    trace_id: str
    name: str
    truth: str
    verdict: str
    confidence: float
    shares: dict
    ledger: dict

    @property
    def ok(self) -> bool:
        return self.truth == self.verdict

    @property
    def near_tie(self) -> Optional[str]:
        """The ledger's second class where it is within NEAR_TIE of the truth's (the
        workload's own timing cannot tell the two apart: a verdict naming either is not
        evidence of a wrong rule), else None."""
        top = self.ledger.get(self.truth, 0.0)
        others = [(s, c) for c, s in self.ledger.items() if c != self.truth and s > 0]
        if top <= 0 or not others:
            return None
        second, cls = max(others)
        return cls if second <= top and top - second <= NEAR_TIE * top else None


@dataclasses.dataclass
class Score:
    tasks: list  # TaskScore, in task start order
    path_s: float  # critical-path seconds with a known truth
    path_right_s: float  # of which attributed to the right class
    path_unknown_s: float  # critical-path seconds whose truth no span gave (gaps)
    time_by_scenario: dict  # scenario -> (right_s, known_s)
    time_by_span: dict = dataclasses.field(default_factory=dict)  # (scenario, span name) -> same
    untruthed: int = 0  # analysed tasks without a truth line (not scored)
    missing: int = 0  # truth lines whose trace was not analysed (lost: counted as wrong)
    # (scenario, span name) -> ({class: seconds the truth gives}, {class: seconds the
    # analysis gave}): what a span's time lost was taken for
    classes_by_span: dict = dataclasses.field(default_factory=dict)

    @property
    def task_accuracy(self) -> float:
        n = len(self.tasks) + self.missing
        return sum(t.ok for t in self.tasks) / n if n else float("nan")

    @property
    def time_accuracy(self) -> float:
        return self.path_right_s / self.path_s if self.path_s else float("nan")

    def confusion(self) -> dict:
        """{truth: {verdict: count}} over the five classes."""
        m = {t: {v: 0 for v in CLASSES} for t in CLASSES}
        for t in self.tasks:
            m[t.truth][t.verdict] += 1
        return m

    def recall(self) -> dict:
        """{class: share of its tasks named right}, for the classes that have tasks."""
        out = {}
        for c, row in self.confusion().items():
            n = sum(row.values())
            if n:
                out[c] = row[c] / n
        return out

    def by_scenario(self) -> dict:
        """{scenario: (right tasks, tasks, time right share)}."""
        out: dict = {}
        for t in self.tasks:
            right, n = out.get(t.scenario, (0, 0))
            out[t.scenario] = (right + t.ok, n + 1)
        return {s: (r, n, _ratio(*self.time_by_scenario.get(s, (0.0, 0.0))))
                for s, (r, n) in out.items()}

    def lost_time(self, top: int = 8) -> list:
        """[(scenario, span name, seconds attributed wrong, seconds)], most lost first."""
        rows = [(s, n, k - r, k) for (s, n), (r, k) in self.time_by_span.items() if k - r > 0]
        return sorted(rows, key=lambda x: -x[2])[:top]

    def to_json(self) -> dict:
        return {"tasks": len(self.tasks), "task_accuracy": self.task_accuracy,
                "time_accuracy": self.time_accuracy, "recall": self.recall(),
                "confusion": self.confusion(), "missing": self.missing,
                "untruthed": self.untruthed,
                "scenarios": {s: {"right": r, "tasks": n, "time_accuracy": ta}
                              for s, (r, n, ta) in self.by_scenario().items()},
                "wrong": [dataclasses.asdict(t) for t in self.tasks if not t.ok]}


def _ratio(a: float, b: float) -> float:
    return a / b if b else float("nan")


# what a stage usually means: the verdict from labels alone (the baseline scored beside ours)
LABEL_CLASS = {stage.value: cls for stage, cls in STAGE_CLASS.items()}


def score(trace_dir: "str | os.PathLike[str]", db: "str | os.PathLike[str] | None" = None,
          labels_only: bool = False) -> Score:
    """Load and analyse ``trace_dir`` (an in-memory store unless ``db``), and score the
    analysis against the truth files in it. ``labels_only``: score instead what the stage
    labels alone would say of the same critical paths (each section the usual class of its
    owner's stage, :data:`LABEL_CLASS`; an inference ``gpu``): the baseline the evidence
    has to beat."""
    evidence, labels = scores(trace_dir, db)
    return labels if labels_only else evidence


def scores(trace_dir: "str | os.PathLike[str]",
           db: "str | os.PathLike[str] | None" = None) -> tuple:
    """(the analysis's score, the labels-only baseline's) from one load and analysis."""
    from ..analysis import MEMORY, analyze

    truths, span_truth = read_truth(trace_dir)
    if not truths:
        raise ValueError(f"no truth files ({TRUTH_PREFIX}*.jsonl) in {trace_dir}: record it "
                         "with `agentscope scenarios run`")
    with analyze(trace_dir, db=MEMORY if db is None else db) as analysis:
        parents = analysis.span_parents()
        cp = analysis.critical_path
        sections = list(zip(*(cp[c].tolist() for c in (
            "trace_id", "span_id", "name", "stage", "duration_s",
            *(f"share_{c}" for c in CLASSES)))))
    tasks = [(t.trace_id, t.name, t.start_ns, t.bottleneck, t.confidence, dict(t.shares))
             for t in analysis.task_results]
    label_sections = [(t, s, n, st, d, *[1.0 if _label_class(st) == c else 0.0
                                         for c in CLASSES])
                      for t, s, n, st, d, *_ in sections]
    per: dict = {}
    for t, _, _, _, d, *shares in label_sections:
        acc = per.setdefault(t, [0.0] * len(CLASSES))
        for k, v in enumerate(shares):
            acc[k] += d * v
    label_tasks = [(tid, name, start, _top(per.get(tid)), 0.0, _fractions(per.get(tid)))
                   for tid, name, start, *_ in tasks]
    return (_score(tasks, truths, span_truth, parents, sections),
            _score(label_tasks, truths, span_truth, parents, label_sections))


def _label_class(stage: Optional[str]) -> str:
    return LABEL_CLASS.get(stage or "", UNKNOWN_STAGE_CLASS)


def _top(seconds: "list | None") -> str:
    if not seconds:
        return UNKNOWN_STAGE_CLASS
    return CLASSES[max(range(len(CLASSES)), key=lambda k: seconds[k])]


def _fractions(seconds: "list | None") -> dict:
    total = sum(seconds or [])
    return {c: v / total for c, v in zip(CLASSES, seconds)} if total else {}


def _score(tasks: list, truths: dict, span_truth: dict, parents: dict,
           sections: list) -> Score:
    """``tasks``: (trace_id, name, start_ns, verdict, confidence, shares); ``sections``:
    (trace_id, span_id, name, stage, seconds, share per class in CLASSES order)."""
    scored = []
    seen = set()
    untruthed = 0
    for trace_id, name, _, verdict, confidence, shares in sorted(tasks, key=lambda t: t[2]):
        rec = truths.get(trace_id)
        if rec is None:
            untruthed += 1
            continue
        seen.add(trace_id)
        scored.append(TaskScore(rec.get("scenario", "?"), trace_id, name, rec["truth"],
                                verdict, confidence, shares, rec.get("ledger", {})))
    scenario_of = {tid: rec.get("scenario", "?") for tid, rec in truths.items()}
    known = right = unknown = 0.0
    per: dict = {}
    per_span: dict = {}
    classes: dict = {}
    for trace_id, span_id, name, _, dur, *shares in sections:
        if trace_id not in seen:
            continue
        truth = span_truth.get((trace_id, parents.get((trace_id, span_id)), name)) or \
            _truth_of(trace_id, span_id, span_truth, parents)
        if not truth:  # a gap, or a span whose workload could not say
            unknown += dur
            continue
        got = dict(zip(CLASSES, shares))
        ok = dur * sum(min(share, got.get(c, 0.0)) for c, share in truth.items())
        known += dur
        right += ok
        r, k = per.get(scenario_of[trace_id], (0.0, 0.0))
        per[scenario_of[trace_id]] = (r + ok, k + dur)
        key = (scenario_of[trace_id], name)
        r, k = per_span.get(key, (0.0, 0.0))
        per_span[key] = (r + ok, k + dur)
        said, given = classes.setdefault(key, ({}, {}))
        for into, of in ((said, truth), (given, got)):
            for c, share in of.items():
                if share:
                    into[c] = into.get(c, 0.0) + dur * share
    return Score(scored, known, right, unknown, per, per_span, untruthed,
                 missing=len(set(truths) - seen), classes_by_span=classes)


def _truth_of(trace_id: str, span_id: Optional[str], span_truth: dict,
              parents: dict) -> Optional[dict]:
    hops = 0
    while span_id is not None and hops < 1000:
        got = span_truth.get((trace_id, span_id))
        if got is not None:
            return got
        span_id = parents.get((trace_id, span_id))
        hops += 1
    return None
