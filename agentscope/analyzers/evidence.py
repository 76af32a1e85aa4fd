"""Classifying critical-path sections by the evidence of the span that owned them.

A section is time during which one span held the task up with none of its children doing so:
its *self time*. The span's stage is a hint; the verdict comes from what was measured
(ARCHITECTURE §1):

* on-CPU time of its own thread and of the child processes it waited for, net of what its
  children on the same thread used (``cpu``; computed in the store, analysis_input.sql);
* major page faults (``memory``): the waiting they cost, and the kernel CPU time spent
  handling them (its thread's system time, up to ``FAULT_CPU_NS`` per fault), which is memory
  work rather than the program's computing; a ``memory`` stage that waited off-CPU, and its
  thread's kernel time (copying its data between tiers, pinning pages for direct I/O);
* queue time reported by the server on the span (``gen_ai.latency.time_in_queue``, as vLLM
  writes it), a ``queue`` stage that waited off-CPU (``queue``);
* server-reported prefill/decode time on an inference span (``gpu``);
* otherwise time off-CPU is waiting on something outside (``io``); an inference's waiting is
  waiting on its model endpoint (``io``: a remote model API, ARCHITECTURE §1) unless its server
  reported model time; device and model-server counters over the same interval can make it
  ``gpu``, ``queue`` or ``memory`` (counters.py).

Spans without resource accounting of their own but joined to the sampled counters of the
process tree that emitted them (a framework's OpenTelemetry spans under ``agentscope run``:
process_share.py) are judged by the same rule, from the CPU of their tree that their own time
claimed, with a lower confidence where they shared it or were short. Spans with neither are
classified from their stage alone (:data:`STAGE_CLASS`), with low confidence, and the
evidence says so.

Every rule is written once, in :func:`classify`, over arrays of spans (a million at a time);
the words of the evidence (:meth:`Classified.reason`) are made from the same intermediate
figures, for the spans a report shows. :func:`classify_one` is the same for one span.
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple, Optional, Sequence

import numpy as np

from ..vocab import Basis, Resource, Stage

GPU, CPU, MEMORY, IO, QUEUE = (Resource.GPU.value, Resource.CPU.value, Resource.MEMORY.value,
                               Resource.IO.value, Resource.QUEUE.value)
# Time on a critical path that no evidence explains, and no label either: a parent's own time
# between its children when the span has no resource accounting, a span without a stage, a
# gap between root spans. Not a resource: shown apart, never counted as measured.
UNTRACED = Basis.UNTRACED.value
# report order: gpu, cpu, memory, io, queue, then untraced
CLASSES = tuple(r.value for r in Resource) + (UNTRACED,)
RESOURCES = CLASSES[:-1]
_K = {c: i for i, c in enumerate(CLASSES)}

# what a section's class rests on (Sections.basis codes are positions in this tuple):
# measured evidence (resource accounting, server-reported timings, counters), the span's stage
# label alone, or nothing (untraced)
BASES = tuple(b.value for b in Basis)
MEASURED_BASIS, LABEL_BASIS, UNTRACED_BASIS = (BASES.index(b.value) for b in (
    Basis.MEASURED, Basis.LABEL, Basis.UNTRACED))

# What a stage usually means: the class of a span that has no evidence but its label (an
# inference's depends on where it was served: see classify), and the verdict from
# labels alone that the scenarios' baseline scores (there, an inference is a GPU's).
STAGE_CLASS = {Stage.TASK: CPU, Stage.AGENT: CPU, Stage.QUEUE: QUEUE, Stage.CONTEXT: CPU,
               Stage.INFERENCE: GPU, Stage.TOOL: IO, Stage.ENV: IO, Stage.MEMORY: MEMORY}
UNKNOWN_STAGE_CLASS = IO  # the labels-only baseline's guess for a span without a stage
SELF_TIME_STAGES = (Stage.TASK.value, Stage.AGENT.value)  # their self time is orchestration

BUSY = 0.5  # on-CPU fraction at or above which self time counts as CPU work
# what the span alone says of waiting it cannot explain (counters may explain it: counters.py)
OFF_CPU_UNEXPLAINED = "off-CPU: waiting on something outside the process"
MAJOR_FAULT_NS = 100_000  # a major fault costs about this much waiting (disk/swap read)
# ... and at most about this much kernel CPU to handle (measured: 29 us of system time per
# fault paging in a mapped file, on a VM with a virtio disk)
FAULT_CPU_NS = 50_000
SAID = 0.05  # waiting is mentioned in the words where it is at least this share of the span
# the span-only rules for waiting that was computing elsewhere (see classify):
CHILDREN_BUSY = 0.25  # child-process CPU per span second from which its children computed
THREAD_BUSY = 0.05  # on-CPU share from which its own thread computed
WORKERS_BUSY = 0.5  # CPU of threads without spans per second of its own time ...
WORKERS_CALLER = 0.2  # ... while its own thread computed at least this share (it called them)
GIL_BLOCKS = 2  # blocked at least this often ...
GIL_BLOCK_NS = 5_000_000  # ... for at most this long on average (Python's switch interval)
GIL_OTHERS = 0.5  # ... while the other threads computed at least this share of that waiting
MIN_MOVE_NS = 1_000_000  # the last two judge no less waiting than this

# confidences
MEASURED, ON_A_LOOP, FROM_LABEL, QUEUED_ONLY = 0.8, 0.6, 0.3, 0.9
FROM_COUNTS = 0.7  # most of its waiting judged from context-switch counts and CPU clocks
# judged from its process tree's counters (process_share.py): alone in its tree; sharing its
# time with other spans of the tree (its part estimated); its own time under a few samples
BY_PROCESS, BY_PROCESS_SHARED, BY_PROCESS_SHORT = 0.7, 0.5, 0.3
PROCESS_ALONE = 1.05  # mean number of spans sharing its own time (itself included): alone
PROCESS_SHORT = 3  # own time shorter than this many sampling intervals of its tree: short
# on-CPU share (from its part of its tree's CPU) from which such a span computed: below it,
# the part is within what an estimate among overlapping spans can be off by
PROCESS_COMPUTED = 0.3

UNTRACED_CONFIDENCE = 0.0
UNTRACED_REASON = ("no resource accounting, and no stage that says what it did: untraced time "
                   "(the span's own time, outside its traced children)")

# a gap between a trace's root spans: untraced
GAP_CLASS = UNTRACED
GAP_SHARES = {GAP_CLASS: 1.0}
GAP_CONFIDENCE = UNTRACED_CONFIDENCE
GAP_REASON = "untraced gap between the trace's root spans"

_STAGES = [s.value for s in Stage]  # stage codes: 1-based positions in this order, 0 for none
# a span with no accounting: its stage's usual class; a task's or agent's own time (the time
# between its children) and a span without a stage: untraced
_UNTRACED_STAGES = (Stage.TASK, Stage.AGENT)
_GUESS_BY_CODE = np.array([_K[UNTRACED]] + [
    _K[UNTRACED] if s in _UNTRACED_STAGES else _K[STAGE_CLASS[s]] for s in Stage])


def stage_code(stage: Optional[str]) -> int:
    """The code of a stage value (1-based position in Stage order; 0 for none or unknown)."""
    return _STAGES.index(stage) + 1 if stage in _STAGES else 0


def _code(stage: Stage) -> int:
    return _STAGES.index(stage.value) + 1


_QUEUE_CODE, _MEMORY_CODE, _INFERENCE_CODE = (_code(Stage.QUEUE), _code(Stage.MEMORY),
                                              _code(Stage.INFERENCE))


class SpanFacts(NamedTuple):
    """What the classifier needs of one span (a row of ``store/sql/analysis_input.sql``)."""

    span_id: str
    parent_id: Optional[str]
    name: str
    stage: Optional[str]
    kind: str
    start: int
    end: int
    # CPU of its thread net of same-thread children, plus its child processes'; < 0: not measured
    own_cpu: float
    own_wall: float  # duration minus the time its same-thread children ran
    own_faults: float  # major faults of its thread and child processes, net of its children's
    child_cpu: int  # CPU of the child processes it waited for (for the evidence)
    queue_s: float  # gen_ai.latency.time_in_queue (0: none reported)
    model_s: float  # prefill + decode reported by the server (0: none reported)
    server_local: bool  # server.address is this machine
    loop: bool  # CPU measured on an event loop (shared with other tasks)
    sys_cpu: float = 0.0  # kernel CPU of its thread, recorded where it took major faults
    ivcsw: int = 0  # its thread's involuntary context switches (preempted)
    vcsw: int = 0  # ... and voluntary ones (blocked)
    child_ivcsw: int = 0  # those of the child processes it waited for
    child_vcsw: int = 0
    other_cpu: float = 0.0  # CPU of its process's other threads while it ran (0: none)
    child_run_delay: float = -1.0  # its children's time runnable, waiting for a CPU (-1: none)
    endpoint: Optional[str] = None  # an inference's model endpoint (host:port)


@dataclasses.dataclass(frozen=True)
class Facts:
    """The classifier's input for many spans, one array per field (the columns of the same
    names in :class:`~agentscope.store.schema.AnalysisInput`, which can be passed instead)."""

    stage_code: Any
    start_ns: Any
    end_ns: Any
    own_cpu: Any
    own_wall: Any
    own_faults: Any
    child_cpu_ns: Any
    queue_s: Any
    model_s: Any
    server_local: Any
    loop: Any
    sys_cpu: Any
    ivcsw: Any = None
    vcsw: Any = None
    child_ivcsw: Any = None
    child_vcsw: Any = None
    other_cpu: Any = None
    child_run_delay: Any = None
    endpoint: Any = None

    @classmethod
    def of(cls, spans: Sequence[SpanFacts]) -> "Facts":
        """The facts of spans given one by one (tests, the per-trace reference)."""
        def col(get: Any, dtype: Any) -> np.ndarray:
            return np.asarray([get(s) for s in spans], dtype=dtype)

        return cls(col(lambda s: stage_code(s.stage), np.int64),
                   col(lambda s: s.start, np.int64), col(lambda s: s.end, np.int64),
                   col(lambda s: -1.0 if s.own_cpu is None else s.own_cpu, np.float64),
                   col(lambda s: s.own_wall, np.float64), col(lambda s: s.own_faults, np.float64),
                   col(lambda s: s.child_cpu or 0, np.float64),
                   col(lambda s: s.queue_s or 0.0, np.float64),
                   col(lambda s: s.model_s or 0.0, np.float64),
                   col(lambda s: bool(s.server_local), bool), col(lambda s: bool(s.loop), bool),
                   col(lambda s: s.sys_cpu or 0.0, np.float64),
                   *(col(lambda s, k=k: getattr(s, k) or 0, np.float64) for k in (
                       "ivcsw", "vcsw", "child_ivcsw", "child_vcsw", "other_cpu")),
                   col(lambda s: -1.0 if s.child_run_delay is None else s.child_run_delay,
                       np.float64), col(lambda s: s.endpoint, object))


WORDS_SHARE = 0.005  # what a span-only rule moved is said where at least this share of the span


class _Why(NamedTuple):
    """Per span, what the span-only rules of :func:`classify` moved from its waiting to
    ``cpu`` (shares of the span) and the figures they read (for the words)."""

    blocked: Any  # share: its event loop held by other tasks' spans
    blocked_ns: Any
    blocker: Any  # row of the span that held it longest (-1: none)
    blocker_label: dict  # row -> "`name` in task `task`"
    kids_run: Any  # share: its child processes runnable
    kid_iv: Any
    kid_v: Any
    thread_run: Any  # share: its thread runnable
    ivcsw: Any
    vcsw: Any
    workers_run: Any  # share: waiting for threads without spans that computed
    unowned: Any  # ns of CPU of those threads
    gil_run: Any  # share: waiting for the interpreter lock
    other: Any  # ns of CPU of the process's other threads
    run_delay: Any  # ns its child processes waited runnable (-1: not recorded)

    def silent(self) -> bool:
        """Whether :meth:`words` says nothing of any span (no rule moved enough to say)."""
        return not (np.any(np.asarray(self.blocked) > 0) or any(
            np.any(np.asarray(share) >= WORDS_SHARE)
            for share in (self.kids_run, self.thread_run, self.workers_run, self.gil_run)))

    def words(self, i: int, dur_ns: float) -> tuple:
        """(what comes before the span's own figures, what comes after), in words (the
        conditions :meth:`silent` reads)."""
        first = []
        if self.blocked[i] > 0:
            who = self.blocker_label.get(i, "another task's span")
            first.append(f"delayed by its event loop being blocked by {who} for "
                         f"{self.blocked_ns[i] / 1e9:.3g} s ({self.blocked[i]:.0%} of the span): "
                         "the blocking code's CPU, not its own")
        after = []
        if self.kids_run[i] >= WORDS_SHARE:
            timed = (f"{self.run_delay[i] / 1e9:.3g} s runnable, " if self.run_delay[i] >= 0
                     else "")
            after.append(f"its child processes were runnable, waiting for a CPU ({timed}"
                         f"preempted {int(self.kid_iv[i])}x, blocked {int(self.kid_v[i])}x; "
                         f"{self.kids_run[i]:.0%} of the span)")
        if self.thread_run[i] >= WORDS_SHARE:
            after.append(f"its thread was runnable, waiting for a CPU (preempted "
                         f"{int(self.ivcsw[i])}x, blocked {int(self.vcsw[i])}x; "
                         f"{self.thread_run[i]:.0%} of the span)")
        if self.workers_run[i] >= WORDS_SHARE:
            after.append("it waited for threads of its process with no span of their own (a "
                         "library's worker threads), which computed "
                         f"{self.unowned[i] / 1e9:.3g} s meanwhile ({self.workers_run[i]:.0%} "
                         "of the span)")
        if self.gil_run[i] >= WORDS_SHARE:
            mean = self.gil_run[i] * dur_ns / max(self.vcsw[i], 1.0) / 1e6
            after.append("it waited for Python's interpreter lock: it blocked "
                         f"{int(self.vcsw[i])}x, {mean:.2g} ms on average, while other threads "
                         f"of its process computed {self.other[i] / 1e9:.3g} s "
                         f"({self.gil_run[i]:.0%} of the span)")
        return first, after


class Verdict(NamedTuple):
    """One section's classification: class shares, confidence, the evidence in words."""

    shares: dict  # class -> fraction of the section (sums to 1)
    confidence: float
    reason: str
    cls: str = ""  # the dominant class


@dataclasses.dataclass(frozen=True)
class Classified:
    """The classification of many spans (:func:`classify`): ``shares`` (n, 5) in CLASSES
    order, ``confidence``, ``cls`` (indices into CLASSES), and the intermediate figures the
    words are made of (:meth:`reason`)."""

    shares: Any
    confidence: Any
    cls: Any
    facts: Any  # what was classified (Facts, or an AnalysisInput)
    queued: Any  # all of the span was server-reported queueing
    measured: Any  # it has resource accounting
    busy: Any  # on-CPU fraction of the time it was not queued
    paging_ns: Any  # kernel CPU counted as memory work (paging in, a memory stage's; 0: none)
    kernel: Any  # bool: its paging_ns is a memory stage's kernel time (not its faults' part)
    fault_wait: Any  # share of the span counted as waiting for major faults
    waiting: Any  # share of the span it waited off-CPU, before the faults took theirs
    waited: Any  # ... after
    # the class its waiting counts as (indices into CLASSES); without accounting, the class
    # its stage gave the whole span
    wait_cls: Any
    rest: Any  # share of the span not queued at the server (nor its loop held by others)
    basis: Any  # what its class rests on: a position in BASES
    why: Any = None  # _Why: what the span-only rules moved from its waiting to cpu, and why
    # judged from its process tree's counters (process_share.py): the ProcessShare, and
    # which spans
    proc: Any = None
    via: Any = None
    proc_run: Any = None  # share moved to cpu: its process computing for others meanwhile

    def __len__(self) -> int:
        return len(self.cls)

    def verdict(self, i: int) -> Verdict:
        """Span ``i``'s classification, with its words."""
        shares = {c: float(v) for c, v in zip(CLASSES, self.shares[i]) if v}
        return Verdict(shares, float(self.confidence[i]), self.reason(i), CLASSES[self.cls[i]])

    def _process_words(self, rows: Any) -> list:
        """Per row, what its process tree's counters said of its own time (None: judged by
        its own accounting, or not measured)."""
        if self.via is None or not np.any(self.via[rows]):
            return [None] * len(rows)
        p = self.proc
        out = []
        for i in rows.tolist():
            if not self.via[i]:
                out.append(None)
                continue
            words = (f"no accounting of its own: its process tree (pid {int(p.root[i])}) used "
                     f"{p.cpu_ns[i] / 1e9:.3g} s of CPU in its own time "
                     f"({self.busy[i]:.0%} of a core)")
            if p.wait_ns[i] >= WORDS_SHARE * p.own_ns[i]:
                words += (f" and its threads waited {p.wait_ns[i] / 1e9:.3g} s runnable for a "
                          "CPU")
            if p.sharers[i] > PROCESS_ALONE:
                words += (f", shared with the other spans of its tree open meanwhile "
                          f"({p.sharers[i]:.1f} on average, itself included): its part "
                          "estimated from when each ran without the others")
            if p.short[i]:
                words += (f" (its own time {p.own_ns[i] / 1e9:.3g} s spans fewer than "
                          f"{PROCESS_SHORT} samples of its tree: low confidence)")
            if self.proc_run is not None and self.proc_run[i] >= WORDS_SHARE:
                words += (f"; its tree computed for the other spans open meanwhile too "
                          f"({p.tree_cores[i]:.2g} cores in all): its waiting was for its "
                          "process's CPU (Python's interpreter lock, or a core; "
                          f"{self.proc_run[i]:.0%} of the span)")
            out.append(words)
        return out

    def reason(self, i: int) -> str:
        """The evidence of span ``i``, in words."""
        return self.reasons([i])[0]

    def reasons(self, rows: Sequence[int]) -> list:
        """The evidence of the spans ``rows``, in words (their figures gathered in bulk)."""
        rows = np.asarray(rows, dtype=np.int64)
        return self.gathered(rows).reasons(np.arange(len(rows)))

    def gathered(self, rows: Any) -> "Gathered":
        """What the words of the spans ``rows`` are made of, taken out of the classification
        (a small part of it, for a few spans): :meth:`Gathered.reasons` of position ``k``
        are these words of span ``rows[k]``."""
        rows = np.asarray(rows, dtype=np.int64)
        f = self.facts
        figures = tuple(np.asarray(a)[rows] for a in (
            f.queue_s, self.queued, self.measured, f.stage_code, self.wait_cls, f.loop,
            self.busy, self.paging_ns, f.own_faults, f.child_cpu_ns, self.waiting,
            self.fault_wait, self.waited, self.rest, f.model_s, self.kernel))
        endpoint = getattr(f, "endpoint", None)
        if endpoint is not None:
            endpoint = np.asarray(endpoint, dtype=object)[rows]
            if not any(e is not None for e in endpoint.tolist()):
                endpoint = None
        process = self._process_words(rows)
        why = None
        if self.why is not None:
            labels = self.why.blocker_label
            why = self.why._replace(
                blocker=None,  # (rows of other spans: the label below says who)
                blocker_label={k: labels[r] for k, r in enumerate(rows.tolist())
                               if r in labels} if labels else {},
                **{name: np.asarray(getattr(self.why, name))[rows]
                   for name in _Why._fields if name not in ("blocker_label", "blocker")})
            if why.silent():
                why = None
        dur = (np.asarray(f.end_ns, dtype=np.int64)[rows]
               - np.asarray(f.start_ns, dtype=np.int64)[rows])
        # (what is not said of any of these spans is not kept: a settled batch holds them)
        return Gathered(figures, endpoint, process if any(w is not None for w in process)
                        else None, why, dur)


class Gathered(NamedTuple):
    """The figures the words of some spans are made of (:meth:`Classified.gathered`), in
    the order they were gathered: a section's evidence kept without the classification of
    every span of its batch."""

    figures: tuple  # per figure _words reads (in its order), an array over the spans
    endpoint: Any  # object array, or None: none named
    process: Optional[list]  # per span, what its process tree's counters said; None: nothing
    why: Any  # _Why over these spans (without its blocker rows), or None: it says nothing
    dur: Any  # int64: each span's duration, ns

    def reasons(self, rows: Sequence[int]) -> list:
        """The evidence of the gathered spans at positions ``rows``, in words."""
        rows = np.asarray(rows, dtype=np.int64)
        cols = [a[rows].tolist() for a in self.figures]
        cols.append([None] * len(rows) if self.endpoint is None else
                    self.endpoint[rows].tolist())
        cols.append([None] * len(rows) if self.process is None else
                    [self.process[i] for i in rows.tolist()])
        out = [_words(*row) for row in zip(*cols)]
        if self.why is None:
            return out
        measured = self.figures[2]
        for k, (i, d) in enumerate(zip(rows.tolist(), self.dur[rows].tolist())):
            if not measured[i]:
                continue
            first, after = self.why.words(i, d)
            if first or after:
                out[k] = ", ".join(first + [out[k]] + after)
        return out


def _words(queue_s: float, queued: bool, measured: bool, code: int, wait_cls: int, loop: bool,
           busy: float, paging_ns: float, faults: float, child_ns: float, waiting: float,
           fault_wait: float, waited: float, rest: float, model_s: float,
           kernel: bool = False, endpoint: Optional[str] = None,
           process: Optional[str] = None) -> str:
    """One span's evidence in words, from the figures :func:`classify` decided by."""
    notes = []
    if queue_s:
        notes.append(f"server queue {queue_s:.3g} s")
    if queued:
        return ", ".join(notes)
    if not measured:
        if CLASSES[wait_cls] == UNTRACED:
            stage = f" ({_STAGES[code - 1]})" if code else ""
            notes.append(UNTRACED_REASON.replace("the span's own time", "the span's own "
                                                 f"time{stage}"))
            return ", ".join(notes)
        if code == _INFERENCE_CODE and CLASSES[wait_cls] == IO:
            where = f"the model endpoint {endpoint}" if endpoint else "its model endpoint"
            notes.append(f"no resource accounting on this span; waiting on {where} assumed "
                         "from its stage 'inference' (no server timing or counters)")
            return ", ".join(notes)
        notes.append(f"no resource accounting on this span; {CLASSES[wait_cls]} assumed from "
                     f"its stage '{_STAGES[code - 1]}'")
        return ", ".join(notes)
    if process is not None:
        notes.append(process)
    else:
        scope = " (event loop, shared with other tasks)" if loop else ""
        notes.append(f"on-CPU {busy:.0%}{scope}")
    if paging_ns > 0 and kernel:
        notes.append(f"of which {paging_ns / 1e9:.3g} s in the kernel moving its working set "
                     "(memory stage)")
    elif paging_ns > 0:
        notes.append(f"of which {paging_ns / 1e9:.3g} s in the kernel handling {int(faults)} "
                     "major page faults (paging in)")
    if child_ns:
        notes.append(f"child processes {child_ns / 1e9:.3g} s CPU")
    if waiting > 1e-9:
        if fault_wait > 0:
            notes.append(f"{int(faults)} major page faults")
        if waited > 1e-9 and waiting >= SAID * rest:
            notes.append(_wait_words(wait_cls, code, model_s, endpoint, process is not None))
    return ", ".join(notes)


def _wait_words(wait_cls: int, code: int, model_s: float, endpoint: Optional[str] = None,
                by_process: bool = False) -> str:
    """What a span's waiting was, in words: the class :func:`classify` gave it, and for an
    inference which of its rules did."""
    cls = CLASSES[wait_cls]
    if cls == QUEUE:
        return "waiting in a queue stage, off-CPU"
    if cls == MEMORY:
        return "moving its working set (memory stage), off-CPU"
    if cls == GPU:
        return f"server-reported model time {model_s:.3g} s"
    if code == _INFERENCE_CODE:
        if endpoint:
            return (f"off-CPU: waiting on the model endpoint {endpoint} (no server timing, "
                    "GPU or model-server counters)")
        return ("off-CPU: waiting on something outside its thread (no model server named on "
                "the span)")
    if by_process:
        return "its process tree idle otherwise: waiting on something outside it"
    return OFF_CPU_UNEXPLAINED


def process_confidence(proc: Any) -> np.ndarray:
    """Per span, the most its verdict can be trusted where it rests on its process tree's
    counters (``proc``: a ProcessShare): alone in its tree, sharing its time, or short."""
    return np.where(np.asarray(proc.short, dtype=bool), BY_PROCESS_SHORT,
                    np.where(np.asarray(proc.sharers) > PROCESS_ALONE, BY_PROCESS_SHARED,
                             BY_PROCESS))


def classify(f: Any, threads: Any = None, proc: Any = None) -> Classified:
    """Classify every span of ``f`` (a :class:`Facts`, or any object with its fields as
    arrays, such as an AnalysisInput) at once; ``threads``: what the other threads of each
    span's process did meanwhile (:func:`~.threads.thread_facts`; None: nothing known);
    ``proc``: the CPU of their process trees that spans without accounting of their own
    claimed (:func:`~.process_share.process_share`; None: none)."""
    from .threads import ThreadFacts

    n = len(f.start_ns)
    tf = threads if threads is not None else ThreadFacts.none(n)
    code = np.asarray(f.stage_code, dtype=np.int64)
    is_queue, is_memory, is_inference = (code == _QUEUE_CODE, code == _MEMORY_CODE,
                                         code == _INFERENCE_CODE)
    # epoch nanoseconds do not fit a float64 exactly: subtract as integers first
    dur = np.maximum(np.asarray(f.end_ns, dtype=np.int64) - np.asarray(f.start_ns, dtype=np.int64),
                     1).astype(np.float64)
    queue_s = np.asarray(f.queue_s, dtype=np.float64)
    model_s = np.asarray(f.model_s, dtype=np.float64)
    own_cpu = np.asarray(f.own_cpu, dtype=np.float64)
    own_wall = np.asarray(f.own_wall, dtype=np.float64)
    # no accounting of its own, but its tree's CPU over its own time: judged as measured
    via = np.zeros(n, dtype=bool) if proc is None else \
        (own_cpu < 0) & (np.asarray(proc.cpu_ns, dtype=np.float64) >= 0)
    if via.any():
        own_cpu = np.where(via, proc.cpu_ns, own_cpu)
        own_wall = np.where(via, proc.own_ns, own_wall)
    faults = np.asarray(f.own_faults, dtype=np.float64)
    sys_cpu = np.asarray(f.sys_cpu, dtype=np.float64)
    loop = np.asarray(f.loop, dtype=bool)
    zeros = np.zeros(n)
    ivcsw, vcsw, kid_iv, kid_v, other = (
        zeros if getattr(f, k, None) is None else np.asarray(getattr(f, k), dtype=np.float64)
        for k in ("ivcsw", "vcsw", "child_ivcsw", "child_vcsw", "other_cpu"))
    child_cpu = np.asarray(f.child_cpu_ns, dtype=np.float64)
    # an inference waits on a GPU where its server reported model time; otherwise on its
    # model endpoint (io), unless counters say more (counters.adjust)
    inference_gpu = model_s > 0

    # server-reported queueing: the first part of the span was spent waiting
    shares = np.zeros((n, len(CLASSES)))
    q = np.where(queue_s > 0, np.minimum(queue_s * 1e9 / dur, 1.0), 0.0)
    shares[:, _K[QUEUE]] = q
    rest = 1.0 - q
    queued = rest <= 1e-9
    measured = (own_cpu >= 0) & ~queued
    unmeasured = (own_cpu < 0) & ~queued

    # a blocked event loop: the time other tasks' spans held its loop inside its interval is
    # their CPU (the blocker's), not its own, and not its waiting
    blocked_ns = np.where(measured & loop, np.asarray(tf.blocked_ns, dtype=np.float64), 0.0)
    blk = np.minimum(blocked_ns / dur, rest)
    shares[:, _K[CPU]] += blk
    rest = rest - blk
    own_cpu = np.where(blk > 0, np.maximum(own_cpu - np.asarray(tf.blocked_cpu), 0.0), own_cpu)
    own_wall = np.where(blk > 0, np.maximum(own_wall - blocked_ns, 1.0), own_wall)

    # what its waiting counts as: the stage's (an inference's: see above); with no accounting
    # at all, the stage's usual class takes the whole span
    guess = _GUESS_BY_CODE[np.clip(code, 0, len(_GUESS_BY_CODE) - 1)]
    guess = np.where(is_inference & ~inference_gpu, _K[IO], guess)
    wait_cls = np.select([is_queue, is_memory, is_inference & inference_gpu],
                         [_K[QUEUE], _K[MEMORY], _K[GPU]], _K[IO])
    wait_cls = np.where(measured, wait_cls, guess)
    rows = np.flatnonzero(unmeasured)
    np.add.at(shares, (rows, guess[rows]), rest[rows])

    # measured: the on-CPU part (less the kernel's paging), the major faults' part, then the
    # waiting part by stage; on-CPU as a fraction of the time it was not queued (a server's
    # span that waited for a slot computed only after it got one)
    avail = np.where(queue_s > 0, own_wall - queue_s * 1e9, own_wall)
    avail = np.where(avail <= 0, own_wall, avail)
    busy = np.where(avail > 0, np.minimum(np.maximum(own_cpu, 0) / np.where(avail > 0, avail,
                                                                            1.0), 1.0), 0.0)
    cpu_part = np.where(measured, rest * busy, 0.0)
    # kernel CPU that was memory work: handling its major faults (up to FAULT_CPU_NS each);
    # in a memory stage, all of its thread's kernel time (copying its data between tiers,
    # pinning pages for direct I/O, mapping and unmapping: moving its working set)
    # (its thread's kernel time is the span's own only where no span of its own thread ran
    # inside it: the figure is not netted of theirs)
    kernel_memory = measured & ~via & is_memory & (sys_cpu > 0) & \
        (np.asarray(f.own_wall, dtype=np.float64) >= dur)
    paging = np.where(measured & (faults > 0) & (sys_cpu > 0),
                      np.minimum(np.minimum(sys_cpu, faults * FAULT_CPU_NS), own_cpu), 0.0)
    paging = np.where(kernel_memory, np.minimum(sys_cpu, np.maximum(own_cpu, 0.0)), paging)
    paging_part = np.where(paging > 0, cpu_part * paging / np.where(own_cpu > 0, own_cpu, 1.0),
                           0.0)
    paging = np.where(paging_part > 0, paging, 0.0)
    shares[:, _K[CPU]] += np.maximum(cpu_part - paging_part, 0.0)  # no -1e-17 from rounding
    shares[:, _K[MEMORY]] += paging_part
    waiting = np.where(measured, rest - cpu_part, 0.0)
    fault_wait = np.where(faults > 0, np.minimum(faults * MAJOR_FAULT_NS /
                                                 np.maximum(own_wall, 1.0), 1.0) * rest, 0.0)
    # each major fault blocked its thread: where its blocks are known (and the faults are its
    # own, not child processes'), the faults' share of them is the share of its waiting spent
    # paging in (on a disk slower than MAJOR_FAULT_NS a page)
    fault_wait = np.maximum(fault_wait, np.where(
        (faults > 0) & (vcsw > 0) & (child_cpu <= 0),
        waiting * np.minimum(faults / np.maximum(vcsw, 1.0), 1.0), 0.0))
    fault_wait = np.where(waiting > 1e-9, fault_wait, 0.0)
    take = np.minimum(fault_wait, waiting)
    shares[:, _K[MEMORY]] += take
    waited = np.where(waiting > 1e-9, waiting - take, 0.0)

    # what the span's own counts say of its waiting (no counters needed), each rule taking a
    # part of what the rules before it left:
    # 1. its child processes waited runnable for a CPU: that time, where the kernel's schedstat
    #    was recorded; elsewhere, children that computed (a quarter of the span or more) and
    #    were preempted more often than they blocked, in that proportion
    run_delay = np.full(n, -1.0) if getattr(f, "child_run_delay", None) is None else \
        np.asarray(f.child_run_delay, dtype=np.float64)
    timed = measured & (run_delay >= 0) & (child_cpu > 0)
    kids = measured & ~timed & (child_cpu >= CHILDREN_BUSY * dur) & (kid_iv > kid_v)
    kids_run = np.where(kids, waited * kid_iv / np.maximum(kid_iv + kid_v, 1.0),
                        np.where(timed, np.minimum(waited, np.maximum(run_delay, 0) / dur), 0.0))
    # ... and, judged by its tree's counters, the time its tree's threads waited runnable
    # that its part of the tree's demand claimed
    tree_run = np.zeros(n)
    if via.any():
        tree_run = np.where(via, np.minimum(waited - kids_run,
                                            np.asarray(proc.wait_ns, dtype=np.float64) / dur),
                            0.0)
    left = waited - kids_run - tree_run
    # 2. its thread itself computed (not only its children) and was preempted more often than
    #    it blocked: likewise
    thread_busy = np.maximum(own_cpu - child_cpu, 0.0) / np.maximum(avail, 1.0)
    thread = measured & (thread_busy >= THREAD_BUSY) & (ivcsw > vcsw)
    thread_run = np.where(thread, left * ivcsw / np.maximum(ivcsw + vcsw, 1.0), 0.0)
    left = left - thread_run
    # 3. its thread computed (a library call) while threads of its process without spans of
    #    their own (the library's workers) computed half its own time or more: it waited for
    #    them
    unowned = np.asarray(tf.unowned_cpu, dtype=np.float64)
    # (3 and 4 judge waiting no stage named: a queue's or memory stage's waiting stays theirs)
    unnamed = wait_cls == _K[IO]
    workers = measured & unnamed & (busy >= WORKERS_CALLER) & \
        (unowned >= WORKERS_BUSY * own_wall) & \
        (left * dur >= MIN_MOVE_NS)
    workers_run = np.where(workers, left, 0.0)
    left = left - workers_run
    # 4. it blocked often and briefly (no longer than Python's switch interval on average: a
    #    thread waiting for the lock gets it within one) while its process's other threads
    #    computed at least half that time: it was waiting for the interpreter lock (held by
    #    them the rest of the time too: on a busy host the holder often waits for a CPU)
    left_ns = left * dur
    # (a span that took major faults blocked on its page-ins: counters.py weighs those)
    gil = measured & unnamed & (faults <= 0) & (vcsw >= GIL_BLOCKS) & \
        (left_ns <= GIL_BLOCK_NS * np.maximum(vcsw, 1.0)) & (other >= GIL_OTHERS * left_ns) & \
        (left_ns >= MIN_MOVE_NS)
    gil_run = np.where(gil, left, 0.0)
    left = left - gil_run
    # 5. judged by its tree's counters, it computed while its tree computed as much again for
    #    the other spans open in it: its waiting was for its process's CPU (two tasks
    #    computing Python in one process share one interpreter lock), not outside
    proc_run = np.zeros(n)
    if via.any():
        others = np.asarray(proc.tree_cores, dtype=np.float64) - busy
        shared = via & unnamed & (busy >= PROCESS_COMPUTED) & (others >= PROCESS_COMPUTED)
        proc_run = np.where(shared, left, 0.0)
        left = left - proc_run
    shares[:, _K[CPU]] += kids_run + tree_run + thread_run + workers_run + gil_run + proc_run
    rows = np.flatnonzero(left > 1e-9)
    np.add.at(shares, (rows, wait_cls[rows]), left[rows])

    confidence = np.full(n, MEASURED)
    confidence = np.where(loop & measured & (shares[:, _K[CPU]] > 0.5) & (blk <= 0),
                          np.minimum(confidence, ON_A_LOOP), confidence)
    inferred = (kids_run + thread_run + workers_run + gil_run) > 0.5 * waited
    confidence = np.where(measured & inferred & (waited > 0.5), np.minimum(
        confidence, FROM_COUNTS), confidence)
    if via.any():  # judged from its tree's counters: less sure, the less it had to itself
        confidence = np.where(via, np.minimum(confidence, process_confidence(proc)),
                              confidence)
    confidence[unmeasured] = FROM_LABEL
    untraced = unmeasured & (guess == _K[UNTRACED])
    confidence[untraced] = UNTRACED_CONFIDENCE
    confidence[queued] = QUEUED_ONLY
    # measured: accounting (its own, or its process tree's), or the server's own timings
    basis = np.where(measured | queued | (model_s > 0), MEASURED_BASIS,
                     np.where(untraced, UNTRACED_BASIS, LABEL_BASIS))
    why = _Why(blk, blocked_ns, np.asarray(tf.blocker), tf.blocker_label, kids_run, kid_iv,
               kid_v, thread_run, ivcsw, vcsw, workers_run, unowned, gil_run, other, run_delay)
    return Classified(shares, confidence, np.argmax(shares, axis=1), f, queued, measured, busy,
                      paging, kernel_memory & (paging > 0), fault_wait, waiting, left, wait_cls,
                      rest, basis, why, proc, via, proc_run)


def classify_one(span: Optional[SpanFacts]) -> Verdict:
    """The classification of a section owned by ``span`` (None: a gap between root spans)."""
    if span is None:
        return Verdict(dict(GAP_SHARES), GAP_CONFIDENCE, GAP_REASON, GAP_CLASS)
    return classify(Facts.of([span])).verdict(0)
