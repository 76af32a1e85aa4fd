"""The agent's process tree: a root process and every descendant, found through
``/proc/<pid>/task/<tid>/children`` (children appear and vanish: compilers, test runners).

For each member process (``pid`` set on the reading; once a second by default,
``per_process_hz``: the detail behind the tree's totals):

* ``process.cpu.utilization``: CPU time per second, in cores (user + system);
* ``process.memory.rss`` (bytes);
* ``process.context_switches``: times its threads were switched onto a CPU, per second;
* ``process.runqueue_wait``: time its threads spent runnable but waiting for a CPU, per
  second (``/proc/<pid>/task/<tid>/schedstat``): CPU contention seen from the agent.

And for the whole tree (``pid`` = the root), every sample:

* ``agentscope.tree.cpu.utilization``: cores used by the tree, including children that ran
  and were reaped between two samples (their CPU reaches the parent's ``cutime``);
* ``agentscope.tree.runqueue_wait``: average number of the tree's threads that were runnable
  and waiting (0.5 = one thread waited half the interval);
* ``agentscope.tree.memory.rss``, ``agentscope.tree.processes``, ``agentscope.tree.threads``,
  ``agentscope.tree.major_faults`` (per second, with reaped children's).

Cost: the member files stay open and are re-read with ``pread``; the tree is walked again at
most every ``discover_interval_s`` and whenever a member has gone. Run-queue wait of a child
that lived and died between two walks is not seen (its CPU is, through ``cutime``).
"""

from __future__ import annotations

import os
from typing import Optional

from .base import Deltas, ProcFile, Reading, SourceUnavailable

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


class _Member:
    __slots__ = ("pid", "stat", "threads", "start", "last_own", "last_reaped", "last_wait",
                 "mark", "ppid")

    def __init__(self, pid: int, stat: ProcFile, start: bytes) -> None:
        self.pid, self.stat, self.start = pid, stat, start
        self.threads: dict = {}  # tid -> ProcFile of its schedstat
        self.last_own = 0  # its own CPU ticks at the last sample
        self.last_reaped = 0  # CPU ticks of the children it reaped (cutime + cstime), same
        self.ppid = 0
        self.last_wait: "int | None" = None  # its threads' run-queue wait (ns), last sample
        self.mark: "tuple | None" = None  # (ns, own ticks, wait ns, slices) at last emission

    def close(self) -> None:
        self.stat.close()
        for f in self.threads.values():
            f.close()


def _stat_fields(data: bytes) -> list:  # noqa: D103
    # after the last ')' (the command name may hold spaces and parentheses): field 3 onwards
    return data[data.rfind(b")") + 2:].split()


class ProcessTree:
    """Counters of process ``pid`` and all its descendants (see the module docstring)."""

    name = "process.tree"

    def __init__(self, pid: int, root: str = "/proc", discover_interval_s: float = 0.5,
                 per_process_hz: float = 1.0) -> None:
        self.root_pid = int(pid)
        self.root = root
        self.discover_interval_ns = int(discover_interval_s * 1e9)
        self.per_process_ns = int(1e9 / per_process_hz) if per_process_hz > 0 else None
        self.members: dict = {}
        self.deltas = Deltas()
        self._last_discover = 0
        self._last_per_process: Optional[int] = None
        self._last_sample_ns: Optional[int] = None
        self._credit: dict = {}  # parent pid -> CPU ticks of its gone children already counted
        if self._add(self.root_pid) is None:
            raise SourceUnavailable(f"process tree: no process {self.root_pid} "
                                    f"(or {root}/{self.root_pid} is not readable)")
        self._discover(0)

    # ---- membership -------------------------------------------------------------------------
    def _add(self, pid: int) -> Optional[_Member]:
        try:
            stat = ProcFile(f"{self.root}/{pid}/stat", 1024)
            f = _stat_fields(stat.read())
        except OSError:
            return None
        m = _Member(pid, stat, f[19] if len(f) > 19 else b"")
        self.members[pid] = m
        return m

    def _drop(self, pid: int) -> None:
        m = self.members.pop(pid, None)
        if m is not None:
            m.close()
            # what it used is counted already: when its parent reaps it, the parent's cutime
            # grows by all of it, and only the part we had not seen is new
            if m.ppid in self.members:
                self._credit[m.ppid] = self._credit.get(m.ppid, 0) + m.last_own + m.last_reaped
            self._credit.pop(pid, None)

    def _discover(self, now_ns: int) -> None:
        self._last_discover = now_ns
        seen = set()
        queue = [self.root_pid]
        while queue:
            pid = queue.pop()
            if pid in seen:
                continue
            seen.add(pid)
            m = self.members.get(pid) or self._add(pid)
            if m is None:
                continue
            try:
                tids = [int(t) for t in os.listdir(f"{self.root}/{pid}/task")]
            except OSError:
                continue
            for tid in tids:
                if tid not in m.threads:
                    try:
                        m.threads[tid] = ProcFile(f"{self.root}/{pid}/task/{tid}/schedstat", 256)
                    except OSError:
                        continue
                try:
                    with open(f"{self.root}/{pid}/task/{tid}/children", "rb") as f:
                        queue.extend(int(c) for c in f.read().split())
                except OSError:
                    pass
            for tid in [t for t in m.threads if t not in tids]:
                m.threads.pop(tid).close()
        for pid in [p for p in self.members if p not in seen]:
            self._drop(pid)

    # ---- sampling ---------------------------------------------------------------------------
    def sample(self, now_ns: int) -> list:
        if now_ns - self._last_discover >= self.discover_interval_ns:
            self._discover(now_ns)
        per_process = self.per_process_ns is not None and (
            self._last_per_process is None
            or now_ns - self._last_per_process >= self.per_process_ns)
        if per_process:
            self._last_per_process = now_ns
        out = []
        # tree CPU over the interval: what members used since the last sample (all of it for
        # new members), plus what their reaped children used that we had not seen (a member
        # that exits moves its CPU into its parent's cutime: see _drop)
        used_ticks = 0
        rss = threads = faults = 0
        waited_ns = 0
        vanished = False
        alive = []
        for pid, m in list(self.members.items()):
            try:
                data = m.stat.read()
                f = data[data.rfind(b")") + 2:].split()
            except OSError:
                f = ()
            if len(f) < 22 or f[19] != m.start:  # gone (or its pid reused)
                vanished = True
                continue
            alive.append((pid, m, f))
        if vanished:  # dropped first: their parents' cutime may already include them
            for pid in set(self.members) - {pid for pid, _, _ in alive}:
                self._drop(pid)
        for pid, m, f in alive:
            own = int(f[11]) + int(f[12])
            reaped = int(f[13]) + int(f[14])
            m.ppid = int(f[1])
            used_ticks += max(own - m.last_own, 0)
            grown = max(reaped - m.last_reaped, 0)
            if grown and pid in self._credit:
                take = min(grown, self._credit[pid])
                self._credit[pid] -= take
                grown -= take
            used_ticks += grown
            m.last_own, m.last_reaped = own, reaped
            faults += int(f[9]) + int(f[10])
            p_rss = int(f[21]) * _PAGE
            rss += p_rss
            wait_ns = slices = 0
            for tid, sf in list(m.threads.items()):
                try:
                    st = sf.read().split()
                    wait_ns += int(st[1])
                    slices += int(st[2])
                except (OSError, IndexError, ValueError):
                    m.threads.pop(tid).close()
            threads += len(m.threads)
            if m.last_wait is not None and wait_ns >= m.last_wait:
                waited_ns += wait_ns - m.last_wait
            m.last_wait = wait_ns
            if per_process:
                out.append(Reading("process.memory.rss", p_rss, None, pid))
                mark = m.mark
                m.mark = (now_ns, own, wait_ns, slices)
                if mark is not None and now_ns > mark[0]:
                    dt = (now_ns - mark[0]) / 1e9
                    out.append(Reading("process.cpu.utilization",
                                       max(own - mark[1], 0) / _TICK / dt, None, pid))
                    out.append(Reading("process.runqueue_wait",
                                       max(wait_ns - mark[2], 0) / 1e9 / dt, None, pid))
                    out.append(Reading("process.context_switches",
                                       max(slices - mark[3], 0) / dt, None, pid))
        root = self.root_pid
        last = self._last_sample_ns
        if last is not None and now_ns > last:
            dt = (now_ns - last) / 1e9
            out.append(Reading("agentscope.tree.cpu.utilization", used_ticks / _TICK / dt, None,
                               root))
            out.append(Reading("agentscope.tree.runqueue_wait", waited_ns / 1e9 / dt, None,
                               root))
        self._last_sample_ns = now_ns
        out.append(Reading("agentscope.tree.memory.rss", rss, None, root))
        out.append(Reading("agentscope.tree.processes", len(self.members), None, root))
        out.append(Reading("agentscope.tree.threads", threads, None, root))
        rate = self.deltas.rate("faults", faults, now_ns)
        if rate is not None:
            out.append(Reading("agentscope.tree.major_faults", rate, None, root))
        if vanished:
            self._discover(now_ns)
        return out
