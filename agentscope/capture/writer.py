"""The span file writer: a bounded in-memory queue drained by a background thread.

Hot path: :meth:`SpanFileWriter.submit` appends a finished span to a deque (or counts a
drop when the queue is full). Everything else (turning spans into records, encoding lines,
writing) happens on the writer's thread every ``flush_interval_s``, on :meth:`flush`, and on
:meth:`shutdown` (registered at interpreter exit by the runtime).

Bounds (docs/capture-safety.md):

* the queue holds at most ``max_queue`` spans, and at most ``max_queue_bytes`` of the text
  spans carry of their own (attributes set on them, events, exception traces: ``nbytes``);
  beyond either, new spans are dropped and counted;
* in time: when producers keep the writer's thread from running (it needs the interpreter
  lock they hold), a producer that finds the oldest queued span more than a flush interval
  old writes one bounded chunk itself (:meth:`_catch_up`), so what a SIGKILL can lose stays
  about one flush interval of spans;
* in memory while writing: spans are encoded and written in chunks of at most
  :data:`CHUNK_SPANS` spans or :data:`CHUNK_BYTES` bytes.

Crash safety: whole lines are appended with ``O_APPEND`` to this process's own file, so a
SIGKILL loses at most the spans queued since the last write, and can leave at most one torn
last line, which readers skip and count. A partial write (disk full) is cut back to its last
whole line, and a file whose directory was removed is made again (:mod:`.appendfile`): the
spans counted written are the spans on disk. A forked child gets its own file and thread.
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
from .appendfile import AppendFile

# the counts of _write_stats, in the order of its (written, dropped, write_errors)
_STATS_METRICS = (AGENTSCOPE_CAPTURE_SPANS_WRITTEN, AGENTSCOPE_CAPTURE_SPANS_DROPPED,
                  AGENTSCOPE_CAPTURE_WRITE_ERRORS)

CHUNK_SPANS = 2048  # spans encoded and written at a time
CHUNK_BYTES = 4 << 20  # ... or this many bytes of lines, whichever comes first
MAX_QUEUE_BYTES = 64 << 20  # default bound on the spans' own text waiting in the queue
# a producer checks the age of the queue every this many spans (submit has it as a literal)
_AGE_CHECK_EVERY = 256
CATCH_UP_WAIT_S = 0.1  # the longest a producer waits for the file to help a starved writer


class SpanFileWriter:
    """Writes finished spans to ``<dir>/spans-<host>-<pid>-<ms>.jsonl``.

    Drop policy: when ``max_queue`` spans (or ``max_queue_bytes`` of their own text) are
    waiting, new spans are dropped (not old ones) and counted; so are spans whose write
    failed. The counts are written to ``<dir>/samples-...jsonl`` as the cumulative metrics
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
        max_queue_bytes: int = MAX_QUEUE_BYTES,
    ) -> None:
        if not 0 < flush_interval_s <= threading.TIMEOUT_MAX:
            raise ValueError("flush_interval_s must be positive and finite")
        if max_queue < 1:
            raise ValueError("max_queue must be at least 1")
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.service = service
        self.host = host or socket.gethostname()
        self.flush_interval_s = float(flush_interval_s)
        self.max_queue = int(max_queue)
        self.max_queue_bytes = int(max_queue_bytes)
        self.max_file_bytes = int(max_file_bytes)
        # queue length at which the thread is woken before its interval is up (None: never)
        self.wake_at: Optional[int] = min(4096, self.max_queue // 2 or 1)
        # the queue lengths at which submit looks further: multiples of a power of two,
        # _AGE_CHECK_EVERY, or less for a short queue (so that wake_at is seen)
        self._check_mask = min(_AGE_CHECK_EVERY, 1 << (self.wake_at.bit_length() - 1)) - 1
        self._reset_process_state()
        os.register_at_fork(after_in_child=self._after_fork_in_child)

    # ---- per-process state (reset in a forked child) ------------------------------------
    def _reset_process_state(self) -> None:
        self.pid = os.getpid()
        self._queue: collections.deque = collections.deque()
        self._queued_bytes = 0
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
        self.caught_up = 0  # chunks producers wrote themselves (the thread was held back)
        self._chunks = 0  # chunks written, by anyone
        self._no_help_until = 0.0
        self._stats_written: Optional[tuple] = None
        self._file_ms = int(time.time() * 1000)  # in both file names: this process's files
        self._span_file: Optional[AppendFile] = None
        self._span_part = 0
        self._sample_file: Optional[AppendFile] = None
        self.span_files: list[Path] = []

    def _after_fork_in_child(self) -> None:
        # The parent still owns (and will write) what was queued before the fork, and the
        # spans that were open at the fork (LeanSpan.end leaves them to it).
        for f in (self._span_file, self._sample_file):
            if f is not None:
                f.close()
        closed = self._closed
        self._reset_process_state()
        self._closed = closed
        # Forked workers (multiprocessing pools) are often ended by SIGTERM or os._exit, which
        # run no exit handlers: spans ending at the top level of the child are written at once.
        self.forked_at_ns = time.time_ns()

    # ---- hot path -------------------------------------------------------------------------
    def submit(self, item: Any) -> None:
        """Queue a finished span: a SpanRecord, or an object whose ``encode(writer)`` returns
        its span-file line (and whose ``nbytes`` says how much text of its own it holds).
        Never raises."""
        queue = self._queue
        n = len(queue)
        if n >= self.max_queue or self._closed:
            self._drop(item)
            return
        try:
            nbytes = item.nbytes
        except AttributeError:  # a SpanRecord
            nbytes = 0
        if nbytes and not self._reserve(nbytes):
            return
        queue.append(item)
        if self._need_start:
            self._start_thread()
        elif not n & self._check_mask and n:  # every few hundred spans (one test, as cheap
            self._every_few(n, item)           # as the single wake_at test it replaced)

    def _every_few(self, n: int, item: Any) -> None:
        """Every _AGE_CHECK_EVERY spans queued (fewer for a short queue): wake the thread once
        ``wake_at`` spans wait; help it if the queue got old."""
        wake_at = self.wake_at
        if wake_at is not None and n >= wake_at:
            self._wake.set()
        self._check_age(item)

    def _drop(self, item: Any) -> None:
        with self._drop_lock:
            self.dropped += 1
        if not self._closed:  # full: perhaps because the writer's thread is held back
            self._check_age(item)

    def _reserve(self, nbytes: int) -> bool:
        """Room in the byte bound for a span holding ``nbytes`` of its own text."""
        with self._drop_lock:
            total = self._queued_bytes + nbytes
            if total > self.max_queue_bytes:
                self.dropped += 1
                return False
            self._queued_bytes = total
        if total > self.max_queue_bytes // 2:
            self._wake.set()
        return True

    def _check_age(self, item: Any) -> None:
        """Called every few hundred spans: if the oldest queued span ended more than a flush
        interval before ``item``, the writer's thread is behind; help it."""
        try:
            if item.end_ns - self._queue[0].end_ns > self.flush_interval_s * 1e9:
                self._catch_up()
        except Exception:  # emptied meanwhile, an item without end_ns: nothing to do
            pass

    def _catch_up(self) -> None:
        """The writer's thread falls behind when the application's threads hold the
        interpreter lock most of the time: spans then wait longer than a flush interval, and
        a crash would lose more than the bound says. This (producing) thread waits for the
        file, which hands the interpreter lock to the writer's thread, and then writes one
        chunk itself. Bounded: at most :data:`CATCH_UP_WAIT_S` of waiting and one chunk (a
        few ms); a writer that makes no progress meanwhile (a hung disk) is not waited for
        again during a flush interval."""
        if self._closed or time.monotonic() < self._no_help_until:
            return
        chunks = self._chunks
        if not self._io_lock.acquire(timeout=CATCH_UP_WAIT_S):
            if self._chunks == chunks:  # stuck in a write: do not hold the application up
                self._no_help_until = time.monotonic() + self.flush_interval_s
            return
        try:
            if self._write_chunk():
                self.caught_up += 1
        finally:
            self._io_lock.release()

    def _start_thread(self) -> None:
        with self._drop_lock:
            if not self._need_start:
                return
            self._need_start = False
            t = threading.Thread(target=self._run, name="agentscope-writer", daemon=True)
            self._thread = t
        try:
            contextvars.Context().run(t.start)  # the thread must not hold on to the caller's span
        except Exception as e:  # (no thread at interpreter exit): flush() still writes them
            _log_once("writer-thread", "agentscope: cannot start the writer thread (%r); spans "
                      "are written at flush and exit only", e)
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
        """Write everything queued so far. Returns False if the I/O lock was not had in time,
        or the spans could not all be handled. Never raises."""
        try:
            deadline = None if timeout is None else time.monotonic() + max(0.0, timeout)
            todo = len(self._queue)  # what is queued now: producers may keep adding
            while True:
                wait = -1 if deadline is None else max(0.0, deadline - time.monotonic())
                if not self._io_lock.acquire(timeout=wait):
                    return False
                try:
                    todo -= self._write_chunk()
                    if todo <= 0 or not self._queue:
                        self._write_stats()
                        return True
                finally:
                    self._io_lock.release()
        except Exception as e:  # never into the application (nor kill the writer's thread)
            _log_once("flush", "agentscope: error while writing spans (%r)", e)
            return False

    def _write_chunk(self) -> int:
        """Take up to one chunk of spans off the queue, encode and write them (the caller holds
        the I/O lock); how many were taken."""
        queue = self._queue
        lines: list = []
        size = freed = taken = 0
        while taken < CHUNK_SPANS and size < CHUNK_BYTES:
            try:
                item = queue.popleft()
            except IndexError:
                break
            taken += 1
            try:
                freed += item.nbytes
            except AttributeError:
                pass
            try:
                if type(item) is SpanRecord:
                    line = spanfile.encode(item)
                else:  # LeanSpan, or an SDK span waiting for conversion
                    line = item.encode(self)
            except Exception as e:  # a bad attribute must not stop the others
                self.write_errors += 1
                with self._drop_lock:
                    self.dropped += 1
                _log_once("encode", "agentscope: could not encode a span (%r); dropped", e)
                continue
            lines.append(line)
            size += len(line)
        if freed:
            with self._drop_lock:
                self._queued_bytes -= freed
        self._chunks += 1
        if lines:
            on_disk = self._write_spans(lines)
            self.written += on_disk
            if on_disk < len(lines):
                with self._drop_lock:
                    self.dropped += len(lines) - on_disk
        return taken

    def _write_spans(self, lines: list) -> int:
        """Append ``lines``; how many of them are on disk."""
        data = "".join(lines).encode("ascii", "backslashreplace")
        f = self._span_file
        if f is None or f.size + len(data) > self.max_file_bytes > 0 and f.size > 0:
            f = self._open_span_file()
        done = f.append(data)
        if f.error is not None:
            self.write_errors += 1
            _log_once("write", "agentscope: cannot write spans to %s (%s); the spans not "
                      "written are dropped and counted", self.directory, f.error)
        if f.reopened:
            f.reopened = 0
            _log_once("reopen", "agentscope: the trace file %s was removed while tracing; it "
                      "was made again", f.path)
        return len(lines) if done == len(data) else data.count(b"\n", 0, done)

    def _open_span_file(self) -> AppendFile:
        if self._span_file is not None:
            self._span_file.close()
            self._span_part += 1
        path = self.directory / spanfile.file_name(self.host, self.pid, self._file_ms,
                                                   self._span_part)
        self._span_file = AppendFile(path)
        self.span_files.append(path)
        return self._span_file

    def _write_stats(self) -> None:
        current = (self.written, self.dropped, self.write_errors)
        if current == self._stats_written or (self._stats_written is None and not any(current)):
            return
        now = time.time_ns()
        lines = "".join(
            samplefile.encode(SampleRecord(now, self.host, self.pid, SOURCE_CAPTURE, None,
                                           metric, value))
            for metric, value in zip(_STATS_METRICS, current)).encode("ascii", "backslashreplace")
        if self._sample_file is None:
            self._sample_file = AppendFile(
                self.directory / samplefile.file_name(self.host, self.pid, self._file_ms))
        f = self._sample_file
        if f.append(lines) == len(lines):
            self._stats_written = current
        elif f.error is not None:
            _log_once("stats", "agentscope: cannot write capture statistics (%s)", f.error)

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
        for f in (self._span_file, self._sample_file):
            if f is not None:
                f.close()

    def stats(self) -> dict:
        return {"queued": len(self._queue), "queued_bytes": self._queued_bytes,
                "written": self.written, "dropped": self.dropped,
                "write_errors": self.write_errors, "caught_up": self.caught_up,
                "files": [str(p) for p in self.span_files]}
