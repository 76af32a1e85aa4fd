"""Host counters from /proc: CPU (per core, run queue, load), PSI, memory and paging, disk
and network I/O. Each source reads a few kept-open files per sample (see ProcFile).

Metric names follow OpenTelemetry's system semantic conventions where one exists
(``system.cpu.utilization``, ``system.memory.usage``...), with the attribute that tells apart
the series (direction, state) folded into the name, as the Prometheus exporters do.
"""

from __future__ import annotations

import os

from ..metric_names import (
    SOURCE_HOST_CPU,
    SOURCE_HOST_IO,
    SOURCE_HOST_MEMORY,
    SOURCE_HOST_PRESSURE,
    SYSTEM_CPU_LOAD_AVERAGE_1M,
    SYSTEM_CPU_LOGICAL_COUNT,
    SYSTEM_CPU_RUN_QUEUE,
    SYSTEM_CPU_UTILIZATION,
    SYSTEM_DISK_IO_READ,
    SYSTEM_DISK_IO_WRITE,
    SYSTEM_DISK_UTILIZATION,
    SYSTEM_MEMORY_AVAILABLE,
    SYSTEM_MEMORY_LIMIT,
    SYSTEM_MEMORY_USAGE,
    SYSTEM_NETWORK_IO_RECEIVE,
    SYSTEM_NETWORK_IO_TRANSMIT,
    SYSTEM_PAGING_MAJOR_FAULTS,
    SYSTEM_PAGING_SWAP_IN,
    SYSTEM_PAGING_SWAP_OUT,
    SYSTEM_PRESSURE_CPU_SOME,
    SYSTEM_PRESSURE_IO_FULL,
    SYSTEM_PRESSURE_IO_SOME,
    SYSTEM_PRESSURE_MEMORY_FULL,
    SYSTEM_PRESSURE_MEMORY_SOME,
    SYSTEM_PROCESSES_BLOCKED,
    SYSTEM_SWAP_USAGE,
)
from .base import Deltas, Reading, SourceUnavailable, SplitSource, open_optional, open_proc


class HostCPU(SplitSource):
    """``/proc/stat`` and ``/proc/loadavg``.

    * ``system.cpu.run_queue``: runnable tasks, every round (``procs_running``, or
      ``/proc/loadavg``'s running count in rounds that do not read ``/proc/stat``; less the
      sampler itself, which is running while it reads); above the core count, runnable work
      is waiting;
    * ``system.cpu.utilization``: busy share of all cores (0..1), and of each core (device
      ``cpuN``) when ``per_core``; from ``/proc/stat``, at most every ``stat_interval_s``
      (0.05 s): its counters move in 10 ms ticks, so a shorter interval only adds noise;
    * ``system.processes.blocked`` (tasks in uninterruptible sleep, mostly disk I/O), with
      the utilization;
    * ``system.cpu.load_average.1m`` and ``system.cpu.logical.count`` (at most once a
      second).
    """

    name = SOURCE_HOST_CPU

    def __init__(self, root: str = "/proc", per_core: bool = True,
                 stat_interval_s: float = 0.05) -> None:
        self.stat = open_proc(f"{root}/stat", "host CPU")
        self.loadavg = open_optional(f"{root}/loadavg")
        self.per_core = per_core
        self.stat_interval_ns = int(stat_interval_s * 1e9)
        self._prev: dict = {}  # cpu label -> (all jiffies, idle + iowait jiffies) at the last read
        self._names: dict = {}  # cpu label -> device name
        self._last_load = -(1 << 62)
        self._last_stat = -(1 << 62)

    def snapshot(self, now_ns: int) -> tuple:
        """(loadavg bytes or None, /proc/stat bytes or None, whether the load is due)."""
        stat_due = now_ns - self._last_stat >= self.stat_interval_ns
        load_due = now_ns - self._last_load >= 1_000_000_000
        load = None
        if self.loadavg is not None and (load_due or not stat_due):
            # the run queue from loadavg where /proc/stat is not read this round (one read
            # fewer: after the sampler wakes, each costs tens of µs here)
            load = self.loadavg.read()
            if load_due:
                self._last_load = now_ns  # a one-minute average: once a second is plenty
        stat = None
        if stat_due:
            self._last_stat = now_ns
            stat = self.stat.read()
        return load, stat, load_due

    def parse(self, now_ns: int, snap: tuple) -> list:
        load_text, stat, load_due = snap
        out = []
        if load_text is not None:
            load = load_text.split()
            running = load[3].partition(b"/")[0] if len(load) > 3 else b""
            if running.isdigit() and stat is None:
                out.append(Reading(SYSTEM_CPU_RUN_QUEUE, max(int(running) - 1, 0)))
            if load_due:
                out.append(Reading(SYSTEM_CPU_LOAD_AVERAGE_1M, float(load[0])))
        if stat is None:
            return out
        cores = 0
        prev, names = self._prev, self._names
        # the cpu lines come first; the rest (interrupt counts: the bulk of the file) is
        # skipped but for the two procs_ lines
        end = stat.find(b"\nintr ")
        for line in (stat if end < 0 else stat[:end]).split(b"\n"):
            if line.startswith(b"cpu"):
                parts = line.split()
                label = parts[0]
                if label != b"cpu":
                    cores += 1
                    if not self.per_core:
                        continue
                f = [int(x) for x in parts[1:9]]  # user nice system idle iowait irq softirq steal
                total, idle = sum(f), f[3] + f[4]
                last = prev.get(label)
                prev[label] = (total, idle)
                if last is not None and total > last[0] and idle >= last[1]:
                    util = min(max(1.0 - (idle - last[1]) / (total - last[0]), 0.0), 1.0)
                    device = names.get(label)
                    if device is None:
                        device = names[label] = None if label == b"cpu" else label.decode()
                    out.append(Reading(SYSTEM_CPU_UTILIZATION, util, device))
        for key, metric, less in ((b"\nprocs_running ", SYSTEM_CPU_RUN_QUEUE, 1),
                                  (b"\nprocs_blocked ", SYSTEM_PROCESSES_BLOCKED, 0)):
            i = stat.find(key)
            if i >= 0:
                j = stat.find(b"\n", i + 1)
                value = stat[i + len(key):j if j > 0 else len(stat)].strip()
                if value.isdigit():
                    out.append(Reading(metric, max(int(value) - less, 0)))
        if load_due:  # it does not change: once a second
            out.append(Reading(SYSTEM_CPU_LOGICAL_COUNT, cores))
        return out


# (PSI file, line kind) -> metric. No ("cpu", b"full"): undefined for the whole system (the
# kernel reports it as zero since 5.13); only a cgroup's cpu.pressure has a meaningful one.
_PSI_METRICS = {("cpu", b"some"): SYSTEM_PRESSURE_CPU_SOME,
                ("memory", b"some"): SYSTEM_PRESSURE_MEMORY_SOME,
                ("memory", b"full"): SYSTEM_PRESSURE_MEMORY_FULL,
                ("io", b"some"): SYSTEM_PRESSURE_IO_SOME,
                ("io", b"full"): SYSTEM_PRESSURE_IO_FULL}


class Pressure(SplitSource):
    """Linux pressure stall information, ``/proc/pressure/{cpu,memory,io}``.

    ``system.pressure.<resource>.some`` / ``.full``: the share of the interval (0..1) in
    which some (all) non-idle tasks were stalled on the resource, computed from the
    ``total=`` stall counters (microseconds), so every interval is exact rather than the
    kernel's 10-second moving average. ``cpu`` ``some`` is runnable work waiting for a CPU.
    ``cpu`` is read every round; ``memory`` and ``io`` at most every ``slow_interval_s``
    (0.5 s: memory and I/O stalls last longer than CPU waits, and each file read costs ~60 µs
    of CPU after the sampler wakes up, measured here): the totals are exact, so a longer
    interval loses only resolution.
    """

    name = SOURCE_HOST_PRESSURE
    RESOURCES = ("cpu", "memory", "io")

    def __init__(self, root: str = "/proc", slow_interval_s: float = 0.5) -> None:
        self.files = {}
        for res in self.RESOURCES:
            self.files[res] = open_proc(f"{root}/pressure/{res}",
                                        "pressure stall information (kernel without PSI?)")
        self.deltas = Deltas()
        self.slow_interval_ns = int(slow_interval_s * 1e9)
        self._last_slow = -(1 << 62)

    def snapshot(self, now_ns: int) -> list:
        """[(resource, file bytes)] of the files due this round."""
        slow = now_ns - self._last_slow >= self.slow_interval_ns
        if slow:
            self._last_slow = now_ns
            return [(res, f.read()) for res, f in self.files.items()]
        return [("cpu", self.files["cpu"].read())]

    def parse(self, now_ns: int, snap: list) -> list:
        out = []
        metrics = _PSI_METRICS
        for res, text in snap:
            for line in text.split(b"\n"):
                if not line:
                    continue
                kind, _, rest = line.partition(b" ")
                name = metrics.get((res, kind))
                if name is None:  # cpu "full" (see _PSI_METRICS)
                    continue
                total = rest.rpartition(b"total=")[2]
                if not total:
                    continue
                d = self.deltas.delta((res, kind), int(total), now_ns)
                if d is not None:
                    out.append(Reading(name, min(d[0] / 1e6 / d[1], 1.0)))
        return out


class Memory(SplitSource):
    """``/proc/meminfo`` and ``/proc/vmstat``.

    * ``system.memory.limit``, ``system.memory.usage`` (total less available),
      ``system.memory.available``, ``system.swap.usage`` (bytes);
    * ``system.paging.swap_in`` / ``system.paging.swap_out`` (pages per second) and
      ``system.paging.major_faults`` (per second): reading the working set back from disk.

    Once a second: these move slowly, ``/proc/vmstat`` is the costliest file to read,
    and PSI (read every round) already says when memory stalls the host.
    """

    name = SOURCE_HOST_MEMORY
    min_interval_s = 1.0  # slow-moving and the biggest files (PSI says the pressure per round)

    _MEMINFO = {b"MemTotal:": "total", b"MemAvailable:": "available",
                b"SwapTotal:": "swap_total", b"SwapFree:": "swap_free"}
    _VMSTAT = {b"pswpin ": SYSTEM_PAGING_SWAP_IN, b"pswpout ": SYSTEM_PAGING_SWAP_OUT,
               b"pgmajfault ": SYSTEM_PAGING_MAJOR_FAULTS}

    def __init__(self, root: str = "/proc") -> None:
        self.meminfo = open_proc(f"{root}/meminfo", "memory")
        self.vmstat = open_optional(f"{root}/vmstat")
        self.deltas = Deltas()

    def snapshot(self, now_ns: int) -> tuple:
        return self.meminfo.read(), None if self.vmstat is None else self.vmstat.read()

    def parse(self, now_ns: int, snap: tuple) -> list:
        text, vmstat = snap
        values = {name: _field(text, key) for key, name in self._MEMINFO.items()}
        out = []
        total, available = values["total"], values["available"]
        if total is not None:
            out.append(Reading(SYSTEM_MEMORY_LIMIT, total * 1024))
            if available is not None:
                out.append(Reading(SYSTEM_MEMORY_AVAILABLE, available * 1024))
                out.append(Reading(SYSTEM_MEMORY_USAGE, (total - available) * 1024))
        if values["swap_total"] is not None and values["swap_free"] is not None:
            out.append(Reading(SYSTEM_SWAP_USAGE,
                               (values["swap_total"] - values["swap_free"]) * 1024))
        if vmstat is not None:
            text = b"\n" + vmstat
            for key, metric in self._VMSTAT.items():
                value = _field(text, key)
                if value is not None:
                    rate = self.deltas.rate(key, value, now_ns)
                    if rate is not None:
                        out.append(Reading(metric, rate))
        return out


def _field(text: bytes, key: bytes) -> "int | None":
    """The number after ``key`` at the start of a line of ``text`` (which starts with a
    newline, or whose first line is not wanted)."""
    i = text.find(b"\n" + key)
    if i < 0:
        i = 0 if text.startswith(key) else -1
        if i < 0:
            return None
    else:
        i += 1
    j = text.find(b"\n", i)
    parts = text[i + len(key):j if j >= 0 else len(text)].split()
    try:
        return int(parts[0])
    except (IndexError, ValueError):
        return None


class DiskNet(SplitSource):
    """``/proc/diskstats`` (whole disks, as listed in /sys/block, less loop and ram devices)
    and ``/proc/net/dev`` (every interface but loopback): bytes per second.

    * ``system.disk.io.read`` / ``system.disk.io.write``, ``system.disk.utilization`` (share
      of the interval with I/O in flight, the busiest disk);
    * ``system.network.io.receive`` / ``system.network.io.transmit``.

    Once a second, as :class:`Memory`.
    """

    name = SOURCE_HOST_IO
    min_interval_s = 1.0

    def __init__(self, root: str = "/proc", sys_root: str = "/sys") -> None:
        self.diskstats = open_proc(f"{root}/diskstats", "disk I/O")
        self.netdev = open_optional(f"{root}/net/dev")
        try:
            disks = os.listdir(f"{sys_root}/block")
        except OSError:
            disks = []
        self.disks = {d.encode() for d in disks if not d.startswith(("loop", "ram"))}
        self.deltas = Deltas()

    def snapshot(self, now_ns: int) -> tuple:
        return self.diskstats.read(), None if self.netdev is None else self.netdev.read()

    def parse(self, now_ns: int, snap: tuple) -> list:
        diskstats, netdev = snap
        read = written = 0
        busiest = None
        for line in diskstats.split(b"\n"):
            f = line.split()
            if len(f) < 14 or (self.disks and f[2] not in self.disks):
                continue
            if not self.disks and f[2].startswith((b"loop", b"ram")):
                continue
            read += int(f[5]) * 512
            written += int(f[9]) * 512
            busy = self.deltas.delta((b"busy", f[2]), int(f[12]), now_ns)  # ms doing I/O
            if busy is not None:
                share = min(busy[0] / 1e3 / busy[1], 1.0)
                busiest = share if busiest is None else max(busiest, share)
        out = []
        for metric, value in ((SYSTEM_DISK_IO_READ, read), (SYSTEM_DISK_IO_WRITE, written)):
            rate = self.deltas.rate(metric, value, now_ns)
            if rate is not None:
                out.append(Reading(metric, rate))
        if busiest is not None:
            out.append(Reading(SYSTEM_DISK_UTILIZATION, busiest))
        if netdev is not None:
            rx = tx = 0
            for line in netdev.split(b"\n")[2:]:
                name, _, rest = line.partition(b":")
                f = rest.split()
                if len(f) < 9 or name.strip() == b"lo":
                    continue
                rx += int(f[0])
                tx += int(f[8])
            for metric, value in ((SYSTEM_NETWORK_IO_RECEIVE, rx),
                                  (SYSTEM_NETWORK_IO_TRANSMIT, tx)):
                rate = self.deltas.rate(metric, value, now_ns)
                if rate is not None:
                    out.append(Reading(metric, rate))
        return out


def host_sources(root: str = "/proc", per_core: bool = True) -> tuple:
    """(sources that work here, [(name, reason)] of those that do not)."""
    made, absent = [], []
    for name, make in ((SOURCE_HOST_CPU, lambda: HostCPU(root, per_core)),
                       (SOURCE_HOST_PRESSURE, lambda: Pressure(root)),
                       (SOURCE_HOST_MEMORY, lambda: Memory(root)),
                       (SOURCE_HOST_IO, lambda: DiskNet(root))):
        try:
            made.append(make())
        except SourceUnavailable as e:
            absent.append((name, str(e)))
    return made, absent
