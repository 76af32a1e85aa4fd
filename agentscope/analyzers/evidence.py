"""Classifying one critical-path section by the evidence of the span that owned it.

A section is time during which one span held the task up with none of its children doing so:
its *self time*. The span's stage is a hint; the verdict comes from what was measured
(ARCHITECTURE §1):

* on-CPU time of its own thread and of the child processes it waited for, net of what its
  children on the same thread used (``cpu``; computed in the store, analysis_input.sql);
* major page faults (``memory``), a ``memory`` stage that waited off-CPU;
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

from typing import NamedTuple, Optional

from ..vocab import Resource

GPU, CPU, MEMORY, IO, QUEUE = (Resource.GPU.value, Resource.CPU.value, Resource.MEMORY.value,
                               Resource.IO.value, Resource.QUEUE.value)
CLASSES = tuple(r.value for r in Resource)  # report order: gpu, cpu, memory, io, queue

BUSY = 0.5  # on-CPU fraction at or above which self time counts as CPU work
MAJOR_FAULT_NS = 100_000  # a major fault costs about this much waiting (disk/swap read)


class SpanFacts(NamedTuple):
    """What the classifier needs of a span: one row of ``store/sql/analysis_input.sql``."""

    span_id: str
    parent_id: Optional[str]
    name: str
    stage: Optional[str]
    kind: str
    start: int
    end: int
    own_cpu: Optional[int]  # thread CPU net of same-thread children + its child processes'
    own_wall: int  # duration minus the time its same-thread children ran
    own_faults: int  # major faults of its thread and child processes, net of its children's
    child_cpu: Optional[int]  # CPU of the child processes it waited for (for the evidence)
    queue_s: Optional[float]  # gen_ai.latency.time_in_queue
    model_s: Optional[float]  # prefill + decode reported by the server
    server_local: Optional[bool]  # server.address is this machine
    loop: bool  # CPU measured on an event loop (shared with other tasks)


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

    if cpu is None:  # no accounting: the label is all we have
        guess = {"queue": QUEUE, "inference": _inference_wait(span)[0], "memory": MEMORY,
                 "context": CPU, "task": CPU, "agent": CPU, "env": IO, "tool": IO}.get(stage, IO)
        shares[guess] = shares.get(guess, 0.0) + rest
        notes.append(f"no resource accounting on this span; {guess} assumed from its stage "
                     f"'{stage}'")
        return Verdict.of(shares, 0.3, _join(notes))

    busy = min(cpu / wall, 1.0) if wall > 0 else 0.0
    cpu_part = rest * busy
    wait_part = rest - cpu_part
    if cpu_part > 0:
        shares[CPU] = shares.get(CPU, 0.0) + cpu_part
    scope = " (event loop, shared with other tasks)" if span.loop else ""
    notes.append(f"on-CPU {busy:.0%}{scope}")
    if span.child_cpu:
        notes.append(f"child processes {span.child_cpu / 1e9:.3g} s CPU")

    if wait_part > 1e-9:
        said = wait_part >= 0.05 * rest  # mention waiting only where it is a visible part
        fault_wait = min(faults * MAJOR_FAULT_NS / max(wall, 1), 1.0) * rest if faults else 0.0
        if fault_wait > 0:
            take = min(fault_wait, wait_part)
            shares[MEMORY] = shares.get(MEMORY, 0.0) + take
            wait_part -= take
            notes.append(f"{faults} major page faults")
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
                cls, why = IO, "off-CPU: waiting on something outside the process"
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
