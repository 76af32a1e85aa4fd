"""The agent's process tree: a root process and every descendant, found through
``/proc/<pid>/task/<tid>/children`` (children appear and vanish: compilers, test runners).

For each member process (``pid`` set on the reading; once a second by default,
``per_process_hz``: the detail behind the tree's totals):

* ``process.cpu.utilization``: CPU time per second, in cores (user + system);
* ``process.memory.rss`` (bytes);
* ``process.context_switches``: times its threads were switched onto a CPU, per second;
* ``process.runqueue_wait``: time its threads spent runnable but waiting for a CPU, per
  second (``/proc/<pid>/task/<tid>/schedstat``): CPU contention seen from the agent.

And for the whole tree (``pid`` = the root), every round:

* ``agentscope.tree.cpu.utilization``: cores used by the tree, including children that ran
  and were reaped between two samples (their CPU reaches the parent's ``cutime``);
* ``agentscope.tree.runqueue_wait``: average number of the tree's threads that were runnable
  and waiting (0.5 = one thread waited half the interval);
* once a second, ``agentscope.tree.memory.rss``, ``agentscope.tree.processes``,
  ``agentscope.tree.threads``, ``agentscope.tree.major_faults`` (per second, with reaped
  children's).

Every round reads one file per thread: ``schedstat`` (its on-CPU and run-queue time in ns,
exact at any rate), and stats each process's ``task`` directory (its link count says whether
threads came or went: a new thread is read from the round it appeared in); each process's
``stat`` (RSS, faults, the CPU of the children it reaped,
pid reuse) once a second. The files stay open and are re-read with ``pread``; the tree is
walked again at most every ``discover_interval_s`` and whenever a member has gone. A child
that lived and died between two walks: its CPU is seen (through its parent's ``cutime``), its
run-queue wait is not.
"""

from __future__ import annotations

import os
from typing import Optional

from ..metric_names import (
    AGENTSCOPE_TREE_CPU_UTILIZATION,
    AGENTSCOPE_TREE_MAJOR_FAULTS,
    AGENTSCOPE_TREE_MEMORY_RSS,
    AGENTSCOPE_TREE_PROCESSES,
    AGENTSCOPE_TREE_RUNQUEUE_WAIT,
    AGENTSCOPE_TREE_THREADS,
    PROCESS_CONTEXT_SWITCHES,
    PROCESS_CPU_UTILIZATION,
    PROCESS_MEMORY_RSS,
    PROCESS_RUNQUEUE_WAIT,
    SOURCE_PROCESS_TREE,
)
from .base import Deltas, ProcFile, Reading, SourceUnavailable, SplitSource

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_TICK_NS = 1_000_000_000 // _TICK
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


class _Member:
    __slots__ = ("pid", "stat", "threads", "children", "last", "retired", "start", "ppid",
                 "own_ns", "task_dir",
                 "wait_ns", "slices", "reaped_ns", "reaped_seen_ns", "rss", "faults", "mark",
                 "nthreads", "seen_ns", "raw")

    def __init__(self, pid: int, stat: ProcFile, start: bytes) -> None:
        self.pid, self.stat, self.start = pid, stat, start
        self.threads: dict = {}  # tid -> ProcFile of its schedstat
        self.children: dict = {}  # tid -> ProcFile of its children (pids)
        self.nthreads = 0  # from stat; a change means the thread list must be read again
        self.seen_ns = 0  # when a walk of the tree last reached it
        self.last: dict = {}  # tid -> (run ns, wait ns, slices) at the last read
        # tid -> when it was forgotten (its thread gone): snapshots taken before then still
        # hold its readings, and are parsed later (in a batch), so its last reading is kept
        # until they are
        self.retired: dict = {}
        self.raw: dict = {}  # tid -> the schedstat line it was read from
        self.ppid = 0
        self.own_ns = self.wait_ns = self.slices = 0  # counted since we found it
        self.reaped_ns: "int | None" = None  # cutime + cstime at the last stat read (ns)
        self.reaped_seen_ns = 0  # growth of reaped_ns since we found it
        self.rss = self.faults = 0
        self.mark: "tuple | None" = None  # (ns, own_ns, wait_ns, slices) at last emission

    def close(self) -> None:
        self.stat.close()
        for f in (*self.threads.values(), *self.children.values()):
            f.close()


def stat_fields(data: bytes) -> list:
    """The fields of a ``/proc/<pid>/stat`` line from field 3 (the state) on: those after the
    last ')', since the command name may hold spaces and parentheses."""
    return data[data.rfind(b")") + 2:].split()


class ProcessTree(SplitSource):
    """Counters of process ``pid`` and all its descendants (see the module docstring)."""

    name = SOURCE_PROCESS_TREE

    def __init__(self, pid: int, root: str = "/proc", discover_interval_s: float = 0.5,
                 per_process_hz: float = 1.0, stat_interval_s: float = 1.0) -> None:
        self.root_pid = int(pid)
        self.root = root
        self.discover_interval_ns = int(discover_interval_s * 1e9)
        self.per_process_ns = int(1e9 / per_process_hz) if per_process_hz > 0 else None
        self.stat_interval_ns = int(stat_interval_s * 1e9)
        self._last_stat: Optional[int] = None
        self.members: dict = {}
        self.deltas = Deltas()
        self._last_discover = 0
        self._last_per_process: Optional[int] = None
        self._last_sample_ns: Optional[int] = None
        self._credit: dict = {}  # parent pid -> CPU ticks of its gone children already counted
        self._layout: Optional[tuple] = None  # what a snapshot reads; None: to be made again
        self._stale: set = set()  # pids of members one of whose threads could not be read
        if self._add(self.root_pid) is None:
            raise SourceUnavailable(f"process tree: no process {self.root_pid} "
                                    f"(or {root}/{self.root_pid} is not readable)")
        for pid in self._discover(0):
            self._drop(pid)

    # ---- membership -------------------------------------------------------------------------
    def _add(self, pid: int) -> Optional[_Member]:
        try:
            stat = ProcFile(f"{self.root}/{pid}/stat", 1024)
            f = stat_fields(stat.read())
        except OSError:
            return None
        m = _Member(pid, stat, f[19] if len(f) > 19 else b"")
        m.task_dir = f"{self.root}/{pid}/task"
        m.ppid = int(f[1]) if len(f) > 1 else 0
        self.members[pid] = m
        self._layout = None
        return m

    def _drop(self, pid: int) -> None:
        m = self.members.pop(pid, None)
        if m is not None:
            self._layout = None
            m.close()
            # what it used is counted already: when its parent reaps it, the parent's cutime
            # grows by all of it, and only the part we had not seen is new
            if m.ppid in self.members:
                self._credit[m.ppid] = (self._credit.get(m.ppid, 0) + m.own_ns
                                        + m.reaped_seen_ns)
            self._credit.pop(pid, None)

    def _discover(self, now_ns: int) -> list:
        """Walk the tree from the root: each member's threads' ``children`` files (kept open,
        re-read with pread); a member's thread list is read again only when its thread count
        (from ``stat``, once a second) changed, or it is new. Returns the members the walk
        did not reach: they leave the tree once the snapshots taken before are parsed."""
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
            m.seen_ns = now_ns
            if m.nthreads != len(m.threads) or not m.threads:
                self._list_threads(m, now_ns)
            for tid, cf in list(m.children.items()):
                try:
                    queue.extend(int(c) for c in cf.read().split())
                except (OSError, ValueError):
                    m.children.pop(tid).close()
        return [p for p in self.members if p not in seen]

    def _list_threads(self, m: _Member, now_ns: int) -> None:
        self._layout = None
        try:
            tids = {int(t) for t in os.listdir(m.task_dir)}
        except OSError:
            return
        base = m.task_dir
        for tid in tids:
            if tid not in m.threads:
                try:
                    m.threads[tid] = ProcFile(f"{base}/{tid}/schedstat", 256)
                    m.children[tid] = ProcFile(f"{base}/{tid}/children", 4096)
                except OSError:
                    self._forget_thread(m, tid, now_ns)
        for tid in [t for t in m.threads if t not in tids]:
            self._forget_thread(m, tid, now_ns)
        m.nthreads = len(m.threads)

    # ---- sampling ---------------------------------------------------------------------------
    def snapshot(self, now_ns: int) -> tuple:
        """Only the reads: each member's threads' ``schedstat`` (None where it failed: the
        thread is gone) and, once a second, its ``stat``; the tree is walked when due."""
        unseen = ()
        # a process one of whose threads could not be read last round: the thread that
        # replaced it is read from this round on (the count alone stays the same)
        stale, self._stale = self._stale, set()
        for pid in stale:
            if pid in self.members:
                self._list_threads(self.members[pid], now_ns)
        if now_ns - self._last_discover >= self.discover_interval_ns:
            unseen = self._discover(now_ns)
        else:
            # a thread started since the last read is read from this round on: its CPU is
            # then counted in the interval it used it, not lumped into a later one (its task
            # directory has a link per thread, and two more; one stat() a process)
            stat = os.stat
            root = self.root_pid
            for m in self.members.values():
                # the root and multi-threaded processes (where threads come and go: an
                # agent's pools); a single-threaded child's new threads wait for the walk
                if m.pid != root and len(m.threads) < 2:
                    continue
                try:
                    count = stat(m.task_dir).st_nlink - 2
                except OSError:
                    continue
                if count != len(m.threads):
                    self._list_threads(m, now_ns)
        stat_round = self._last_stat is None or now_ns - self._last_stat >= self.stat_interval_ns
        if stat_round:
            self._last_stat = now_ns
        per_process = stat_round and self.per_process_ns is not None and (
            self._last_per_process is None
            or now_ns - self._last_per_process >= self.per_process_ns)
        if per_process:
            self._last_per_process = now_ns
        layout = self._layout
        if layout is None:  # the members or their threads changed
            layout = self._layout = (
                [(m, tuple(m.threads)) for m in self.members.values()],
                [sf.fd for m in self.members.values() for sf in m.threads.values()])
        pread = os.pread
        try:
            data = [pread(fd, 256, 0) for fd in layout[1]]
        except OSError:  # a thread is gone: read one by one, None for those gone
            data = []
            for fd in layout[1]:
                try:
                    data.append(pread(fd, 256, 0))
                except OSError:
                    data.append(None)
            k = 0
            for m, tids in layout[0]:  # their processes' threads are listed again next round
                if None in data[k:k + len(tids)]:
                    self._stale.add(m.pid)
                k += len(tids)
        stats = None
        if stat_round:
            stats = []
            for m, _ in layout[0]:
                try:
                    stats.append(m.stat.read())
                except OSError:
                    stats.append(b"")
        return layout[0], data, stats, stat_round, per_process, unseen

    def _forget_thread(self, m: _Member, tid: int, now_ns: int) -> None:
        """Stop reading thread ``tid`` (gone) from the snapshot at ``now_ns`` on; the readings
        of snapshots taken before, not parsed yet, still count (its last reading is kept until
        then)."""
        self._layout = None
        f = m.threads.pop(tid, None)
        if f is not None:
            f.close()
        m.retired[tid] = min(now_ns, m.retired.get(tid, now_ns))
        m.raw.pop(tid, None)
        f = m.children.pop(tid, None)
        if f is not None:
            f.close()

    def parse(self, now_ns: int, snap: tuple) -> list:
        layout, data, stats, stat_round, per_process, unseen = snap
        out = []
        used_ns = waited_ns = 0
        members = self.members
        # 1. every thread's on-CPU and waiting time
        gone = []
        k = 0
        for m, tids in layout:
            k0, k = k, k + len(tids)
            if members.get(m.pid) is not m:  # dropped since this snapshot was taken
                continue
            raw = m.raw
            for tid, text in zip(tids, data[k0:k]):
                if text and raw.get(tid) == text:  # the thread did not run: nothing moved
                    continue
                try:
                    fields = text.split()
                    run, wait, sl = int(fields[0]), int(fields[1]), int(fields[2])
                except (AttributeError, IndexError, ValueError):  # None or empty: gone
                    self._forget_thread(m, tid, now_ns)
                    continue
                if tid not in m.threads and not now_ns < m.retired.get(tid, now_ns):
                    continue  # forgotten before this snapshot was taken
                if tid in m.threads:
                    raw[tid] = text
                prev = m.last.get(tid)
                m.last[tid] = (run, wait, sl)
                if prev is None:  # new since the last read: all it did is new
                    d_run, d_wait, d_sl = run, wait, sl
                else:
                    d_run, d_wait, d_sl = run - prev[0], wait - prev[1], sl - prev[2]
                if d_run > 0:
                    m.own_ns += d_run
                    used_ns += d_run
                if d_wait > 0:
                    m.wait_ns += d_wait
                    waited_ns += d_wait
                if d_sl > 0:
                    m.slices += d_sl
            if m.retired:  # the snapshots taken before they went are parsed now
                for tid in [t for t, when in m.retired.items() if when <= now_ns]:
                    del m.retired[tid]
                    m.last.pop(tid, None)
            if not m.threads:
                gone.append(m.pid)
        # 2. members that went, or left the tree (unless a later walk found them again),
        # before the parents' stat: a parent that reaped them is credited what was counted
        for pid in unseen:
            m = members.get(pid)
            if m is not None and m.seen_ns < now_ns:
                gone.append(pid)
        for pid in gone:
            self._drop(pid)
        dropped = bool(gone)
        # 3. once a second, each process's stat: RSS, faults, the CPU of reaped children
        if stats is not None:
            gone = []
            for (m, _), st in zip(layout, stats):
                pid = m.pid
                if members.get(pid) is not m:
                    continue
                f = stat_fields(st)
                if len(f) < 22 or f[19] != m.start:  # gone (or its pid reused)
                    gone.append(pid)
                    continue
                m.ppid = int(f[1])
                m.nthreads = int(f[17])
                m.rss = int(f[21]) * _PAGE
                m.faults = int(f[9]) + int(f[10])
                reaped = (int(f[13]) + int(f[14])) * _TICK_NS
                if m.reaped_ns is not None and reaped > m.reaped_ns:
                    grown = reaped - m.reaped_ns
                    m.reaped_seen_ns += grown
                    credit = self._credit.get(pid, 0)
                    if credit:
                        take = min(grown, credit)
                        self._credit[pid] = credit - take
                        grown -= take
                    used_ns += grown
                m.reaped_ns = reaped
            for pid in gone:
                self._drop(pid)
            dropped = dropped or bool(gone)
        threads = sum(len(m.threads) for m in members.values())
        root = self.root_pid
        last = self._last_sample_ns
        if last is not None and now_ns > last:
            dt = now_ns - last
            out.append(Reading(AGENTSCOPE_TREE_CPU_UTILIZATION, used_ns / dt, None, root))
            out.append(Reading(AGENTSCOPE_TREE_RUNQUEUE_WAIT, waited_ns / dt, None, root))
        self._last_sample_ns = now_ns
        if stat_round:
            out.append(Reading(AGENTSCOPE_TREE_PROCESSES, len(members), None, root))
            out.append(Reading(AGENTSCOPE_TREE_THREADS, threads, None, root))
            out.append(Reading(AGENTSCOPE_TREE_MEMORY_RSS,
                               sum(m.rss for m in members.values()), None, root))
            rate = self.deltas.rate("faults", sum(m.faults for m in members.values()),
                                    now_ns)
            if rate is not None:
                out.append(Reading(AGENTSCOPE_TREE_MAJOR_FAULTS, rate, None, root))
        if per_process:
            for pid, m in members.items():
                out.append(Reading(PROCESS_MEMORY_RSS, m.rss, None, pid))
                mark, m.mark = m.mark, (now_ns, m.own_ns, m.wait_ns, m.slices)
                if mark is not None and now_ns > mark[0]:
                    secs = (now_ns - mark[0]) / 1e9
                    out.append(Reading(PROCESS_CPU_UTILIZATION,
                                       (m.own_ns - mark[1]) / 1e9 / secs, None, pid))
                    out.append(Reading(PROCESS_RUNQUEUE_WAIT,
                                       (m.wait_ns - mark[2]) / 1e9 / secs, None, pid))
                    out.append(Reading(PROCESS_CONTEXT_SWITCHES,
                                       (m.slices - mark[3]) / secs, None, pid))
        if dropped:  # walk the tree again at the next snapshot
            self._last_discover = -(1 << 62)
        return out
