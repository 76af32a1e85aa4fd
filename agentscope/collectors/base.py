"""What every counter source shares: the one-method protocol, readings, absence, /proc reads.

A source is any object with a ``name`` and one method, ``sample(now_ns)``, returning readings
(:class:`Reading`). A source that cannot work on this machine raises :class:`SourceUnavailable`
from its constructor: the sampler then reports it absent (a ``agentscope.collector.up`` sample
of 0 with the reason in the log), and never writes zeros in its place. Counters that only grow
(CPU jiffies, PSI stall totals, bytes read) are turned into rates over the interval between
two samples, so the first sample of such a source only primes it.

A source may also split ``sample`` in two: ``snapshot(now_ns)``, which only reads (the raw
bytes of its files), and ``parse(now_ns, snap)``, which turns a snapshot into readings;
``sample(now_ns)`` is then ``parse(now_ns, snapshot(now_ns))`` (:class:`SplitSource`). The
sampler takes snapshots every round and parses them in a batch about once a second. Right
after a thread wakes up, its caches are cold and every line of Python costs several times
what it costs warm (measured on the VM this was built on: a round that takes 100 µs warm
took 440 µs right after a sleep), so doing only the reads in the round, and the parsing
warm, is most of what a sampler at 10 Hz can save. ``parse`` is called for the snapshots in
the order they were taken.
"""

from __future__ import annotations

import os
from typing import Iterable, NamedTuple, Optional, Protocol, runtime_checkable


class Reading(NamedTuple):
    """One value read by a source; the sampler adds time, host and source name."""

    metric: str
    value: float
    device: Optional[str] = None  # e.g. "cpu3", "gpu0", "vda"
    pid: Optional[int] = None  # the process it describes (process-tree readings)
    ts_ns: Optional[int] = None  # when the value was measured, if not now (NVML history)


@runtime_checkable
class Source(Protocol):
    name: str

    def sample(self, now_ns: int) -> Iterable[Reading]:
        """Read the counters now (``now_ns``: wall clock, ns since the epoch)."""


class SplitSource:
    """A source that splits its sampling: subclasses define ``snapshot`` and ``parse``."""

    def sample(self, now_ns: int) -> list:
        return self.parse(now_ns, self.snapshot(now_ns))


def snapshots(s: object) -> bool:
    """Whether source ``s`` splits its sampling into ``snapshot`` and ``parse``."""
    return callable(getattr(s, "snapshot", None)) and callable(getattr(s, "parse", None))


class SourceUnavailable(Exception):
    """This source cannot run here (no /proc/pressure, no NVIDIA driver, server down...)."""


class ProcFile:
    """A /proc (or /sys) file kept open and re-read from offset 0 with one ``pread``: about
    a third of the cost of open + read + close, which matters at 100 samples a second."""

    __slots__ = ("path", "fd", "size")

    def __init__(self, path: str, size: int = 65536) -> None:
        self.path = path
        self.size = size
        self.fd = -1
        self.fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)

    def read(self) -> bytes:
        data = os.pread(self.fd, self.size, 0)
        if len(data) == self.size:  # bigger than we thought: read it whole
            self.size *= 4
            return self.read()
        return data

    def close(self) -> None:
        if self.fd >= 0:
            try:
                os.close(self.fd)
            except OSError:
                pass
            self.fd = -1

    def __del__(self) -> None:
        self.close()


def open_proc(path: str, what: str) -> ProcFile:
    """Open ``path`` and read it once, or raise SourceUnavailable naming ``what`` is missing."""
    try:
        f = ProcFile(path)
        f.read()
        return f
    except OSError as e:
        raise SourceUnavailable(f"{what}: cannot read {path} ({e.strerror or e})") from None


def open_optional(path: str) -> "ProcFile | None":
    """Open ``path`` if it is there: a file a source can do without (None if not)."""
    try:
        return ProcFile(path)
    except OSError:
        return None


class Deltas:
    """Rates of cumulative counters: ``rate(key, value, now_ns)`` is the increase per second
    since the previous call for ``key`` (None on the first call, or when the counter went
    backwards: a reset or a reused id)."""

    __slots__ = ("_last",)

    def __init__(self) -> None:
        self._last: dict = {}

    def delta(self, key: object, value: float, now_ns: int) -> "tuple | None":
        """(increase, seconds) since the last call for ``key``."""
        last = self._last.get(key)
        self._last[key] = (value, now_ns)
        if last is None:
            return None
        v0, t0 = last
        dt = (now_ns - t0) / 1e9
        if dt <= 0 or value < v0:
            return None
        return value - v0, dt

    def rate(self, key: object, value: float, now_ns: int) -> Optional[float]:
        d = self.delta(key, value, now_ns)
        return None if d is None else d[0] / d[1]
