"""A task's verdict from its classified critical path, and the fleet's figures: each rule once,
for the fleet engine and the per-trace reference alike.

* shares: each class's seconds on the path over the task's duration;
* bottleneck: the class with the largest share (ties in CLASSES order); a task of zero
  duration takes the class of its first section;
* confidence: the evidence quality on the path (time-weighted section confidence), lowered
  when the top two classes are close (:func:`task_confidence`);
* evidence: the three spans that held the path longest, in one sentence each
  (:func:`evidence_line`).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from .evidence import BASES, CLASSES, IO, LABEL_BASIS, MEASURED_BASIS
from .results import Shares, Summary

CLOSE = 0.3  # a margin between the top two classes below this lowers the confidence
# a class (a task's bottleneck, a section's class) over this part of whose share rests on a
# stage label or an assumption rather than measurement is marked as assumed in every output
MOSTLY_ASSUMED = 0.5
ASSUMED_MARK = "*"  # the mark, in the text outputs
ASSUMED_LEGEND = "assumed from a stage label, not measured"
GUESSED = 0.5  # below this measured share of the critical paths, every output warns
EVIDENCE_SPANS = 3  # the spans a task's evidence names at most ...
EVIDENCE_MIN_SHARE = 0.01  # ... the longest always, the others if they held >= 1% of its path


def task_confidence(quality: Any, shares: Any) -> Any:
    """Per task: ``quality`` (the time-weighted confidence of its sections) times 0.5 .. 1 as
    the margin between its two largest class ``shares`` (an (n, 5) array) grows to
    :data:`CLOSE`, rounded to 2 places."""
    shares = np.asarray(shares, dtype=np.float64)
    ranked = np.sort(shares, axis=1)
    margin = ranked[:, -1] - ranked[:, -2]
    return np.round(np.asarray(quality, dtype=np.float64)
                    * (0.5 + 0.5 * np.minimum(margin / CLOSE, 1.0)), 2)


def bottlenecks(shares: Any, duration: Any, first_cls: Any) -> Any:
    """Per task, the index (into CLASSES) of its bottleneck: the largest share, ties in
    CLASSES order; for a task of zero duration, ``first_cls`` (its first section's class)."""
    return np.where(np.asarray(duration) > 0, np.argmax(shares, axis=1),
                    np.asarray(first_cls, dtype=np.int64))


def assumed_parts(shares: Any, basis: Any, wait_cls: Any) -> tuple:
    """Per section (rows of ``shares``, an (n, 6) array), the part of its time whose class
    rests on a stage label or an assumption rather than on measurement, and that class:
    (part, class index as int8), part 0 for most. Where a section's class rests on the label
    (``basis`` :data:`~.evidence.LABEL_BASIS`), it is the share of the class its waiting was
    given (``wait_cls``: without accounting, the class its stage gave the whole span; for an
    inference at a local server with no timing, the assumed accelerator), not what was
    measured of it (the CPU it used itself, its page faults)."""
    shares = np.asarray(shares, dtype=np.float64).reshape(-1, len(CLASSES))
    label = np.asarray(basis, dtype=np.int64) == LABEL_BASIS
    cls = np.where(label, np.asarray(wait_cls, dtype=np.int64), 0).astype(np.int8)
    part = np.where(label, shares[np.arange(len(shares)), cls], 0.0)
    return part, cls


NO_CLASS = CLASSES.index(IO)  # the first section's class of a task without sections


def evidence_kept(rank: Any, held_ns: Any, duration_ns: Any) -> Any:
    """Whether the span ranked ``rank`` (0: held the path longest) among a task's spans is
    named in its evidence: the first EVIDENCE_SPANS, but after the first only those that held
    at least EVIDENCE_MIN_SHARE of the task's path (a task's own 0.2 ms between its children
    said nothing a reader needs). Scalars or numpy arrays."""
    return (rank < EVIDENCE_SPANS) & ((rank == 0) | (held_ns >= EVIDENCE_MIN_SHARE * duration_ns))


def evidence_line(label: str, held_ns: int, duration_ns: int, cls: str, words: str) -> str:
    """One sentence of a task's evidence: a span, how long it held the path, its class, why."""
    share = held_ns / duration_ns if duration_ns else 0.0
    held = f"{held_ns / 1e9:.3g} s" if held_ns >= 1_000_000 else f"{held_ns / 1e3:.3g} µs"
    return f"{label}: {held} on the critical path ({share:.0%}), {cls}: {words}"


def span_label(name: str, stage: Any) -> str:
    return f"{name} ({stage})" if stage else name


def mostly_assumed(shares: Any, assumed: Any, cls: str) -> bool:
    """Whether class ``cls`` rests mostly (over :data:`MOSTLY_ASSUMED` of its share) on a stage
    label or an assumption: ``shares`` and ``assumed`` map classes to fractions (``assumed``
    may be None: nothing assumed)."""
    share = shares.get(cls, 0.0) if shares else 0.0
    return bool(assumed) and share > 0 and assumed.get(cls, 0.0) > MOSTLY_ASSUMED * share


def bottleneck_assumed(task: Any) -> bool:
    """Whether the task's bottleneck rests mostly on a stage label or an assumption (it is
    marked as such wherever the bottleneck is shown)."""
    return mostly_assumed(task.shares, getattr(task, "assumed", None), task.bottleneck)


def section_assumed(segment: Any) -> bool:
    """Whether a critical-path section's class rests mostly on a stage label or an
    assumption."""
    return mostly_assumed(segment.shares, getattr(segment, "assumed", None), segment.cls)


def summarize(tasks: Any, sections: Any = None, orphan_roots: int = 0) -> Summary:
    """Fleet figures over all tasks (and their ``sections``, for what the classes rest on)."""
    total = sum(t.duration_ns for t in tasks)
    basis = evidence_basis(sections)
    cols = task_arrays(tasks)
    weight = cols.duration.astype(np.float64)[:, None]
    # (cumsum: the same additions in the same order as a loop over the tasks)
    by_class = dict(zip(CLASSES, (np.cumsum(cols.shares * weight, axis=0)[-1].tolist()
                                  if len(tasks) else [0.0] * len(CLASSES))))
    assumed = dict(zip(CLASSES, (np.cumsum(cols.assumed * weight, axis=0)[-1].tolist()
                                 if len(tasks) else [0.0] * len(CLASSES))))
    counts: dict = {}
    assumed_counts: dict = {}
    lanes: dict = {}
    for t in tasks:
        counts[t.bottleneck] = counts.get(t.bottleneck, 0) + 1
        if bottleneck_assumed(t):
            assumed_counts[t.bottleneck] = assumed_counts.get(t.bottleneck, 0) + 1
        lane = t.lane or "unknown"
        lanes[lane] = lanes.get(lane, 0) + 1
    return Summary(
        tasks=len(tasks),
        bottlenecks=dict(sorted(counts.items(), key=lambda kv: -kv[1])),
        critical_path_s=round(total / 1e9, 6),
        share_of_critical_path={c: round(v / total, 4) if total else 0.0
                                for c, v in by_class.items()},
        orchestration_share=round(sum(t.orchestration_ns for t in tasks) / total, 4)
        if total else 0.0,
        lanes=lanes,
        spans=sum(t.spans for t in tasks),
        measured_share=basis[BASES[MEASURED_BASIS]],
        evidence_basis=basis,
        orphan_spans=sum(t.orphans for t in tasks), orphan_roots=orphan_roots,
        spans_off_path=sum(t.off_path for t in tasks),
        assumed_share_of_critical_path={c: round(v / total, 4) if total else 0.0
                                        for c, v in assumed.items()},
        assumed_bottlenecks=dict(sorted(assumed_counts.items(), key=lambda kv: -kv[1])),
        timeout_share=round(sum(t.timeout_ns for t in tasks) / total, 4) if total else 0.0,
        retry_share=round(sum(t.retry_ns for t in tasks) / total, 4) if total else 0.0)


class TaskArrays(NamedTuple):
    """The tasks' figures that fleet sums read, as arrays (one row per task)."""
    duration: Any  # int64 ns
    shares: Any  # (n, len(CLASSES)) float64
    assumed: Any  # (n, len(CLASSES)) float64


def task_arrays(tasks: Any) -> TaskArrays:
    """:class:`TaskArrays` of ``tasks`` (TaskResult)."""
    n = len(tasks)
    duration = np.fromiter((t.duration_ns for t in tasks), dtype=np.int64, count=n)
    shares = np.fromiter((t.shares.get(c, 0.0) for t in tasks for c in CLASSES),
                         dtype=np.float64, count=n * len(CLASSES)).reshape(n, len(CLASSES))
    assumed = np.fromiter((t.assumed.get(c, 0.0) for t in tasks for c in CLASSES),
                          dtype=np.float64, count=n * len(CLASSES)).reshape(n, len(CLASSES))
    return TaskArrays(duration, shares, assumed)


def evidence_basis(sections: Any) -> dict:
    """Share of all critical-path time per basis (measured, label, untraced), 4 places."""
    if sections is None or not len(sections) or sections.basis is None:
        return {b: (1.0 if k == MEASURED_BASIS else 0.0) for k, b in enumerate(BASES)} \
            if sections is not None and len(sections) else dict.fromkeys(BASES, 0.0)
    length = (np.asarray(sections.end_ns) - np.asarray(sections.start_ns)).astype(np.float64)
    total = length.sum()
    per = np.bincount(np.asarray(sections.basis, dtype=np.int64), length, len(BASES))
    return {b: round(float(v / total), 4) if total else 0.0 for b, v in zip(BASES, per)}


def breakdown(sections: Any, keys: Any, assumed: bool = False) -> dict:
    """Critical-path seconds per class, summed by ``keys`` (one label per section, e.g. its
    stage or its task's lane): {label: {class: seconds}}, labels sorted. With ``assumed``, only
    the seconds whose class rests on a stage label or an assumption."""
    if not len(sections):
        return {}
    length = (np.asarray(sections.end_ns) - np.asarray(sections.start_ns)).astype(np.float64)
    uniq, inv = _codes(keys)
    n = len(uniq)
    if not assumed:
        shares = Shares.of(sections.shares)
        sums = np.stack([np.bincount(inv, shares.column(c) * (length / 1e9), n)
                         for c in range(len(CLASSES))], axis=1)
    else:
        sums = np.zeros((n, len(CLASSES)))
        if sections.assumed is not None:  # None: nothing assumed
            flat = inv * len(CLASSES) + np.asarray(sections.assumed_cls, dtype=np.int64)
            sums = np.bincount(flat, np.asarray(sections.assumed, dtype=np.float64)
                               * (length / 1e9), n * len(CLASSES)).reshape(n, len(CLASSES))
    return {k: {c: round(float(v), 6) for c, v in zip(CLASSES, row)}
            for k, row in zip(uniq, sums)}


def _codes(keys: Any) -> tuple:
    """(the distinct keys, sorted, as a list; each key's index in it): integer keys as
    integers, any other as its text (keys of equal text are one)."""
    keys = keys if isinstance(keys, np.ndarray) else np.asarray(keys, dtype=object)
    if keys.dtype.kind in "iu":
        if len(keys) and 0 <= keys.min() and keys.max() < 4 * len(keys):  # dense: no sort
            present = np.bincount(keys) > 0
            rank = np.cumsum(present) - 1
            return np.flatnonzero(present).tolist(), rank[keys]
        uniq, inv = np.unique(keys, return_inverse=True)
        return uniq.tolist(), inv
    import pandas as pd

    codes, uniq = pd.factorize(keys, use_na_sentinel=False)  # hashing, not sorting, 2M keys
    names = [str(u) for u in uniq]
    distinct = sorted(set(names))
    place = {n: k for k, n in enumerate(distinct)}
    return distinct, np.asarray([place[n] for n in names], dtype=np.int64)[codes]


def basis_words(summary: Any) -> str:
    """What the classes rest on, in words: 'measured 62.0% (stage labels 30.0%, untraced
    8.0%)'; the parts under 0.05 % are left out."""
    b = summary.evidence_basis or {}
    rest = [f"{label} {b.get(key, 0.0):.1%}" for key, label in (("label", "stage labels"),
                                                                ("untraced", "untraced"))
            if b.get(key, 0.0) >= 0.0005]
    return f"measured {summary.measured_share:.1%}" + (f" ({', '.join(rest)})" if rest else "")


def partial_words(summary: Any) -> "str | None":
    """Spans of partial traces and spans the walks left off, in words (None: none)."""
    if not summary.orphan_spans and not summary.spans_off_path:
        return None
    adopted = summary.orphan_spans - summary.orphan_roots
    how = ", ".join(part for part in (
        f"{adopted} adopted by their trace's root" if adopted else "",
        f"{summary.orphan_roots} walked as roots" if summary.orphan_roots else "") if part)
    return (f"{summary.orphan_spans} spans whose parent is not in the traces"
            + (f" ({how})" if how else "") + f"; {summary.spans_off_path} spans left off the "
            "critical paths (outside their parent, or not blocking it)")


def guess_warning(summary: Any) -> "str | None":
    """The warning every output gives when most critical-path time rests on no measurement."""
    if not summary.tasks or summary.measured_share >= GUESSED:
        return None
    b = summary.evidence_basis or {}
    return (f"only {summary.measured_share:.0%} of the critical-path time rests on measured "
            f"evidence ({b.get('label', 0.0):.0%} on stage labels, {b.get('untraced', 0.0):.0%} "
            "untraced): the verdicts are guesses from the spans' labels, or say nothing of "
            "that time. Record resource accounting with agentscope's decorators or agentscope "
            "run to measure it.")
