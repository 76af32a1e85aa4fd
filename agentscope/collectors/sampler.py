"""The sampler: reads every source at a fixed rate and appends the readings to a sample file
(``samples-<host>-<pid>-<ms>-collector.jsonl``, the format of docs/file-formats.md) beside the
spans, as whole lines (O_APPEND, one write a second, like the span writer), so a crash loses
at most the last second of samples. Sources that can split their sampling (see
``base.snapshots``) only read in each round; their snapshots are parsed in a batch just
before the write, when the code is warm.

It never stops because of a source: a source that raises is counted
(``agentscope.collector.errors``, cumulative, per source) and tried again next round; a
process that vanishes mid-sample is dropped from its tree. At start it writes
``agentscope.collector.up`` per source (1 = reading, 0 = absent here: no zeros are written in
an absent source's place); about once a second its own cost, ``agentscope.collector.cpu``
(CPU seconds per second of the sampling thread), and the interval it runs at. Inside the
agent (``in_process``) it also writes, every round, how late its thread ran after waking
(``agentscope.python.gil_wait``, seconds): with other threads of the process holding Python's
interpreter lock, that is the wait for the GIL (the switch interval, 5 ms, or more). And on
each asyncio loop that instrumented code ran on (``loops``), it schedules a callback every
round and writes how late it ran, where at least LOOP_LAG_MIN_S
(``agentscope.python.loop_lag``, seconds, device ``thread-<tid>``, or
``thread-<tid>:<span id>`` naming the span whose task the loop ran while the callback waited,
as ``holder`` reported it each round): the loop was held by code that did not yield for at
least that long, up to when the callback ran.
"""

from __future__ import annotations

import collections
import math
import os
import socket
import threading
import time
import weakref
from pathlib import Path
from typing import Callable, Iterable, Optional

from .._log import log, log_once
from ..formats import samplefile
from ..metric_names import (
    AGENTSCOPE_COLLECTOR_CPU,
    AGENTSCOPE_COLLECTOR_ERRORS,
    AGENTSCOPE_COLLECTOR_INTERVAL,
    AGENTSCOPE_COLLECTOR_UP,
    AGENTSCOPE_PYTHON_GIL_WAIT,
    AGENTSCOPE_PYTHON_LOOP_LAG,
    SOURCE_COLLECTOR,
    SOURCE_GPU_NVIDIA,
    SOURCE_HOST_ENERGY,
    SOURCE_PROCESS_TREE,
    SOURCE_PYTHON,
)
from ..records import SampleRecord
from .base import Source, snapshots

_NO_SNAPSHOT = object()
LOOP_LAG_MIN_S = 0.02  # a loop's lag is written from this much (four 5 ms switch intervals)


class Sampler:
    """Sample ``sources`` every ``interval_s`` into ``directory``; ``absent`` lists
    (name, reason) of the sources that could not start here."""

    def __init__(self, directory: "str | os.PathLike[str]", sources: Iterable[Source],
                 absent: Iterable[tuple] = (), interval_s: float = 0.1,
                 host: Optional[str] = None, tag: str = "collector",
                 flush_interval_s: float = 1.0, in_process: bool = False,
                 loops: Optional[Iterable] = None,
                 holder: Optional[Callable[[object], Optional[str]]] = None) -> None:
        self.directory = Path(directory)
        self.sources = list(sources)
        self.absent = list(absent)
        self.interval_s = float(interval_s)
        if not self.interval_s > 0:
            raise ValueError(f"interval must be positive, got {interval_s}")
        self.host = host or socket.gethostname()
        self.pid = os.getpid()
        self.path = self.directory / samplefile.file_name(self.host, self.pid,
                                                          int(time.time() * 1000), tag)
        self.errors = {s.name: 0 for s in self.sources}
        self.rounds = 0
        self.samples = 0
        self.write_errors = 0
        self._fd: Optional[int] = None
        self._middles: dict = {}
        self._buf_lock = threading.Lock()
        # inside the agent (init(collect=...)), how late the sampling thread runs after each
        # wake-up is the wait for Python's interpreter lock: a GIL probe
        self.in_process = in_process
        self._late_s: Optional[float] = None
        # set when the process starts a thread (see wake()): a GIL probe idling at one round
        # a second in a single-threaded process starts probing at once
        self._woken = threading.Event()
        # the event loops whose lag it probes (the runtime's registry: loops come and go)
        self.loops = loops if in_process else None
        self._probing: set = set()  # id() of the loops with a probe scheduled, not yet run
        # (loop) -> the span running on it now (16 hex digits), asked while its probe waits:
        # {id(loop): {span: rounds seen}} names what held it
        self.holder = holder
        self._held: dict = {}
        # (ns the probe ran, "thread-<tid>[:<span>]", lag s), appended on the loops' threads
        self._lags: collections.deque = collections.deque()
        # the foreground sources: (source, its interval in ns, whether it takes snapshots)
        self._plan = [(s, int(getattr(s, "min_interval_s", 0) * 1e9) - 1000, snapshots(s))
                      for s in self.sources if not getattr(s, "background", False)]
        self._next_due = [0] * len(self._plan)
        # (source, ns, snapshot) taken and not parsed yet; (None, ns, s) is a GIL probe
        self._snaps: list = []
        self._background_threads: list = []
        self.flush_interval_ns = int(flush_interval_s * 1e9)
        self._pending: list = []
        self._pending_bytes = 0
        self._last_flush_ns = 0
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._lock = threading.Lock()
        self._cpu_mark: Optional[tuple] = None
        self._last_self_ns = 0
        self._started = False
        self._forked = False
        if hasattr(os, "register_at_fork"):
            ref = weakref.ref(self)
            os.register_at_fork(after_in_child=lambda: _after_fork(ref))

    # ---- one round ----------------------------------------------------------------------------
    def tick(self, now_ns: Optional[int] = None, final: bool = False) -> int:
        """Read every source that is due: a snapshot from those that take them (parsed at the
        next write), the readings of the others. Returns how many readings were added now
        (the snapshots' come when they are parsed). ``final``: the last round, which also
        writes the sampler's own figures and everything pending."""
        now = time.time_ns() if now_ns is None else now_ns
        host = self.host
        encode, record = samplefile.encode, SampleRecord
        lines: list = []
        if not self._started:
            self._started = True
            for s in self.sources:
                lines.append(encode(record(now, host, None, s.name, None, AGENTSCOPE_COLLECTOR_UP,
                                          1.0)))
            for name, reason in self.absent:
                lines.append(encode(record(now, host, None, name, None, AGENTSCOPE_COLLECTOR_UP,
                                          0.0)))
                log.info("agentscope collector: %s absent: %s", name, reason)
        due, snaps = self._next_due, self._snaps
        for i, (s, every_ns, snap) in enumerate(self._plan):
            if now < due[i]:
                continue
            due[i] = now + every_ns
            if snap:  # only the reads now; parsed warm, in flush()
                try:
                    snaps.append((s, now, s.snapshot(now)))
                except Exception as e:  # a source must never stop the sampler
                    self._failed(s, e)
            else:
                self._read(s, now, lines)
        if self.in_process and self._late_s is not None:
            snaps.append((None, now, self._late_s))
            self._late_s = None
        if self.loops:
            self._probe_loops(now)
        if final or now - self._last_self_ns >= 1_000_000_000:
            lines.extend(self._self_readings(now))
        self.rounds += 1
        if lines:
            with self._buf_lock:
                self.samples += len(lines)
                self._pending.append("".join(lines))
                self._pending_bytes += len(self._pending[-1])
        if final or self._pending_bytes >= 256 << 10 or len(self._snaps) >= 4096 or \
                now - self._last_flush_ns >= self.flush_interval_ns:
            self.flush(now)
        return len(lines)

    def flush(self, now_ns: Optional[int] = None) -> None:
        """Parse the snapshots taken since the last write, and write the rounds sampled since
        (one write)."""
        self._last_flush_ns = time.time_ns() if now_ns is None else now_ns
        snaps, self._snaps = self._snaps, []
        lags = []
        while self._lags:
            lags.append(self._lags.popleft())
        if snaps or lags:
            lines: list = []
            encode, record, host = samplefile.encode, SampleRecord, self.host
            for ns, device, lag in lags:
                lines.append(encode(record(ns, host, self.pid, SOURCE_PYTHON, device,
                                           AGENTSCOPE_PYTHON_LOOP_LAG, lag)))
            for s, ns, snap in snaps:
                if s is None:
                    lines.append(encode(record(ns, host, self.pid, SOURCE_PYTHON, None,
                                               AGENTSCOPE_PYTHON_GIL_WAIT, snap)))
                else:
                    self._read(s, ns, lines, snap)
            if lines:
                with self._buf_lock:
                    self.samples += len(lines)
                    self._pending.append("".join(lines))
        with self._buf_lock:
            text = "".join(self._pending)
            self._pending, self._pending_bytes = [], 0
        if text:
            self._write(text)

    def _probe_loops(self, now: int) -> None:
        """Schedule a callback on every running loop that has none pending: how late it runs
        is how long the loop was held (:meth:`_landed`)."""
        for loop in list(self.loops or ()):
            key = id(loop)
            if key in self._probing:  # still waiting: the loop is held; by which span?
                self._saw_holder(loop, key, 1.0)
                continue
            try:
                if loop.is_closed() or not loop.is_running():
                    continue
                self._probing.add(key)
                loop.call_soon_threadsafe(self._landed, key, time.monotonic_ns())
            except Exception:  # a loop closing meanwhile: probe it no more this round
                self._probing.discard(key)
                continue
            # a task running on the loop now holds the probe until it yields: seen at half
            # the weight of a round that finds the probe still waiting (a round may be all
            # there is when this thread gets little CPU while the loop is held)
            self._saw_holder(loop, key, 0.5)

    def _saw_holder(self, loop: object, key: int, weight: float) -> None:
        """Count ``weight`` for the span running on ``loop`` now (``holder``), if any, while
        its probe waits."""
        span = self.holder(loop) if self.holder is not None else None
        if span is not None and key in self._probing:  # (not landed meanwhile)
            seen = self._held.setdefault(key, {})
            seen[span] = seen.get(span, 0) + weight

    def _landed(self, key: int, sent_ns: int) -> None:
        """On the loop's thread: the probe ran; its lag, where it matters, for the next
        write."""
        self._probing.discard(key)
        seen = self._held.pop(key, None)
        lag = (time.monotonic_ns() - sent_ns) / 1e9
        if lag >= LOOP_LAG_MIN_S:
            device = f"thread-{threading.get_native_id()}"
            if seen:  # the span seen running most often while it waited
                device += ":" + max(seen, key=seen.__getitem__)
            self._lags.append((time.time_ns(), device, lag))

    def _failed(self, s: Source, e: Exception) -> None:
        self.errors[s.name] += 1
        log_once(f"collector:{s.name}:{type(e).__name__}",
                 "agentscope collector: %s failed (%s: %s); counted, retrying every "
                 "round", s.name, type(e).__name__, e)

    def _read(self, s: Source, now: int, lines: list, snap: object = _NO_SNAPSHOT) -> None:
        """Sample ``s`` (or parse its snapshot ``snap``) and append its readings as lines."""
        try:
            readings = s.sample(now) if snap is _NO_SNAPSHOT else s.parse(now, snap)
        except Exception as e:  # a source must never stop the sampler
            self._failed(s, e)
            return
        name, host = s.name, self.host
        cache = self._middles
        for r in readings:
            # a line is '{"ts_ns":<ts>' + the same middle for this series + '<value>}':
            # the middle is encoded once per series (samplefile.encode gives the same line)
            key = (name, r.metric, r.device, r.pid)
            middle = cache.get(key)
            if middle is None:
                line = samplefile.encode(SampleRecord(0, host, r.pid, name, r.device,
                                                      r.metric, 0.0))
                middle = cache[key] = line[len('{"ts_ns":0'):line.rindex('"value":') + 8]
            value = float(r.value)
            lines.append(f'{{"ts_ns":{now if r.ts_ns is None else r.ts_ns}{middle}'
                         f'{repr(value) if math.isfinite(value) else "null"}}}\n')

    def _background(self, s: Source, stop: threading.Event) -> None:
        """A source that may block (a model server over HTTP) samples on its own thread, so
        that a slow or unreachable endpoint never delays the others."""
        period = max(float(getattr(s, "min_interval_s", 0) or 0), self.interval_s)
        while not stop.is_set() and not self._stop.is_set() and not self._forked:
            lines: list = []
            self._read(s, time.time_ns(), lines)
            if lines:
                with self._buf_lock:
                    self.samples += len(lines)
                    self._pending.append("".join(lines))
                    self._pending_bytes += len(self._pending[-1])
            stop.wait(period)

    def _self_readings(self, now: int) -> list:
        self._last_self_ns = now
        out = []
        encode, record, host = samplefile.encode, SampleRecord, self.host
        cpu = time.thread_time()
        if self._cpu_mark is not None:
            c0, t0 = self._cpu_mark
            if now > t0:
                out.append(encode(record(now, host, self.pid, SOURCE_COLLECTOR, None,
                                         AGENTSCOPE_COLLECTOR_CPU,
                                         (cpu - c0) / ((now - t0) / 1e9))))
        self._cpu_mark = (cpu, now)
        out.append(encode(record(now, host, self.pid, SOURCE_COLLECTOR, None,
                                 AGENTSCOPE_COLLECTOR_INTERVAL, self.interval_s)))
        for name, count in self.errors.items():
            if count:
                out.append(encode(record(now, host, self.pid, name, None,
                                         AGENTSCOPE_COLLECTOR_ERRORS, float(count))))
        return out

    def _write(self, text: str) -> None:
        if not text:
            return
        data = text.encode("utf-8")
        try:
            if self._fd is None:
                self.directory.mkdir(parents=True, exist_ok=True)
                self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC,
                                   0o644)
            view = memoryview(data)
            while view:
                view = view[os.write(self._fd, view):]
        except OSError as e:
            self.write_errors += 1
            log_once("collector:write", "agentscope collector: cannot write %s (%s); samples "
                     "are dropped", self.path, e)
            self._close_fd()

    # ---- running ------------------------------------------------------------------------------
    def run(self, until: Optional[threading.Event] = None) -> None:
        """Sample until ``until`` (or :meth:`stop`) is set, keeping to the interval's grid."""
        stop = until or self._stop
        period = self.interval_s
        for s in self.sources:
            if getattr(s, "background", False):
                t = threading.Thread(target=self._background, args=(s, stop), daemon=True,
                                     name=f"agentscope-sampler-{s.name}")
                t.start()
                self._background_threads.append(t)
        # the loop runs right after each wake-up, when every line costs several times what
        # it costs warm: it does as little as it can
        gil_only = self.in_process and not self.sources
        probe = self.in_process
        own_stop, lock, tick = self._stop, self._lock, self.tick
        sleep, monotonic = time.sleep, time.monotonic
        next_t = monotonic()
        while not (stop.is_set() or own_stop.is_set()):
            with lock:
                try:
                    tick()
                except Exception as e:  # the sampler must survive anything
                    log_once(f"collector:round:{type(e).__name__}",
                             "agentscope collector: sampling round failed (%r)", e)
            step = self._period(period) if gil_only else period
            next_t += step
            delay = next_t - monotonic()
            if delay < 0:  # fell behind (a slow source, a suspended VM): skip, don't burst
                next_t = monotonic()
                delay = 0
            if step > period:  # idle (one thread): until the next round or a new thread
                self._woken.clear()
                if self._woken.wait(delay):
                    next_t = monotonic()  # threads now: probe from here, every period
                    continue
            elif delay <= 0.25:
                # a plain sleep wakes for less CPU than Event.wait (measured here: 60 vs
                # 100 us a wake-up); a stop waits for at most this one interval
                sleep(delay)
            else:
                stop.wait(delay)
            if probe:  # sleep returns once this thread holds the GIL again
                self._late_s = max(monotonic() - next_t, 0.0)
        for t in self._background_threads:
            t.join(2.0)
        with self._lock:
            try:
                self.tick(final=True)  # a last round, so the series covers the whole run
            except Exception as e:
                log_once("collector:final", "agentscope collector: last round failed (%r)", e)

    def wake(self) -> None:
        """The process started a thread: an idle GIL probe resumes its rate now (the
        runtime calls this from ``Thread.start``)."""
        self._woken.set()

    def _period(self, period: float) -> float:
        """The wait before the next round. A sampler that only probes the GIL (no sources)
        of a process running no other Python thread than the main one waits a second: with
        one thread there is no one to contend with, and each wake-up costs CPU."""
        if self.in_process and not self.sources and threading.active_count() <= 2 and \
                not self.loops:
            return max(period, 1.0)
        return period

    def start(self) -> "Sampler":
        """Sample on a daemon thread."""
        if self._thread is None:
            self._thread = threading.Thread(target=self.run, name="agentscope-sampler",
                                            daemon=True)
            self._thread.start()
        return self

    def stop(self, timeout_s: float = 2.0) -> None:
        """Stop, take a last sample, close the file. Idempotent."""
        if self._forked:  # a forked child: the parent's sampler is not ours to finish
            return
        self._stop.set()
        self._woken.set()  # out of an idle wait
        t = self._thread
        if t is not None and t is not threading.current_thread():
            t.join(timeout_s)
        with self._lock:
            self.flush()
        for s in self.sources:
            close = getattr(s, "close", None)
            if close is not None:
                try:
                    close()
                except Exception:  # never raise while stopping
                    pass
        self._close_fd()

    def _close_fd(self) -> None:
        if self._fd is not None:
            try:
                os.close(self._fd)
            except OSError:
                pass
            self._fd = None


def _after_fork(ref: "weakref.ref[Sampler]") -> None:
    """In a forked child, the parent's sampler stays the parent's: its thread is gone here, and
    writing its buffered rounds or a last round from the child would duplicate them."""
    s = ref()
    if s is None:
        return
    s._forked = True
    s._pending, s._pending_bytes = [], 0
    s._snaps = []
    s._stop.set()
    s._thread = None
    if s._fd is not None:
        try:
            os.close(s._fd)  # the child's copy only
        except OSError:
            pass
        s._fd = None
    s._lock = threading.Lock()  # it may have been held by the parent's sampling thread
    s._buf_lock = threading.Lock()
    s._background_threads = []


def default_sources(pid: Optional[int] = None, *, root: str = "/proc", per_core: bool = True,
                    gpus: bool = True, nvml: object = None,
                    model_servers: Iterable[str] = (), sys_root: str = "/sys") -> tuple:
    """The sources that work on this machine: (sources, [(name, reason) absent])."""
    from .base import SourceUnavailable
    from .gpu import NvidiaGPU
    from .host import host_sources
    from .modelserver import PrometheusEndpoint
    from .proctree import ProcessTree
    from .rapl import RaplEnergy

    sources, absent = host_sources(root, per_core)
    try:  # CPU energy: RAPL zones readable here (mostly root only), else absent
        sources.append(RaplEnergy(sys_root))
    except SourceUnavailable as e:
        # a machine without powercap at all (most VMs, other CPUs) has nothing to report:
        # only zones that are there but cannot be read are said to be absent
        if os.path.isdir(os.path.join(sys_root, "class", "powercap")):
            absent.append((SOURCE_HOST_ENERGY, str(e)))
    if pid is not None:
        try:
            sources.append(ProcessTree(pid, root))
        except SourceUnavailable as e:
            absent.append((SOURCE_PROCESS_TREE, str(e)))
    if gpus:
        try:
            sources.append(NvidiaGPU(nvml))
        except SourceUnavailable as e:
            absent.append((SOURCE_GPU_NVIDIA, str(e)))
    for url in model_servers:
        sources.append(PrometheusEndpoint(url))
    return sources, absent
