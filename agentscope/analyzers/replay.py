"""Replaying recorded tasks on other capacity: a host with N cores, a server with N slots.

A discrete-event simulation of the whole fleet over the recorded arrival times. Every task
runs its spans with the dependencies of :mod:`.timing` (a span starts after what it waited
for); each span's own time becomes *pieces* (one per gap of :class:`.timing.Deps`), and each
piece is what the recording measured of that span's own time, in proportion:

* **on-CPU work** (its thread's and its waited-for child processes' CPU, net of its
  children's): it runs on its host's cores, shared equally by the work running at that moment
  (processor sharing; a span whose child processes used several cores at once may use that
  many). Time a span was runnable but waited for a core (the classifier's ``cpu`` share above
  its on-CPU share: the run-queue evidence) is left out: the simulation makes its own waits.
* **a wait for a server's slot**: a request to a server in ``slots`` (the top span of that
  service in its trace, e.g. the model server's ``llm_request``) first queues for one of the
  server's slots, first come first served, and holds it until it ends; the queueing the
  server reported (``gen_ai.latency.time_in_queue``) is left out: the simulation makes its own.
* **everything else** (I/O, memory, the GPU, the time a span without accounting was not
  judged computing) takes as long as it took.

Spans without resource accounting count their ``cpu`` share as on-CPU work. The replay at the
recorded capacity is not the recording (the model leaves things out); :func:`replay` returns
both runs, and the prediction is the recording plus their difference.
"""

from __future__ import annotations

import collections
import heapq
import math
from typing import Any, Optional

import numpy as np

from .evidence import CLASSES
from .timing import ARRIVAL, FOLLOW, JOIN, PARENT, SIBLING

_CPU = CLASSES.index("cpu")


class Capacity:
    """What the recording ran on: cores per host (from the host sampler's
    ``system.cpu.logical.count``; None: not recorded)."""

    def __init__(self, cores: Optional[dict] = None) -> None:
        self.cores = dict(cores or {})

    def cores_of(self, host: Any) -> Optional[int]:
        if host in self.cores:
            return self.cores[host]
        if len(self.cores) == 1:  # spans that named no host ran on the one sampled host
            return next(iter(self.cores.values()))
        return None


def server_of(spans: Any) -> np.ndarray:
    """Per span, the server whose queue it names (``agentscope.queue.resource``), else its
    service: which server a span that queued waited at (one rule for the replay, the
    proposals and the head-of-line measure)."""
    request = np.asarray(spans.request, dtype=object)
    return np.where(np.equal(request, None), np.asarray(spans.service, dtype=object), request)


def requests_to(spans: Any, server: str) -> np.ndarray:
    """Which spans are requests to ``server``: a span of that service (or that names it in
    ``agentscope.queue.resource``) with no such span above it (the request's top span; a
    call back into the same server from inside a request is part of that request)."""
    service = np.asarray(spans.service, dtype=object)
    mine = np.equal(service, server) | np.equal(np.asarray(spans.request, dtype=object), server)
    parent = np.asarray(spans.parent, dtype=np.int64)
    above = np.zeros(len(mine), dtype=bool)  # some ancestor is one of the server's spans
    up = parent.copy()
    for _ in range(min(len(mine), 10_000)):  # a step per level of nesting
        live = up >= 0
        if not live.any():
            break
        above |= np.where(live, mine[np.maximum(up, 0)], False)
        up = np.where(live, parent[np.maximum(up, 0)], -1)
    return mine & ~above


# a request's span ends a little after it gave its slot back (the reply is written after):
# service overlapping the next one's by less than this is a hand-over, not two slots
HANDOVER_NS = 10_000_000


def recorded_slots(spans: Any, rows: np.ndarray) -> int:
    """The most requests in service at once in the recording (service: after the queueing
    the server reported, to the end of the request's span less :data:`HANDOVER_NS`): the
    slots the server had, as far as the trace shows."""
    if not len(rows):
        return 0
    a = np.asarray(spans.start, dtype=np.int64)[rows] + np.rint(
        np.asarray(spans.queue_ns, dtype=np.float64)[rows]).astype(np.int64)
    b = np.maximum(np.asarray(spans.end, dtype=np.int64)[rows] - HANDOVER_NS, a)
    ev = sorted([(int(x), 1) for x in a] + [(int(y), -1) for y in b])
    best = cur = 0
    for _, d in ev:
        cur += d
        best = max(best, cur)
    return max(best, 1)


def replay(spans: Any, scale: Any, cpus: Optional[int], slots: dict,
           capacity: Optional[Capacity]) -> tuple:
    """((start, end) at the recorded capacity with nothing sped up, (start, end) with
    ``scale`` on ``cpus`` cores per host and ``slots`` {server: N}, notes): per row of
    ``spans.deps`` (int64 ns)."""
    capacity = capacity or Capacity()
    notes = []
    hosts = np.asarray(spans.host, dtype=object)
    host_keys = sorted({h for h in hosts.tolist()}, key=lambda h: (h is None, str(h)))
    base_cores = {h: capacity.cores_of(h) for h in host_keys}
    if cpus is not None:
        unknown = [h for h, c in base_cores.items() if c is None]
        if unknown:
            notes.append("the recording's cores were not sampled (no host counters): the "
                         "replay at the recorded capacity assumes a core for every runnable "
                         "piece of work")
        recorded = sorted({c for c in base_cores.values() if c is not None})
        notes.append(f"every host replayed with {cpus} core{'s' if cpus != 1 else ''} "
                     f"(recorded: {', '.join(map(str, recorded)) or 'unknown'}); CPU work is "
                     "shared equally among what runs at once; other processes' CPU, the "
                     "interpreter lock and caches are not modelled")
    servers = {}
    for name, n_slots in slots.items():
        rows = np.flatnonzero(requests_to(spans, name))
        if not len(rows):
            raise ValueError(f"--slots {name}={n_slots}: no requests to {name!r} in the "
                             "trace (a server is named by the service of its spans, or by "
                             "agentscope.queue.resource)")
        rec = recorded_slots(spans, rows)
        servers[name] = (rows, rec, int(n_slots))
        notes.append(f"{name}: {len(rows)} requests; {rec} slot{'s' if rec != 1 else ''} in "
                     f"the recording (the most served at once), replayed with {n_slots}; "
                     "first come, first served")
    # the cores are modelled when they change, and when only slots do but the recording's
    # cores are known: more requests served at once share the same cores
    known = all(c is not None for c in base_cores.values())
    model_cpu = cpus is not None or (bool(servers) and known)
    if cpus is None and model_cpu:
        notes.append("the recorded cores (" + ", ".join(sorted(
            {str(c) for c in base_cores.values()})) + ") are shared by what runs at once, "
            "the servers' computing too")
    base = _Sim(spans, np.ones(len(spans)), base_cores if model_cpu else None,
                {k: (r, rec) for k, (r, rec, _) in servers.items()}).run()
    new_cores = {h: cpus for h in host_keys} if cpus is not None else \
        (base_cores if model_cpu else None)
    new = _Sim(spans, scale, new_cores,
               {k: (r, want) for k, (r, _, want) in servers.items()}).run()
    return base, new, notes


class _Sim:
    """One run of the simulation (module docstring)."""

    def __init__(self, spans: Any, scale: Any, cores: Optional[dict], servers: dict) -> None:
        deps = spans.deps
        self.deps = deps
        n = deps.n
        total = len(deps.parent)
        self.cpu_model = cores is not None
        self.cores = cores or {}
        sc = np.ones(total)
        sc[:n] = np.asarray(scale, dtype=np.float64)
        self.scale = sc.tolist()
        own = deps.own_ns()
        # per row: on-CPU work per own ns, how many cores at once, the share left out
        busy = np.zeros(total)
        width = np.ones(total)
        left_out = np.zeros(total)
        if n:
            cpu = np.asarray(spans.cpu_ns, dtype=np.float64)
            shares = np.asarray(spans.shares, dtype=np.float64)
            measured = cpu >= 0
            rate = np.divide(np.maximum(cpu, 0), own[:n], out=np.zeros(n), where=own[:n] > 0)
            busy[:n] = np.where(measured, rate, shares[:, _CPU])
            width[:n] = np.maximum(1.0, np.ceil(busy[:n] - 0.05))
            if self.cpu_model:
                left_out[:n] = np.where(measured, np.maximum(
                    shares[:, _CPU] - np.minimum(rate, 1.0), 0.0), 0.0)
        self.busy, self.width, self.left_out = busy.tolist(), width.tolist(), left_out.tolist()
        hosts = list(np.asarray(spans.host, dtype=object).tolist()) + [None] * (total - n)
        self.host = hosts
        # the servers: which rows are requests to which, their slots, the queueing left out
        self.server_of: dict = {}
        self.free: dict = {}
        self.waiting: dict = {}
        queue = np.asarray(spans.queue_ns, dtype=np.float64).tolist() if n else []
        self.queue_cut = [0.0] * total
        for name, (rows, n_slots) in servers.items():
            self.free[name] = n_slots
            self.waiting[name] = []
            for r in rows.tolist():
                self.server_of[r] = name
                self.queue_cut[r] = queue[r]
        # times relative to the first arrival (exact in float64, unlike ns since the epoch)
        self.origin = deps.origin
        self.new_s = [float(x - deps.origin) for x in deps.start]
        self.new_e = [float(x - deps.origin) for x in deps.end]
        self.now = 0.0
        self.timers: list = []
        self.seq = 0
        self.active: dict = {}  # piece id -> [remaining work ns, width, host, then]
        self.ended = [False] * total
        self.join_at: dict = {}  # parent -> how many of done[parent] (in order) have ended
        self.join_wait: dict = {}  # parent -> heap of (m, op)
        self.on_start: dict = {}  # row -> [(op, anchor kind)] fired when it starts
        self.on_run: dict = {}  # row -> [op] fired when it runs (after its slot)
        self.on_end: dict = {}  # row -> [op]
        self.ready: collections.deque = collections.deque()  # ops to fire now, in order

    # ---- the dependencies ---------------------------------------------------------------------
    def run(self) -> tuple:
        d = self.deps
        self._reached = {op if op >= 0 else ~op for op in d.ops}
        for op in d.ops:
            i = op if op >= 0 else ~op
            kind, ref = (d.s_kind[i], d.s_ref[i]) if op >= 0 else (d.e_kind[i], d.e_ref[i])
            if kind == ARRIVAL:
                self._timer(float(d.s_gap[i]), self._fire, op)
            elif kind == FOLLOW:
                self.on_end.setdefault(ref, []).append(op)
            elif kind == PARENT:
                self.on_run.setdefault(ref, []).append(op)
            elif kind == SIBLING:
                self.on_start.setdefault(ref, []).append(op)
            elif kind == JOIN:
                owner = d.parent[i] if op >= 0 else i
                heapq.heappush(self.join_wait.setdefault(owner, []), (ref, self.seq, op))
                self.seq += 1
        self._loop()
        stuck = [i for i in self.server_of if not self.ended[i] and self.reached(i)]
        if stuck:
            raise ValueError(f"the replay could not finish: request span {stuck[0]} waited "
                             f"for a slot at {self.server_of[stuck[0]]} that never freed")
        return (np.rint(self.new_s).astype(np.int64) + self.origin,
                np.rint(self.new_e).astype(np.int64) + self.origin)

    def reached(self, i: int) -> bool:
        """Whether row ``i`` belongs to a task (rows no task reaches are left alone)."""
        return i in self._reached

    def _gap(self, op: int) -> tuple:
        """(own time ns, whose) before ``op`` fires, with the queueing a request's server
        reported left out of the gaps that count from the request's start."""
        d = self.deps
        if op >= 0:
            owner = d.parent[op]
            gap, kind = float(d.s_gap[op]), d.s_kind[op]
        else:
            owner = ~op
            gap, kind = float(d.e_gap[owner]), d.e_kind[owner]
        if kind in (FOLLOW, SIBLING):  # time another span covered: nobody's own
            return gap, -1
        if kind == PARENT and owner >= 0:
            gap = max(gap - self.queue_cut[owner], 0.0)
        return gap, owner

    def _after(self, op: int) -> None:
        """Its anchor happened: spend the owner's own time, then fire it."""
        gap, owner = self._gap(op)
        if owner < 0:
            if gap <= 0:
                self.ready.append(op)
            else:
                self._timer(self.now + gap, self._fire, op)
            return
        own = gap * self.scale[owner]
        if own <= 0:
            self.ready.append(op)  # now, but from the loop (chains of these are deep)
            return
        busy = self.busy[owner]
        if not self.cpu_model:
            self._timer(self.now + own, self._fire, op)
            return
        width = self.width[owner]
        work = own * busy
        rest = max(own * (1.0 - self.left_out[owner]) - work / width, 0.0)
        if work <= 0:
            self._timer(self.now + rest, self._fire, op)
            return
        self.seq += 1
        self.active[self.seq] = [work, width, self.host[owner], rest, op]

    def _fire(self, op: int) -> None:
        if op >= 0:
            self._start(op)
        else:
            self._end(~op)

    def _start(self, i: int) -> None:
        self.new_s[i] = self.now
        for op in self.on_start.pop(i, ()):
            self._after(op)
        server = self.server_of.get(i)
        if server is None:
            self._run(i)
        elif self.free[server] > 0:
            self.free[server] -= 1
            self._run(i)
        else:
            self.waiting[server].append(i)

    def _run(self, i: int) -> None:
        for op in self.on_run.pop(i, ()):
            self._after(op)

    def _end(self, i: int) -> None:
        self.new_e[i] = self.now
        self.ended[i] = True
        server = self.server_of.get(i)
        if server is not None:
            if self.waiting[server]:
                self._run(self.waiting[server].pop(0))
            else:
                self.free[server] += 1
        for op in self.on_end.pop(i, ()):
            self._after(op)
        p = self.deps.parent[i]
        if p >= 0:
            self._joined(p)

    def _joined(self, p: int) -> None:
        seq = self.deps.done.get(p, ())
        k = self.join_at.get(p, 0)
        while k < len(seq) and self.ended[seq[k]]:
            k += 1
        self.join_at[p] = k
        waits = self.join_wait.get(p)
        while waits and waits[0][0] <= k:
            _, _, op = heapq.heappop(waits)
            self._after(op)

    # ---- time ---------------------------------------------------------------------------------
    def _timer(self, at: float, fn: Any, arg: Any) -> None:
        self.seq += 1
        heapq.heappush(self.timers, (at, self.seq, fn, arg))

    def _rates(self) -> dict:
        """Cores per unit of time for each running piece of CPU work: each host's cores
        shared in proportion to the widths of what runs on it."""
        by_host: dict = {}
        for pid, (work, width, host, _, _) in self.active.items():
            by_host.setdefault(host, []).append((pid, width))
        rates = {}
        for host, items in by_host.items():
            cores = self.cores.get(host)
            want = sum(w for _, w in items)
            factor = 1.0 if cores is None or want <= cores else cores / want
            for pid, w in items:
                rates[pid] = w * factor
        return rates

    def _loop(self) -> None:
        # an equal-time tie is settled in the order things were scheduled
        while self.ready or self.timers or self.active:
            while self.ready:
                self._fire(self.ready.popleft())
            if not (self.timers or self.active):
                break
            rates = self._rates() if self.active else {}
            next_cpu = math.inf
            for pid, r in rates.items():
                if r > 0:
                    next_cpu = min(next_cpu, self.active[pid][0] / r)
            next_timer = self.timers[0][0] if self.timers else math.inf
            step = min(next_cpu, max(next_timer - self.now, 0.0))
            if step == math.inf:
                break
            if rates and step > 0:
                for pid, r in rates.items():
                    self.active[pid][0] -= r * step
            self.now += step
            finished = [pid for pid, a in self.active.items() if a[0] <= 1e-6]
            for pid in finished:
                _, _, _, rest, op = self.active.pop(pid)
                self._timer(self.now + rest, self._fire, op)
            while self.timers and self.timers[0][0] <= self.now:
                at, _, fn, arg = heapq.heappop(self.timers)
                self.now = max(self.now, at)
                fn(arg)
