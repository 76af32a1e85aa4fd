"""The analysis a store saved, restored without analysing again (:func:`saved_fleet`), and
its sections' evidence in words (:class:`StoredEvidence`), made again on first reading from
the traces it is about.

``analyze()`` restores the saved analysis when the store's saved one was made by this version
of agentscope, and builds on it: nothing loaded since, and it is the answer; spans or samples
added, and only the traces they touched are analysed again (``analyze(previous=)``). The
evidence of each section is not stored (it is the costliest part of an analysis, and most
outputs read a few sections' of it): a trace's analysis reads no other trace's spans, so the
words of a batch of traces are made again by analysing those traces alone, with the same
counters; the same words as the analysis that was saved.
"""

from __future__ import annotations

import bisect
import dataclasses
import json
from typing import Any, Iterator, Optional

import numpy as np

from ..analyzers import engine
from ..analyzers.counters import MAX_HOLD_NS, METRICS
from ..analyzers.evidence import BASES, CLASSES
from ..analyzers.results import (CODE, Fleet, JoinedEvidence, LazySegments, Sections, Shares,
                                 SlicedEvidence, SpanIds, Summary, TaskResult,
                                 assumed_columns, per_class, thawed)
from ..errors import StoreError

# the most spans analysed at a time when the words of stored sections are made again (a
# window of whole tasks from the first one asked for: StoredEvidence._words_of)
WINDOW_SPANS = 250_000

# Summary fields an analysis fills in after the fleet's (not saved with it)
_NOT_SAVED = ("gpu", "input_problems", "load")


def fleet_state(fleet: Fleet) -> dict:
    """What :func:`saved_fleet` needs besides the task_results and cp_sections rows: the
    fleet's summary and warnings, as JSON-ready data."""
    summary = {f.name: thawed(getattr(fleet.summary, f.name))
               for f in dataclasses.fields(Summary) if f.name not in _NOT_SAVED}
    return {"summary": summary, "warnings": list(fleet.warnings)}


def saved_fleet(store: Any, ref: Any, counted: bool, marks: tuple) -> Optional[Fleet]:
    """The analysis ``store`` saved, as a Fleet, or None when there is none to restore
    (:meth:`~Store.saved_results`). Its sections' evidence is made again from the store
    (``ref``: how to reach it later; ``counted``: whether the analysis read counters;
    ``marks``: the :meth:`~Store.saved_marks` it was made at) when first read."""
    saved = store.saved_results(CLASSES, BASES)
    if saved is None:
        return None
    cols, secs, state = saved
    n = len(cols["trace_id"])
    task, seq = (np.asarray(secs[k], dtype=np.int64) for k in ("task", "seq"))
    if len(task) > 1 and not ((task[1:] > task[:-1]) | ((task[1:] == task[:-1])
                                                        & (seq[1:] > seq[:-1]))).all():
        order = np.lexsort((seq, task))  # in task and section order
        secs = {k: np.asarray(v)[order] for k, v in secs.items()}
        task = task[order]
    bounds = np.searchsorted(task, np.arange(n + 1)).tolist()
    trace_ids = cols["trace_id"].tolist()
    evidence = StoredEvidence(ref, marks, counted, trace_ids, cols["spans"].tolist(), bounds)
    sections = Sections(
        task, np.asarray(secs["seq"], dtype=np.int64), SpanIds.of(secs["span_id"]),
        _objects(secs["name"]), _objects(secs["stage"]),
        np.asarray(secs["start_ns"], dtype=np.int64), np.asarray(secs["end_ns"], dtype=np.int64),
        np.asarray(secs["class"], dtype=CODE),
        np.asarray(secs["confidence"], dtype=np.float64),
        Shares.of_columns([np.asarray(secs[f"share_{c}"], dtype=np.float64)
                           for c in CLASSES]),
        evidence, np.asarray(secs["basis"], dtype=CODE),
        *assumed_columns(np.asarray(secs["assumed"], dtype=np.float64),
                         np.asarray(secs["assumed_cls"], dtype=np.int8)))

    def per_task(prefix: str) -> Iterator:  # class -> figure, per task
        return (per_class(row) for row in np.stack(
            [np.asarray(cols[prefix + c], dtype=np.float64) for c in CLASSES], axis=1).tolist())

    column = {k: np.asarray(v).tolist() for k, v in cols.items()}
    # each task's evidence (a JSON list of sentences), parsed in one go
    said = json.loads("[" + ",".join(column["evidence"]) + "]")
    segments = (LazySegments(sections, bounds[t], bounds[t + 1]) for t in range(n))
    tasks = tuple(map(TaskResult._make, zip(
        trace_ids, column["name"], column["lane"], column["service"], column["start_ns"],
        column["duration_ns"], column["bottleneck"], column["confidence"], per_task("share_"),
        map(tuple, said), segments, column["spans"], column["orchestration_ns"],
        column["duplicates"], column["off_path"], column["measured_share"], column["orphans"],
        column["root_span_id"], per_task("assumed_"), column["timeout_ns"], column["retry_ns"],
        column["orphan_roots"])))
    summary = Summary(**state["summary"])
    return Fleet(tasks, sections, summary, tuple(state["warnings"]))


def stored_part(part: Fleet, ref: Any, marks: tuple, counted: bool,
                end: Optional[str]) -> Fleet:
    """``part`` (the analysis of a batch of traces, in trace order, up to the trace ``end``
    (None: the last)) with its sections' evidence in words made again from the store when
    read (:class:`StoredEvidence`), not from the classification of every span of the batch
    kept until then (about 150 bytes a section: at 20M spans 1.1 GB). ``ref``, ``marks``,
    ``counted``: the store the batch was read from, where it stood, and whether its counters
    were read. Its tasks read the new sections."""
    tasks = part.tasks
    bounds = np.searchsorted(np.asarray(part.sections.task, dtype=np.int64),
                             np.arange(len(tasks) + 1)).tolist()
    evidence = StoredEvidence(ref, marks, counted, [t.trace_id for t in tasks],
                              [t.spans for t in tasks], bounds, end)
    sections = dataclasses.replace(part.sections, evidence=evidence)
    return dataclasses.replace(part, tasks=engine.repointed(tasks, sections),
                               sections=sections)


def _objects(values: Any) -> np.ndarray:
    return np.asarray(values, dtype=object)


class StoredEvidence:
    """The words of the sections of an analysis restored from its store, made again a window
    of whole tasks at a time by analysing their traces alone (the same words: a trace's
    analysis reads no other trace's spans). If the store changed since, over those traces,
    reading them raises StoreError."""

    def __init__(self, ref: Any, marks: tuple, counted: bool, trace_ids: list,
                 spans: list, bounds: list, end: Optional[str] = None) -> None:
        self._ref, self._marks, self._counted = ref, marks, counted
        self._trace_ids, self._spans, self._bounds = trace_ids, spans, bounds
        self._end = end  # the first trace after these tasks' (None: the store's last)
        self._window: tuple = (0, 0, [])  # (first task, end task, words of their sections)
        self._all: Optional[list] = None
        self._dropped: set = set()  # traces analysed again since: their words are not read
        self._known = set(trace_ids)
        self._prefetched: dict = {}  # task -> words (prefetch)

    def drop(self, traces: Any) -> None:
        """The sections of these traces are no longer read from here (an analysis that
        builds on this one analysed them again): a window leaves them out, and the store
        may change over them (reading them raises StoreError)."""
        self._dropped.update(t for t in traces if t in self._known)
        self._window = (0, 0, [])
        self._prefetched = {}

    def __len__(self) -> int:
        return self._bounds[-1]

    def texts(self, lo: int = 0, hi: Optional[int] = None) -> list:
        hi = len(self) if hi is None else hi
        if self._all is not None:
            return self._all[lo:hi]
        out: list = []
        at = lo
        last = self._task_of(hi - 1) if hi > lo else 0
        while at < hi:
            # (a window reaches the last task asked for, up to WINDOW_SPANS spans: a reader
            # of every section makes a few large analyses, not one per task to begin with)
            first, end, words = self._words_of(self._task_of(at), last)
            base = self._bounds[first]
            stop = min(hi, self._bounds[end])
            got = words[at - base:stop - base]
            if None in got:  # (a trace the window left out: touched since)
                raise StoreError(self._changed(self._ref.path))
            out += got
            at = stop
        return out

    def texts_at(self, sections: Any) -> list:
        sections = np.asarray(sections, dtype=np.int64).tolist()
        if self._all is not None:
            return [self._all[k] for k in sections]
        out: list = [None] * len(sections)
        for j in sorted(range(len(sections)), key=sections.__getitem__):
            k = sections[j]
            first, _, words = self._words_of(self._task_of(k))
            out[j] = words[k - self._bounds[first]]
            if out[j] is None:  # (a trace the window left out: touched since)
                raise StoreError(self._changed(self._ref.path))
        return out

    def all(self) -> list:
        if self._all is None:
            self._all = self.texts(0, len(self))
        return self._all

    def settle(self) -> None:
        self.all()

    def _task_of(self, section: int) -> int:
        return bisect.bisect_right(self._bounds, section) - 1

    def _fitting(self, tasks: Any, most: int) -> int:
        """How many of ``tasks`` (task positions, in order) one analysis takes: at least
        one, at most ``most``, their spans within WINDOW_SPANS."""
        n, spans = 0, 0
        for k in tasks:
            if n and (n >= most or spans + self._spans[k] > WINDOW_SPANS):
                break
            spans += self._spans[k]
            n += 1
        return n

    def _words_of(self, task: int, last: int = -1) -> tuple:
        """(first task, end task, words of their sections) of the window holding ``task``.
        A window is one task, and four times the last one's tasks (up to WINDOW_SPANS
        spans) where it follows it, or up to task ``last`` (and WINDOW_SPANS spans) where
        that is further: a reader of a few tasks pays for those, one that reads them all
        for a few large analyses."""
        first, end, words = self._window
        if first <= task < end:
            return self._window
        if self._prefetched.get(task) is not None:
            return task, task + 1, self._prefetched[task]
        most = max(4 * (end - first) if task == end > first else 1, last - task + 1)
        end = task + self._fitting(range(task, len(self._trace_ids)), most)
        upto = self._trace_ids[end] if end < len(self._trace_ids) else self._end
        # the traces from the first to the next one's: a range the store reads faster than
        # a list of ids (those left out, in it, are analysed and not used)
        made = self._make(list(range(task, end)), (self._trace_ids[task], upto))
        if made[task] is None:  # (asked for a trace the store changed over since)
            raise StoreError(self._changed(self._ref.path))
        words = [w for k in range(task, end)
                 for w in (made[k] or [None] * (self._bounds[k + 1] - self._bounds[k]))]
        self._window = (task, end, words)
        return self._window

    def prefetch(self, ranges: Any) -> None:
        """Make the words of the tasks of these section ranges ((lo, hi), ...) now, in a
        few analyses of those traces alone rather than one each (a reader of many scattered
        tasks: the HTML report's timelines), and keep them."""
        tasks = sorted({k for lo, hi in ranges if hi > lo
                        for k in range(self._task_of(lo), self._task_of(hi - 1) + 1)})
        tasks = [k for k in tasks if self._prefetched.get(k) is None]
        while tasks:
            batch = tasks[:self._fitting(tasks, len(tasks))]
            self._prefetched.update(self._make(batch, [self._trace_ids[k] for k in batch]))
            tasks = tasks[len(batch):]

    def _make(self, tasks: list, traces: Any) -> dict:
        """{task: the words of its sections, or None (left out: analysed again since, or
        the store changed over it)} for ``tasks``, from one analysis of ``traces`` (a range
        or a list of trace ids that holds theirs)."""
        with self._ref.open() as store:
            # those analysed again since and those the store changed over since are left
            # out (their words are refused when read); the rest are read however their
            # neighbours changed
            left_out = self._dropped | self._touched(store)
            series = store.counter_series(METRICS)
            lags = store.loop_lags() if series is not None else None
            fleet = engine.analyze(store.analysis_input(with_counters=self._counted,
                                                        traces=traces), series, lags, None)
            path = store.path
        made = {t.trace_id: k for k, t in enumerate(fleet.tasks)}
        at = np.searchsorted(np.asarray(fleet.sections.task, dtype=np.int64),
                             np.arange(len(fleet.tasks) + 1)).tolist()
        every = fleet.sections.evidence.all()
        out: dict = {}
        for k in tasks:
            trace = self._trace_ids[k]
            if trace in left_out:
                out[k] = None
                continue
            j = made.get(trace)
            if j is None or at[j + 1] - at[j] != self._bounds[k + 1] - self._bounds[k]:
                raise StoreError(self._changed(path))
            out[k] = every[at[j]:at[j + 1]]
        return out

    def _touched(self, store: Any) -> set:
        """The traces that what the store holds now would give other words than when the
        analysis was made; StoreError where that cannot be told (rows taken out)."""
        if store.marks() == self._marks:
            return set()
        touched = store.touched_traces(self._marks, METRICS, MAX_HOLD_NS)
        if touched is None:
            raise StoreError(self._changed(store.path))
        return set(touched)

    @staticmethod
    def _changed(path: Any) -> str:
        return (f"the store {path} changed since this analysis was made: the evidence in "
                "words of its sections cannot be made again; analyse again")


def prefetch_words(evidence: Any, ranges: Any) -> None:
    """Where ``evidence`` (joined, sliced) holds :class:`StoredEvidence`, make the words of
    the sections in ``ranges`` ((lo, hi) in its own numbering) now, in few analyses
    (:meth:`StoredEvidence.prefetch`); elsewhere nothing (they are made on reading)."""
    for stored, mine in _stored_below(evidence, [(lo, hi) for lo, hi in ranges if hi > lo]):
        stored.prefetch(mine)


def drop_stored(evidence: Any, traces: Any) -> None:
    """Tell every :class:`StoredEvidence` below ``evidence`` (joined or sliced) that these
    traces were analysed again (:meth:`StoredEvidence.drop`)."""
    for stored, _ in _stored_below(evidence, [(0, len(evidence))]):
        stored.drop(traces)


def _stored_below(evidence: Any, ranges: list) -> Iterator[tuple]:
    """(each :class:`StoredEvidence` below ``evidence``, the parts of ``ranges`` ((lo, hi)
    of ``evidence``'s sections) that fall in it, in its own numbering), where some do."""
    if not ranges:
        return
    if isinstance(evidence, StoredEvidence):
        yield evidence, ranges
    elif isinstance(evidence, SlicedEvidence):
        size = len(evidence)
        yield from _stored_below(evidence._evidence, [
            (evidence._lo + max(lo, 0), evidence._lo + min(hi, size)) for lo, hi in ranges])
    elif isinstance(evidence, JoinedEvidence):
        for part, a, b in zip(evidence._parts, evidence._starts, evidence._starts[1:]):
            yield from _stored_below(part, [(max(lo, a) - a, min(hi, b) - a)
                                            for lo, hi in ranges if lo < b and hi > a])
