"""The span file writer: a bounded in-memory queue drained by a background thread.

Hot path: :meth:`SpanFileWriter.submit` appends a finished span to a deque (or counts a
drop when the queue is full). Everything else (turning spans into records, encoding lines,
writing) happens on the writer's thread every ``flush_interval_s``, on :meth:`flush`, and on
:meth:`shutdown` (registered at interpreter exit by the runtime).

Crash safety: each flush writes whole lines with ``O_APPEND`` to this process's own file, so a
SIGKILL loses at most the spans queued since the last flush, and can leave at most one torn
last line, which readers skip and count. A forked child gets its own file and thread.
"""

from __future__ import annotations

import collections
import contextvars
import os
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any, Optional

from .._log import log_once as _log_once
from ..formats import samplefile, spanfile
from ..metric_names import (
    AGENTSCOPE_CAPTURE_SPANS_DROPPED,
    AGENTSCOPE_CAPTURE_SPANS_WRITTEN,
    AGENTSCOPE_CAPTURE_WRITE_ERRORS,
    SOURCE_CAPTURE,
)
from ..records import SampleRecord, SpanRecord

# the counts of _write_stats, in the order of its (written, dropped, write_errors)
_STATS_METRICS = (AGENTSCOPE_CAPTURE_SPANS_WRITTEN, AGENTSCOPE_CAPTURE_SPANS_DROPPED,
                  AGENTSCOPE_CAPTURE_WRITE_ERRORS)


class SpanFileWriter:
    """Writes finished spans to ``<dir>/spans-<host>-<pid>-<ms>.jsonl``.

    Drop policy: when ``max_queue`` spans are waiting, new spans are dropped (not old ones) and
    counted; the counts are written to ``<dir>/samples-...jsonl`` as the cumulative metrics
    ``agentscope.capture.spans_written``, ``..._dropped`` and ``..._write_errors``.
    """

    def __init__(
        self,
        directory: "str | os.PathLike[str]",
        *,
        service: Optional[str],
        host: Optional[str] = None,
        flush_interval_s: float = 1.0,
        max_queue: int = 65536,
        max_file_bytes: int = 256 << 20,
    ) -> None:
        if flush_interval_s <= 0:
            raise ValueError("flush_interval_s must be positive")
        if max_queue < 1:
            raise ValueError("max_queue must be at least 1")
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.service = service
        self.host = host or socket.gethostname()
        self.flush_interval_s = float(flush_interval_s)
        self.max_queue = int(max_queue)
        self.max_file_bytes = int(max_file_bytes)
        # queue length at which the thread is woken before its interval is up (None: never)
        self.wake_at: Optional[int] = min(4096, self.max_queue // 2 or 1)
        self._reset_process_state()
        os.register_at_fork(after_in_child=self._after_fork_in_child)

    # ---- per-process state (reset in a forked child) ------------------------------------
    def _reset_process_state(self) -> None:
        self.pid = os.getpid()
        self._queue: collections.deque = collections.deque()
        self._drop_lock = threading.Lock()
        self._io_lock = threading.Lock()
        self._wake = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._need_start = True
        self.forked_at_ns = 0
        self._closed = False
        self.dropped = 0
        self.written = 0
        self.write_errors = 0
        self._stats_written: Optional[tuple] = None
        self._file_ms = int(time.time() * 1000)  # in both file names: this process's files
        self._span_fd: Optional[int] = None
        self._span_bytes = 0
        self._span_part = 0
        self._sample_fd: Optional[int] = None
        self.span_files: list[Path] = []

    def _after_fork_in_child(self) -> None:
        # The parent still owns (and will write) what was queued before the fork.
        for fd in (self._span_fd, self._sample_fd):
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass
        closed = self._closed
        self._reset_process_state()
        self._closed = closed
        # Forked workers (multiprocessing pools) are often ended by SIGTERM or os._exit, which
        # run no exit handlers: spans ending at the top level of the child are written at once.
        self.forked_at_ns = time.time_ns()

    # ---- hot path -------------------------------------------------------------------------
    def submit(self, item: Any) -> None:
        """Queue a finished span: a SpanRecord, or an object whose ``encode(writer)`` returns
        its span-file line."""
        queue = self._queue
        n = len(queue)
        if n >= self.max_queue or self._closed:
            with self._drop_lock:
                self.dropped += 1
            return
        queue.append(item)
        if self._need_start:
            self._start_thread()
        elif n == self.wake_at:
            self._wake.set()

    def _start_thread(self) -> None:
        with self._drop_lock:
            if not self._need_start:
                return
            self._need_start = False
            t = threading.Thread(target=self._run, name="agentscope-writer", daemon=True)
            self._thread = t
        contextvars.Context().run(t.start)  # the thread must not hold on to the caller's span
        if self.forked_at_ns:
            self._flush_at_multiprocessing_exit()

    def _flush_at_multiprocessing_exit(self) -> None:
        """A forked ``multiprocessing`` worker leaves through ``os._exit``: no atexit handlers.
        It does run its finalizers first, so flush there. (Registered here, at the child's first
        span, because the worker clears the finalizers it inherited after the fork hooks ran.)"""
        util = sys.modules.get("multiprocessing.util")
        if util is not None:
            try:
                util.Finalize(None, self.shutdown, exitpriority=0)
            except Exception as e:  # pragma: no cover - defensive
                _log_once("mp-finalize", "agentscope: cannot flush at worker exit (%r)", e)

    def _run(self) -> None:
        while not self._closed:
            self._wake.wait(self.flush_interval_s)
            self._wake.clear()
            if self._closed:
                break
            self.flush()

    # ---- draining -------------------------------------------------------------------------
    def flush(self, timeout: Optional[float] = None) -> bool:
        """Write everything queued so far. Returns False if the I/O lock was not had in time."""
        if not self._io_lock.acquire(timeout=-1 if timeout is None else timeout):
            return False
        try:
            self._drain()
            self._write_stats()
        finally:
            self._io_lock.release()
        return True

    def _drain(self) -> None:
        queue = self._queue
        while queue:
            batch = []
            for _ in range(min(len(queue), 8192)):
                try:
                    batch.append(queue.popleft())
                except IndexError:
                    break
            lines = []
            for item in batch:
                try:
                    if type(item) is SpanRecord:
                        lines.append(spanfile.encode(item))
                    else:  # LeanSpan, or an SDK span waiting for conversion
                        lines.append(item.encode(self))
                except Exception as e:  # a bad attribute must not stop the others
                    self.write_errors += 1
                    _log_once("encode", "agentscope: could not encode a span (%r); dropped", e)
            if lines and self._write_spans("".join(lines).encode("ascii")):
                self.written += len(lines)
            elif lines:
                with self._drop_lock:
                    self.dropped += len(lines)

    def _write_spans(self, data: bytes) -> bool:
        try:
            if self._span_fd is None or self._span_bytes + len(data) > self.max_file_bytes > 0 \
                    and self._span_bytes > 0:
                self._open_span_file()
            _write_all(self._span_fd, data)
            self._span_bytes += len(data)
            return True
        except OSError as e:
            self.write_errors += 1
            if self._span_fd is not None:
                try:
                    os.close(self._span_fd)
                except OSError:
                    pass
            _log_once("write", "agentscope: cannot write spans to %s (%s); spans are dropped "
                      "and counted", self.directory, e)
            self._span_fd = None
            return False

    def _open_span_file(self) -> None:
        if self._span_fd is not None:
            os.close(self._span_fd)
            self._span_part += 1
        path = self.directory / spanfile.file_name(self.host, self.pid, self._file_ms,
                                                   self._span_part)
        self._span_fd = _open_append(path)
        self._span_bytes = 0
        self.span_files.append(path)

    def _write_stats(self) -> None:
        current = (self.written, self.dropped, self.write_errors)
        if current == self._stats_written or (self._stats_written is None and not any(current)):
            return
        now = time.time_ns()
        lines = "".join(
            samplefile.encode(SampleRecord(now, self.host, self.pid, SOURCE_CAPTURE, None,
                                           metric, value))
            for metric, value in zip(_STATS_METRICS, current))
        try:
            if self._sample_fd is None:
                self._sample_fd = _open_append(
                    self.directory / samplefile.file_name(self.host, self.pid, self._file_ms))
            _write_all(self._sample_fd, lines.encode("ascii"))
            self._stats_written = current
        except OSError as e:
            _log_once("stats", "agentscope: cannot write capture statistics (%s)", e)
            self._sample_fd = None

    # ---- lifecycle ------------------------------------------------------------------------
    def shutdown(self, timeout: float = 5.0) -> None:
        """Flush what is queued, stop the thread and close the files. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._wake.set()
        t = self._thread
        if t is not None and t is not threading.current_thread():
            t.join(timeout)
        self.flush(timeout)
        for fd in (self._span_fd, self._sample_fd):
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self._span_fd = self._sample_fd = None

    def stats(self) -> dict:
        return {"queued": len(self._queue), "written": self.written, "dropped": self.dropped,
                "write_errors": self.write_errors, "files": [str(p) for p in self.span_files]}


def _open_append(path: Path) -> int:
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]
