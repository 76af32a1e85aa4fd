"""Classifying one critical-path section by the evidence of the span that owned it.

A section is time during which one span held the task up with none of its children doing so:
its *self time*. The span's stage is a hint; the verdict comes from what was measured
(ARCHITECTURE §1):

* on-CPU time of its own thread and of the child processes it waited for, net of what its
  children on the same thread used (``cpu``; computed in the store, analysis_input.sql);
* major page faults (``memory``): the waiting they cost, and the kernel CPU time spent
  handling them (its thread's system time, up to ``FAULT_CPU_NS`` per fault), which is memory
  work rather than the program's computing; a ``memory`` stage that waited off-CPU;
* queue time reported by the server on the span (``gen_ai.latency.time_in_queue``, as vLLM
  writes it), a ``queue`` stage that waited off-CPU (``queue``);
* server-reported prefill/decode time on an inference span (``gpu``);
* otherwise time off-CPU is waiting on something outside (``io``); for an inference span whose
  server is this machine and which reported no timing, accelerator work is assumed (``gpu``,
  low confidence) until device counters say otherwise.

Spans without resource accounting (other instrumentation, other tools' traces) are classified
from their stage alone, with low confidence, and the evidence says so.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Optional

from ..vocab import Resource

GPU, CPU, MEMORY, IO, QUEUE = (Resource.GPU.value, Resource.CPU.value, Resource.MEMORY.value,
                               Resource.IO.value, Resource.QUEUE.value)
CLASSES = tuple(r.value for r in Resource)  # report order: gpu, cpu, memory, io, queue

BUSY = 0.5  # on-CPU fraction at or above which self time counts as CPU work
# what the span alone says of waiting it cannot explain (counters may explain it: counters.py)
OFF_CPU_UNEXPLAINED = "off-CPU: waiting on something outside the process"
MAJOR_FAULT_NS = 100_000  # a major fault costs about this much waiting (disk/swap read)
# ... and at most about this much kernel CPU to handle (measured: 29 us of system time per
# fault paging in a mapped file, on a VM with a virtio disk)
FAULT_CPU_NS = 50_000


class SpanFacts(NamedTuple):
    """What the classifier needs of a span: one row of ``store/sql/analysis_input.sql``."""

    span_id: str
    parent_id: Optional[str]
    name: str
    stage: Optional[str]
    kind: str
    start: int
    end: int
    own_cpu: float  # thread CPU net of same-thread children + its child processes'; < 0: not measured
    own_wall: float  # duration minus the time its same-thread children ran
    own_faults: float  # major faults of its thread and child processes, net of its children's
    child_cpu: int  # CPU of the child processes it waited for (for the evidence)
    queue_s: float  # gen_ai.latency.time_in_queue (0: none reported)
    model_s: float  # prefill + decode reported by the server (0: none reported)
    server_local: bool  # server.address is this machine
    loop: bool  # CPU measured on an event loop (shared with other tasks)
    sys_cpu: float = 0.0  # kernel CPU of its thread, recorded where it took major faults


class Verdict(NamedTuple):
    shares: dict  # class -> fraction of the section (sums to 1)
    confidence: float
    reason: str  # evidence, in words
    cls: str = ""  # the dominant class

    @classmethod
    def of(cls, shares: dict, confidence: float, reason: str) -> "Verdict":
        return cls(shares, confidence, reason, dominant(shares))


def classify(span: Optional[SpanFacts]) -> Verdict:
    """The class shares of a section owned by ``span`` (None: a gap between root spans)."""
    if span is None:
        return Verdict.of({IO: 1.0}, 0.3, "untraced gap between the trace's root spans")
    stage = span.stage or "unknown"
    cpu, wall, faults = span.own_cpu, span.own_wall, span.own_faults
    shares: dict = {}
    notes = []
    rest = 1.0
    confidence = 0.8

    dur = max(span.end - span.start, 1)
    if span.queue_s:  # server-reported queueing: the first part of the span was spent waiting
        q = min(span.queue_s * 1e9 / dur, 1.0)
        shares[QUEUE] = q
        rest -= q
        notes.append(f"server queue {span.queue_s:.3g} s")
    if rest <= 1e-9:
        return Verdict.of(shares, 0.9, _join(notes))

    if cpu is None or cpu < 0:  # no accounting: the label is all we have
        guess = {"queue": QUEUE, "inference": _inference_wait(span)[0], "memory": MEMORY,
                 "context": CPU, "task": CPU, "agent": CPU, "env": IO, "tool": IO}.get(stage, IO)
        shares[guess] = shares.get(guess, 0.0) + rest
        notes.append(f"no resource accounting on this span; {guess} assumed from its stage "
                     f"'{stage}'")
        return Verdict.of(shares, 0.3, _join(notes))

    # the on-CPU fraction of the time it was not queued (a server's span that waited for a
    # slot computed only after it got one)
    avail = wall - span.queue_s * 1e9 if span.queue_s else wall
    if avail <= 0:
        avail = wall
    busy = min(cpu / avail, 1.0) if avail > 0 else 0.0
    cpu_part = rest * busy
    wait_part = rest - cpu_part
    paging = min(span.sys_cpu, faults * FAULT_CPU_NS, cpu) if faults and span.sys_cpu else 0.0
    paging_part = cpu_part * paging / cpu if paging > 0 else 0.0
    if cpu_part - paging_part > 0:
        shares[CPU] = shares.get(CPU, 0.0) + cpu_part - paging_part
    if paging_part > 0:
        shares[MEMORY] = shares.get(MEMORY, 0.0) + paging_part
    scope = " (event loop, shared with other tasks)" if span.loop else ""
    notes.append(f"on-CPU {busy:.0%}{scope}")
    if paging_part > 0:
        notes.append(f"of which {paging / 1e9:.3g} s in the kernel handling {int(faults)} major "
                     "page faults (paging in)")
    if span.child_cpu:
        notes.append(f"child processes {span.child_cpu / 1e9:.3g} s CPU")

    if wait_part > 1e-9:
        said = wait_part >= 0.05 * rest  # mention waiting only where it is a visible part
        fault_wait = min(faults * MAJOR_FAULT_NS / max(wall, 1), 1.0) * rest if faults else 0.0
        if fault_wait > 0:
            take = min(fault_wait, wait_part)
            shares[MEMORY] = shares.get(MEMORY, 0.0) + take
            wait_part -= take
            notes.append(f"{int(faults)} major page faults")
        if wait_part > 1e-9:
            if stage == "queue":
                cls, why = QUEUE, "waiting in a queue stage, off-CPU"
            elif stage == "memory":
                cls, why = MEMORY, "moving its working set (memory stage), off-CPU"
            elif stage == "inference":
                cls, why = _inference_wait(span)
                if cls == GPU and span.model_s:
                    confidence = 0.8
                elif cls == GPU:
                    confidence = 0.4
            else:
                cls, why = IO, OFF_CPU_UNEXPLAINED
            shares[cls] = shares.get(cls, 0.0) + wait_part
            if said:
                notes.append(why)
    if span.loop and shares.get(CPU, 0) > 0.5:
        confidence = min(confidence, 0.6)
    return Verdict.of(shares, confidence, _join(notes))


def _inference_wait(span: SpanFacts) -> tuple:
    if span.model_s:
        return GPU, f"server-reported model time {span.model_s:.3g} s"
    if span.server_local:
        return GPU, "waiting on a local model server (no device counters: accelerator assumed)"
    return IO, "waiting on a model endpoint (remote API or untraced server)"


def _join(notes: list) -> str:
    return ", ".join(notes)


def dominant(shares: dict) -> str:
    """The class with the largest share (ties: in CLASSES order)."""
    best, value = IO, -1.0
    for c in CLASSES:
        v = shares.get(c)
        if v is not None and v > value:
            best, value = c, v
    return best


def classify_columns(stage: Any, start: Any, end: Any, own_cpu: Any, own_wall: Any,
                     own_faults: Any, queue_s: Any, model_s: Any, server_local: Any,
                     loop: Any, sys_cpu: Any = None) -> tuple:
    """:func:`classify` for every span at once (numpy arrays in, arrays out), without the
    words: ``(shares, confidence, cls)``, ``shares`` an (n, 5) array in CLASSES order, ``cls``
    indices into CLASSES. Gives the same numbers as :func:`classify` (tested)."""
    import numpy as np

    n = len(start)
    k = {c: i for i, c in enumerate(CLASSES)}
    wanted = ("queue", "inference", "memory", "context", "task", "agent")
    stage = np.asarray(stage)
    if stage.dtype.kind in "iu":  # stage codes: positions in Stage order, 0 for none (fast)
        from ..vocab import Stage

        order = [s.value for s in Stage]
        is_stage = {s: stage == order.index(s) + 1 for s in wanted}
    else:
        stage = stage.astype(object)
        is_stage = {s: (stage == s) for s in wanted}
    # epoch nanoseconds do not fit a float64 exactly: subtract as integers first
    dur = np.maximum(np.asarray(end, dtype=np.int64) - np.asarray(start, dtype=np.int64),
                     1).astype(np.float64)
    queue_s = np.asarray(queue_s, dtype=np.float64)
    model_s = np.asarray(model_s, dtype=np.float64)
    own_cpu = np.asarray(own_cpu, dtype=np.float64)
    own_wall = np.asarray(own_wall, dtype=np.float64)
    faults = np.asarray(own_faults, dtype=np.float64)
    loop = np.asarray(loop, dtype=bool)
    inference_gpu = (model_s > 0) | np.asarray(server_local, dtype=bool)

    shares = np.zeros((n, len(CLASSES)))
    q = np.where(queue_s > 0, np.minimum(queue_s * 1e9 / dur, 1.0), 0.0)
    shares[:, k[QUEUE]] = q
    rest = 1.0 - q
    all_queue = rest <= 1e-9
    measured = (own_cpu >= 0) & ~all_queue
    unmeasured = (own_cpu < 0) & ~all_queue

    # no accounting: the stage's usual class takes the rest
    guess = np.select([is_stage["queue"], is_stage["inference"] & inference_gpu,
                       is_stage["inference"], is_stage["memory"],
                       is_stage["context"] | is_stage["task"] | is_stage["agent"]],
                      [k[QUEUE], k[GPU], k[IO], k[MEMORY], k[CPU]], k[IO])
    rows = np.flatnonzero(unmeasured)
    np.add.at(shares, (rows, guess[rows]), rest[rows])

    # measured: on-CPU part, major-fault part, then the waiting part by stage
    avail = np.where(queue_s > 0, own_wall - queue_s * 1e9, own_wall)
    avail = np.where(avail <= 0, own_wall, avail)
    safe = np.where(avail > 0, avail, 1.0)
    busy = np.where(avail > 0, np.minimum(np.maximum(own_cpu, 0) / safe, 1.0), 0.0)
    cpu_part = np.where(measured, rest * busy, 0.0)
    if sys_cpu is None:
        paging_part = np.zeros(n)
    else:
        sys_cpu = np.asarray(sys_cpu, dtype=np.float64)
        paging = np.where((faults > 0) & (sys_cpu > 0),
                          np.minimum(np.minimum(sys_cpu, faults * FAULT_CPU_NS), own_cpu), 0.0)
        paging_part = np.where(paging > 0, cpu_part * paging / np.where(own_cpu > 0, own_cpu,
                                                                        1.0), 0.0)
    shares[:, k[CPU]] += cpu_part - paging_part
    shares[:, k[MEMORY]] += paging_part
    wait = np.where(measured, rest - cpu_part, 0.0)
    waiting = wait > 1e-9
    fault_wait = np.where(faults > 0, np.minimum(faults * MAJOR_FAULT_NS /
                                                 np.maximum(own_wall, 1.0), 1.0) * rest, 0.0)
    take = np.where(waiting, np.minimum(fault_wait, wait), 0.0)
    shares[:, k[MEMORY]] += take
    wait = np.where(waiting, wait - take, 0.0)
    wait_cls = np.select([is_stage["queue"], is_stage["memory"],
                          is_stage["inference"] & inference_gpu],
                         [k[QUEUE], k[MEMORY], k[GPU]], k[IO])
    rows = np.flatnonzero(wait > 1e-9)
    np.add.at(shares, (rows, wait_cls[rows]), wait[rows])

    confidence = np.full(n, 0.8)
    gpu_wait = is_stage["inference"] & inference_gpu & (wait > 1e-9) & measured
    confidence[gpu_wait & ~(model_s > 0)] = 0.4
    confidence = np.where(loop & measured & (shares[:, k[CPU]] > 0.5),
                          np.minimum(confidence, 0.6), confidence)
    confidence[unmeasured] = 0.3
    confidence[all_queue] = 0.9
    return shares, confidence, np.argmax(shares, axis=1)
