"""The analysis' results as data: every critical-path section (:class:`Sections`, named
arrays), each task (:class:`TaskResult`, with its :class:`Segment` list), the fleet
(:class:`Summary`). The engine makes them; the front door (:mod:`agentscope.analysis`) and
the exporters read them. Nothing here is changed after it is made; the evidence in words is
made on first reading (it costs more than the numbers, and most outputs need little of it).
"""

from __future__ import annotations

import bisect
import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple, Optional

import numpy as np

from .evidence import BASES, CLASSES, GAP_REASON, OFF_CPU_UNEXPLAINED, Gathered


class ReadOnlyDict(dict):
    """A dict that cannot be changed (it prints, compares and serialises as a dict)."""

    def _read_only(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("an analysis' results are read-only: copy them with dict() to change")

    __setitem__ = __delitem__ = __ior__ = clear = pop = popitem = setdefault = update = \
        _read_only  # type: ignore[assignment]


# the dtype of a section's class and basis (positions in CLASSES and BASES): one byte a section
# rather than eight (at 20M spans, 7.7M sections: 108 MB less)
CODE = np.int8
# a task's figures of every class that are all 0 (what it assumed, for most tasks): one object
# for all of them (about 0.5-0.8 KB a task: at 20M spans, 206k tasks, 100-150 MB)
_NONE_PER_CLASS = ReadOnlyDict(zip(CLASSES, [0.0] * len(CLASSES)))


def per_class(values: Sequence) -> ReadOnlyDict:
    """A task's figure of each class (``values`` in CLASSES order), read-only; all 0: one
    shared object."""
    if not any(values):
        return _NONE_PER_CLASS
    return ReadOnlyDict(zip(CLASSES, values))


class SpanIds:
    """The span ids of sections (text, or None for a gap between root spans), held as bytes:
    16 a section for the store's ids (16 hex digits) against about 73 for a Python string and
    its pointer (at 20M spans, 7.7M sections: 440 MB less). It slices, gathers, lists and
    compares (elementwise) as the object array it stands for; ``np.asarray(ids,
    dtype=object)`` makes that array. Where one id is not text that bytes hold exactly (not
    ASCII, a NUL at the end, "", not text at all), the whole column stays an object array
    inside (as much memory as before)."""

    __slots__ = ("_v",)

    def __init__(self, values: Any) -> None:
        self._v = values  # (bytes, b"" for None) or (object: text or None)

    @classmethod
    def of(cls, values: Any) -> "SpanIds":
        """The ids ``values`` (a sequence of text or None)."""
        if isinstance(values, SpanIds):
            return values
        ids = np.asarray(values, dtype=object)
        none = np.equal(ids, None)
        text = np.where(none, "", ids) if none.any() else ids
        items = text.tolist()
        if set(map(type, items)) - {str}:  # (anything but text or None: as it is)
            return cls(ids)
        try:
            packed = text.astype("S") if len(ids) else np.zeros(0, dtype="S16")
        except (UnicodeEncodeError, TypeError, ValueError):
            return cls(ids)
        # exact only where every id was ASCII text, not "" and not ending in NUL (bytes drop
        # trailing NULs): the lengths tell
        lengths = np.fromiter(map(len, items), dtype=np.int64, count=len(items))
        if not np.array_equal(np.char.str_len(packed), lengths) or \
                np.any((lengths == 0) & ~none):
            return cls(ids)
        return cls(packed)

    @staticmethod
    def joined(parts: Sequence) -> "SpanIds":
        """The ids of ``parts`` (SpanIds) one after another."""
        values = [SpanIds.of(p)._v for p in parts]
        if values and all(v.dtype.kind == "S" for v in values):
            return SpanIds(np.concatenate(values))
        return SpanIds(np.concatenate([np.asarray(SpanIds(v), dtype=object) for v in values])
                       if values else np.zeros(0, dtype="S16"))

    def __len__(self) -> int:
        return len(self._v)

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, (int, np.integer)):
            value = self._v[key]
            return (value.decode("ascii") if value else None) if self._v.dtype.kind == "S" \
                else value
        return SpanIds(self._v[key])

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self.tolist())

    def tolist(self) -> list:
        if self._v.dtype.kind != "S":
            return self._v.tolist()
        return [v.decode("ascii") if v else None for v in self._v.tolist()]

    def __eq__(self, other: Any) -> Any:  # type: ignore[override]
        return np.asarray(self, dtype=object) == other  # (elementwise, as numpy compares)

    def __ne__(self, other: Any) -> Any:  # type: ignore[override]
        return np.asarray(self, dtype=object) != other

    __hash__ = None  # type: ignore[assignment]

    def freeze(self) -> None:
        self._v.flags.writeable = False

    def is_none(self) -> Any:
        """Whether each id is None (a gap), as a bool array."""
        return self._v == b"" if self._v.dtype.kind == "S" else np.equal(self._v, None)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        out = np.empty(len(self._v), dtype=object)
        out[:] = self.tolist()
        return out if dtype is None else out.astype(dtype)

    @property
    def nbytes(self) -> int:
        return self._v.nbytes

    def __repr__(self) -> str:
        return f"SpanIds({self.tolist()!r})"


# rows of shares packed at a time (Shares.of, Shares.of_columns)
PACK_ROWS = 1_000_000


class Shares:
    """The class shares of sections (a row each, CLASSES order), held packed: most sections
    have one or two classes, so each row keeps its first two non-zero classes and their
    shares (18 bytes against 48 for the row of six floats), and a row with more is kept
    whole beside them. The values are the same floats (a -0.0 comes back as 0.0).
    ``dense(lo, hi)`` and ``column(k)``
    give the rows and a class' column as arrays; ``np.asarray(shares)`` gives every row."""

    __slots__ = ("cls", "val", "more", "more_rows", "_n")
    dtype = np.dtype(np.float64)  # (what its rows are, as arrays)

    def __init__(self, cls: Any, val: Any, more: Any, more_rows: Any) -> None:
        # (n, 2) int8 class (-1: none), (n, 2) float64 share; the rows with more than two
        # classes: their positions (int64, ascending) and their rows (m, len(CLASSES))
        self.cls, self.val, self.more, self.more_rows = cls, val, more, more_rows
        self._n = len(cls)

    @classmethod
    def of(cls, rows: Any, chunk: int = PACK_ROWS) -> "Shares":
        """The shares ``rows`` (an (n, len(CLASSES)) array, or Shares), packed ``chunk`` rows
        at a time (the sort below takes about 50 bytes a row while it runs)."""
        if isinstance(rows, Shares):
            return rows
        rows = np.asarray(rows, dtype=np.float64).reshape(-1, len(CLASSES))
        if len(rows) > chunk:
            return cls.of_columns(rows.T, chunk)
        nonzero = rows != 0
        # the positions of the non-zero classes first, in class order (a stable sort)
        first = np.argsort(~nonzero, axis=1, kind="stable")[:, :2]
        kept = np.take_along_axis(nonzero, first, axis=1)
        val = np.where(kept, np.take_along_axis(rows, first, axis=1), 0.0)
        packed = np.where(kept, first, -1).astype(np.int8)
        more = np.flatnonzero(nonzero.sum(axis=1) > 2)
        return cls(packed, val, more, rows[more].copy())

    @classmethod
    def of_columns(cls, columns: Sequence, chunk: int = PACK_ROWS) -> "Shares":
        """The shares whose class columns (CLASSES order) are ``columns``, packed ``chunk``
        rows at a time (their rows are never all made at once)."""
        n = len(columns[0]) if len(columns) else 0
        return Shares.joined([cls.of(np.stack([c[lo:lo + chunk] for c in columns], axis=1),
                                     chunk) for lo in range(0, n, chunk)])

    @staticmethod
    def joined(parts: Sequence) -> "Shares":
        """The rows of ``parts`` (Shares, or arrays) one after another."""
        parts = [Shares.of(p) for p in parts]
        if not parts:
            return Shares.of(np.zeros((0, len(CLASSES))))
        offsets = np.cumsum([0] + [len(p) for p in parts])[:-1]
        return Shares(np.concatenate([p.cls for p in parts]),
                      np.concatenate([p.val for p in parts]),
                      np.concatenate([p.more + off for p, off in zip(parts, offsets.tolist())]),
                      np.concatenate([p.more_rows for p in parts]))

    def __len__(self) -> int:
        return self._n

    @property
    def shape(self) -> tuple:
        return (self._n, len(CLASSES))

    def __getitem__(self, key: Any) -> Any:
        """The rows ``key`` (a slice, a mask or positions), packed; one row (an int) as an
        array of its len(CLASSES) shares."""
        if isinstance(key, (int, np.integer)):
            if not -self._n <= key < self._n:
                raise IndexError(f"row {key} of {self._n}")
            key = int(key) % self._n
            return self[key:key + 1].dense()[0]
        if isinstance(key, tuple):
            raise IndexError("packed shares: take rows first, then .column(k) or .dense()")
        if isinstance(key, slice):
            lo, hi, step = key.indices(self._n)
            if step == 1:
                a, b = np.searchsorted(self.more, [lo, max(hi, lo)]).tolist()
                return Shares(self.cls[lo:hi], self.val[lo:hi], self.more[a:b] - lo,
                              self.more_rows[a:b])
            key = np.arange(lo, hi, step)
        rows = np.arange(self._n)[key]
        found = np.isin(rows, self.more)  # (rows kept whole; ``more`` is sorted, unique)
        return Shares(self.cls[rows], self.val[rows], np.flatnonzero(found),
                      self.more_rows[np.searchsorted(self.more, rows[found])])

    def dense(self, lo: int = 0, hi: Optional[int] = None) -> np.ndarray:
        """Rows ``lo`` .. ``hi`` - 1 as an (n, len(CLASSES)) float64 array."""
        part = self[lo:self._n if hi is None else hi]
        out = np.zeros((len(part), len(CLASSES)))
        at = np.arange(len(part))
        for j in range(2):
            has = part.cls[:, j] >= 0
            out[at[has], part.cls[has, j]] = part.val[has, j]
        out[part.more] = part.more_rows
        return out

    def column(self, k: int) -> np.ndarray:
        """Every row's share of class ``k`` (a position in CLASSES), float64."""
        out = np.where(self.cls[:, 0] == k, self.val[:, 0], 0.0)
        second = self.cls[:, 1] == k
        out[second] = self.val[second, 1]
        out[self.more] = self.more_rows[:, k]
        return out

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        out = self.dense()
        return out if dtype is None else out.astype(dtype)

    @property
    def nbytes(self) -> int:
        return self.cls.nbytes + self.val.nbytes + self.more.nbytes + self.more_rows.nbytes

    def freeze(self) -> None:
        for value in (self.cls, self.val, self.more, self.more_rows):
            value.flags.writeable = False


def assumed_columns(assumed: Any, assumed_cls: Any) -> tuple:
    """What a :class:`Sections` holds of what its sections assumed: the two arrays, or
    (None, None) where nothing was (most analyses: 9 bytes a section less)."""
    return (assumed, assumed_cls) if np.any(assumed) else (None, None)


class Segment(NamedTuple):
    """One critical-path section of a task, with its class."""

    span_id: Optional[str]  # None: a gap no span covered (between root spans)
    name: str
    stage: Optional[str]
    start_ns: int
    end_ns: int
    cls: str
    shares: dict  # class -> fraction of the section (the non-zero ones)
    confidence: float
    evidence: str
    basis: str = "measured"  # what its class rests on: measured | label | untraced
    # class -> the part of its fraction that rests on a stage label or an assumption, not on
    # measurement (the non-zero ones; None: none)
    assumed: Optional[dict] = None


class TaskResult(NamedTuple):
    trace_id: str
    name: str
    lane: Optional[str]
    service: Optional[str]
    start_ns: int
    duration_ns: int
    bottleneck: str
    confidence: float
    shares: Mapping  # class -> fraction of the critical path (sums to 1); read-only
    evidence: tuple  # sentences, most important first
    segments: Sequence  # of Segment, contiguous, covering the task
    spans: int
    orchestration_ns: int
    duplicates: int
    off_path: int
    measured_share: float = 1.0  # share of its critical path whose class rests on measurement
    orphans: int = 0  # its spans whose parent is not in the data
    root_span_id: Optional[str] = None  # the span the task is named after (its root)
    # class -> the part of its share (a fraction of the critical path, <= shares[class]) that
    # rests on a stage label or an assumption, not on measurement; read-only
    assumed: Mapping = ReadOnlyDict()
    # critical-path ns held by timed-out spans, and by failed attempts a same-name sibling
    # retried (analyzers/reliability.py)
    timeout_ns: int = 0
    retry_ns: int = 0
    # its orphans that no root of its trace enclosed (walked as roots; Summary.orphan_roots)
    orphan_roots: int = 0


class SectionEvidence:
    """The evidence of every section in words, made when first read: the words of the span
    that owned it (:meth:`Classified.reasons`), then what the counters said over it."""

    def __init__(self, classified: Any, span_row: Any, notes: Any) -> None:
        self._classified = classified  # every span's classification
        self._span_row = span_row  # per section: the span's row, -1 for a gap
        self._notes = notes  # per section: what the counters said (str or None); None: none
        self._reasons: dict = {-1: GAP_REASON}  # span row -> its words
        self._all: Optional[list] = None

    def __len__(self) -> int:
        return len(self._span_row)

    def texts(self, lo: int = 0, hi: Optional[int] = None) -> list:
        """The words of sections ``lo`` .. ``hi`` - 1."""
        if self._all is not None:
            return self._all[lo:hi]
        return self._texts(np.arange(lo, len(self) if hi is None else hi))

    def texts_at(self, sections: Any) -> list:
        """The words of the given sections."""
        if self._all is not None:
            return [self._all[k] for k in np.asarray(sections).tolist()]
        return self._texts(np.asarray(sections, dtype=np.int64))

    def all(self) -> list:
        """The words of every section (made in one go, and kept)."""
        if self._all is None:
            self._all = self._texts(np.arange(len(self)))
        return self._all

    def settle(self) -> None:
        """Let go of the classification the words are made from (every span's figures: far
        more than the sections need), keeping what the sections' own spans' words are made
        of (:meth:`Classified.gathered`). A batch of a large analysis does this, so that
        memory holds one batch's spans at a time; the words are still made only if read."""
        if self._all is not None or isinstance(self._classified, Gathered):
            return
        rows = self._span_row
        owners = _distinct(rows[rows >= 0])
        self._classified = self._classified.gathered(owners)
        # each section's span as its position among the owners (a gap: -1)
        self._span_row = np.where(rows >= 0, np.searchsorted(owners, rows), -1)
        self._reasons = {-1: GAP_REASON}

    def _texts(self, sections: Any) -> list:
        rows = self._span_row[sections]
        reasons = self._reasons
        missing = [r for r in _distinct(rows).tolist() if r not in reasons]
        if missing:
            reasons.update(zip(missing, self._classified.reasons(missing)))
        words = [reasons[r] for r in rows.tolist()]
        if self._notes is None:
            return words
        return [with_note(w, note) for w, note in zip(words, self._notes[sections].tolist())]


def _distinct(rows: Any) -> Any:
    """The distinct values of an int array, ascending (numpy's hashing unique is slower here
    than a sort)."""
    ordered = np.sort(rows)
    return ordered[np.r_[True, ordered[1:] != ordered[:-1]]] if len(ordered) else ordered


def sliced_evidence(evidence: Any, lo: int, hi: int) -> Any:
    """Sections ``lo`` .. ``hi`` - 1 of ``evidence`` (any of the evidence classes), from 0,
    as slices of the evidence they were made with (no slice of a slice)."""
    if isinstance(evidence, SlicedEvidence):
        return SlicedEvidence(evidence._evidence, evidence._lo + lo, evidence._lo + hi)
    if isinstance(evidence, JoinedEvidence):
        pieces = [sliced_evidence(p, max(lo, a) - a, min(hi, b) - a) for p, a, b in zip(
            evidence._parts, evidence._starts, evidence._starts[1:]) if lo < b and hi > a]
        return pieces[0] if len(pieces) == 1 else JoinedEvidence(pieces)
    return SlicedEvidence(evidence, lo, hi)


class SlicedEvidence:
    """The evidence of sections ``lo`` .. ``hi`` - 1 of another evidence, from 0."""

    def __init__(self, evidence: Any, lo: int, hi: int) -> None:
        self._evidence, self._lo, self._hi = evidence, lo, hi

    def __len__(self) -> int:
        return self._hi - self._lo

    def texts(self, lo: int = 0, hi: Optional[int] = None) -> list:
        hi = len(self) if hi is None else hi
        return self._evidence.texts(self._lo + lo, self._lo + hi)

    def texts_at(self, sections: Any) -> list:
        return self._evidence.texts_at(np.asarray(sections, dtype=np.int64) + self._lo)

    def all(self) -> list:
        return self.texts()


class JoinedEvidence:
    """The evidence of sections joined from several analyses (batches of traces), in their
    order: the same reading as :class:`SectionEvidence`."""

    def __init__(self, parts: Sequence) -> None:
        # (joined evidence among the parts is flattened: a serve that merges its analysis
        # again at every refresh keeps one level)
        self._parts = [q for p in parts
                       for q in (p._parts if isinstance(p, JoinedEvidence) else [p]) if len(q)]
        self._starts = np.cumsum([0] + [len(p) for p in self._parts]).tolist()

    def __len__(self) -> int:
        return self._starts[-1]

    def texts(self, lo: int = 0, hi: Optional[int] = None) -> list:
        hi = len(self) if hi is None else hi
        out: list = []
        k = bisect.bisect_right(self._starts, lo) - 1  # the part holding ``lo`` (no scan)
        while 0 <= k < len(self._parts) and self._starts[k] < hi:
            start, end = self._starts[k], self._starts[k + 1]
            out += self._parts[k].texts(max(lo, start) - start, min(hi, end) - start)
            k += 1
        return out

    def texts_at(self, sections: Any) -> list:
        sections = np.asarray(sections, dtype=np.int64)
        which = np.searchsorted(self._starts, sections, side="right") - 1
        out: list = [None] * len(sections)
        for k in np.unique(which).tolist():
            at = np.flatnonzero(which == k)
            for j, text in zip(at.tolist(),
                               self._parts[k].texts_at(sections[at] - self._starts[k])):
                out[j] = text
        return out

    def all(self) -> list:
        return [text for part in self._parts for text in part.all()]


def with_note(reason: str, note: Optional[str]) -> str:
    """A span's evidence followed by what the counters said; where they explained the waiting
    (contention, memory pressure, the GPU), the span's own 'waiting on something outside the
    process' is dropped."""
    if not note:
        return reason
    if not note.startswith("host not saturated"):
        reason = reason.replace(", " + OFF_CPU_UNEXPLAINED, "").replace(OFF_CPU_UNEXPLAINED, "")
    return f"{reason}; {note}" if reason else note


@dataclasses.dataclass(frozen=True)
class Sections:
    """Every critical-path section of an analysis, as named arrays (one row per section, tasks'
    sections contiguous and in time order)."""

    task: Any  # int64: the task's index (position in the analysis' tasks)
    seq: Any  # int64: position within its task
    span_id: Any  # SpanIds: the span holding the path; None for a gap between root spans
    name: Any  # object: its name; "(gap)" for a gap
    stage: Any  # object: its stage, or None
    start_ns: Any  # int64
    end_ns: Any  # int64
    cls: Any  # int8 (CODE): its class, an index into CLASSES
    confidence: Any  # float64
    shares: Any  # Shares: each section's class shares (n, 6), CLASSES order, packed
    evidence: SectionEvidence  # the words, on demand
    basis: Any = None  # int8 (CODE): what its class rests on, a position in BASES (None: measured)
    # float64: the part of the section whose class rests on a stage label or an assumption,
    # not on measurement (0 for most; at most its share of that class), and int8: that class,
    # an index into CLASSES (None, None: nothing assumed)
    assumed: Any = None
    assumed_cls: Any = None

    def __post_init__(self) -> None:
        # (a frozen dataclass: set as its own)
        if not isinstance(self.span_id, SpanIds):
            object.__setattr__(self, "span_id", SpanIds.of(self.span_id))
        if not isinstance(self.shares, Shares):
            object.__setattr__(self, "shares", Shares.of(self.shares))
        self.span_id.freeze()
        self.shares.freeze()
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if isinstance(value, np.ndarray):
                value.flags.writeable = False

    def __len__(self) -> int:
        return len(self.task)

    def segments(self, lo: int, hi: int, words: bool = True) -> list:
        """Sections ``lo`` .. ``hi`` - 1 as :class:`Segment` records (without ``words``:
        each with "" for its evidence, which is then not made)."""
        words = self.evidence.texts(lo, hi) if words else [""] * (hi - lo)
        shares = self.shares.dense(lo, hi)
        basis = self.basis[lo:hi].tolist() if self.basis is not None else [0] * (hi - lo)
        if self.assumed is not None:
            parts = self.assumed[lo:hi].tolist()
            part_cls = self.assumed_cls[lo:hi].tolist()
        else:
            parts, part_cls = [0.0] * (hi - lo), [0] * (hi - lo)
        return [Segment(sid, name, stage, a, b, CLASSES[k],
                        {c: v for c, v in zip(CLASSES, row) if v}, conf, text, BASES[bs],
                        {CLASSES[pc]: part} if part else None)
                for sid, name, stage, a, b, k, conf, row, text, bs, part, pc in zip(
                    self.span_id[lo:hi].tolist(), self.name[lo:hi].tolist(),
                    self.stage[lo:hi].tolist(), self.start_ns[lo:hi].tolist(),
                    self.end_ns[lo:hi].tolist(), self.cls[lo:hi].tolist(),
                    self.confidence[lo:hi].tolist(), shares.tolist(), words, basis, parts,
                    part_cls)]


def plain_segments(task: Any) -> Sequence:
    """A task's segments for a reader that needs none of their evidence in words
    (:meth:`LazySegments.plain`)."""
    segments = task.segments
    return segments.plain() if isinstance(segments, LazySegments) else segments


class LazySegments(Sequence):
    """A task's segments, made from the analysis' sections on first use."""

    __slots__ = ("_sections", "_lo", "_hi", "_items")

    def __init__(self, sections: Sections, lo: int, hi: int) -> None:
        self._sections, self._lo, self._hi, self._items = sections, lo, hi, None

    def _list(self) -> list:
        if self._items is None:
            self._items = self._sections.segments(self._lo, self._hi)
        return self._items

    def plain(self) -> list:
        """The segments without their evidence in words (each ""), for a reader that needs
        none of it: the words are not made (they cost more than the rest)."""
        if self._items is not None:
            return self._items
        return self._sections.segments(self._lo, self._hi, words=False)

    def __getitem__(self, i):  # type: ignore[override]
        return self._list()[i]

    def __len__(self) -> int:
        return self._hi - self._lo

    def __iter__(self):  # type: ignore[override]
        return iter(self._list())


@dataclasses.dataclass(frozen=True)
class Summary:
    """The fleet figures. ``to_dict()`` is the JSON report's ``summary`` (ARCHITECTURE §7)."""

    tasks: int
    bottlenecks: dict  # class -> tasks, most first
    critical_path_s: float
    share_of_critical_path: dict  # class -> share of all critical-path time
    orchestration_share: float  # share of it that was task and agent spans' own time
    lanes: dict  # lane -> tasks
    spans: int
    # per GPU with counters (gpuN@host): busy, idle, measured_s, idle_while
    gpu: Optional[dict] = None
    input_problems: int = 0
    load: Optional[dict] = None  # what the load did: files_loaded, files_unchanged, ...
    # share of all critical-path time whose class rests on measured evidence, and the split
    # {measured, label, untraced} (label: assumed from a span's stage; untraced: no evidence)
    measured_share: float = 1.0
    evidence_basis: Optional[dict] = None
    orphan_spans: int = 0  # spans whose parent is not in the data (a cut or partial trace)
    orphan_roots: int = 0  # ... of them, those no root of their trace enclosed (walked as roots)
    spans_off_path: int = 0  # spans the walk left off (outside their parent, not blocking)
    # class -> share of all critical-path time that is that class only by a stage label or an
    # assumption, not by measurement (a part of share_of_critical_path); and class -> tasks
    # whose bottleneck it is mostly (over half its share) by assumption (a part of bottlenecks)
    assumed_share_of_critical_path: Optional[dict] = None
    assumed_bottlenecks: Optional[dict] = None
    # share of all critical-path time lost to timeouts / to retried failures
    timeout_share: float = 0.0
    retry_share: float = 0.0

    def __post_init__(self) -> None:
        for name in ("bottlenecks", "share_of_critical_path", "lanes", "gpu", "load",
                     "evidence_basis", "assumed_share_of_critical_path", "assumed_bottlenecks"):
            object.__setattr__(self, name, frozen(getattr(self, name)))

    def to_dict(self) -> dict:
        """The JSON report's ``summary`` (plain, new dicts)."""
        out = {"tasks": self.tasks, "bottlenecks": thawed(self.bottlenecks),
               "critical_path_s": self.critical_path_s,
               "share_of_critical_path": thawed(self.share_of_critical_path),
               "orchestration_share": self.orchestration_share,
               "measured_share": self.measured_share,
               "evidence_basis": thawed(self.evidence_basis) or {},
               "assumed_share_of_critical_path": thawed(
                   self.assumed_share_of_critical_path) or dict.fromkeys(CLASSES, 0.0),
               "assumed_bottlenecks": thawed(self.assumed_bottlenecks) or {},
               "lanes": thawed(self.lanes), "spans": self.spans,
               "orphan_spans": self.orphan_spans, "orphan_roots": self.orphan_roots,
               "spans_off_path": self.spans_off_path,
               "timeout_share": self.timeout_share, "retry_share": self.retry_share}
        if self.gpu is not None:
            out["gpu"] = thawed(self.gpu)
        out["input_problems"] = self.input_problems
        if self.load is not None:
            out["load"] = thawed(self.load)
        return out


def frozen(value: Any) -> Any:
    """Dicts (nested too) as read-only dicts."""
    if isinstance(value, Mapping):
        return ReadOnlyDict({k: frozen(v) for k, v in value.items()})
    return value


def thawed(value: Any) -> Any:
    """Read-only dicts (nested too) as new plain dicts."""
    if isinstance(value, Mapping):
        return {k: thawed(v) for k, v in value.items()}
    return value


@dataclasses.dataclass(frozen=True)
class Fleet:
    """What the engine makes of a store's spans: every task, every section, the summary."""

    tasks: tuple
    sections: Sections
    summary: Summary
    warnings: tuple = ()  # what the analysis could not do, in words (e.g. spans not joined)
