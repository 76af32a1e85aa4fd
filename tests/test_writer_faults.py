"""The span writer under faults: a full disk, a removed directory, large spans, a starved
thread. The counts must say what is on disk: spans counted written are in the files, the
others are counted dropped, and no line is torn in the middle of a file."""

from __future__ import annotations

import errno
import json
import os
import shutil
import time

import pytest

import agentscope
from agentscope import _log
from agentscope.capture import appendfile, attributes, state
from agentscope.capture.writer import CHUNK_BYTES, SpanFileWriter
from agentscope.records import SpanRecord
from agentscope.store.tracedir import scan

T0 = 1_700_000_000_000_000_000


@pytest.fixture(autouse=True)
def fresh_warnings(monkeypatch):
    """Warnings are said once per process: leave the process's record as it was."""
    monkeypatch.setattr(_log, "_seen", set())


def record(i: int, end_ns: int = T0 + 2, name: str = "x") -> SpanRecord:
    return SpanRecord("1" * 32, f"{i + 1:016x}", None, name, "tool", "internal", T0 + 1,
                      end_ns, "unset", None, None, None, None, None, None, None, None, None,
                      None, None, None, None, {})


def quiet_writer(directory, **kw) -> SpanFileWriter:
    """A writer whose thread never runs: only explicit flushes (and producers) write."""
    w = SpanFileWriter(directory, service="s", flush_interval_s=3600, **kw)
    w.wake_at = None
    w._need_start = False
    return w


def lines_on_disk(directory) -> list:
    """Every span line of the directory's span files, parsed; a torn line fails."""
    out = []
    for path in sorted(directory.glob("spans-*.jsonl")):
        data = path.read_bytes()
        assert not data or data.endswith(b"\n"), f"{path} ends in a torn line"
        out += [json.loads(x) for x in data.splitlines() if x.strip()]
    return out


class DiskFills:
    """``os.write`` that writes ``room`` more bytes, then fails with ENOSPC (as a full disk
    does: a short write, then the error)."""

    def __init__(self, room: int) -> None:
        self.room = room
        self.real = os.write

    def __call__(self, fd, data):
        if self.room <= 0:
            raise OSError(errno.ENOSPC, "No space left on device")
        n = self.real(fd, bytes(data[:self.room]))
        self.room -= n
        return n


@pytest.mark.parametrize("room", [0, 1, 150, 900, 2500])
def test_a_full_disk_leaves_whole_lines_and_honest_counts(tmp_path, monkeypatch, room):
    w = quiet_writer(tmp_path)
    for i in range(3):  # some spans already on disk
        w.submit(record(i))
    w.flush()
    monkeypatch.setattr(appendfile.os, "write", DiskFills(room))
    for i in range(3, 23):
        w.submit(record(i))
    w.flush()
    on_disk = lines_on_disk(tmp_path)
    assert w.written == len(on_disk) and w.dropped == 23 - len(on_disk)
    assert w.write_errors >= 1
    monkeypatch.undo()  # space again: the next lines follow whole lines
    for i in range(23, 30):
        w.submit(record(i))
    w.shutdown()
    on_disk = lines_on_disk(tmp_path)
    assert w.written == len(on_disk) and w.written + w.dropped == 30
    assert len({s["span_id"] for s in on_disk}) == len(on_disk)
    result = scan(tmp_path)
    assert not result.problems
    latest = {s.metric: s.value for s in result.samples}
    assert latest["agentscope.capture.spans_written"] == w.written
    assert latest["agentscope.capture.spans_dropped"] == w.dropped


def test_a_torn_piece_that_cannot_be_cut_stays_one_bad_line(tmp_path, monkeypatch):
    w = quiet_writer(tmp_path)
    monkeypatch.setattr(appendfile.os, "write", DiskFills(700))

    def no_truncate(fd, size):
        raise OSError(errno.EPERM, "not permitted")

    monkeypatch.setattr(appendfile.os, "ftruncate", no_truncate)
    for i in range(10):
        w.submit(record(i))
    w.flush()
    written_while_full = w.written
    monkeypatch.undo()
    for i in range(10, 15):
        w.submit(record(i))
    w.flush()
    result = scan(tmp_path)
    # the torn piece is one bad line of its own, the good lines after it all load
    assert len(result.problems) == 1 and not result.problems[0].torn
    assert len(result.spans) == written_while_full + 5 == w.written
    w.shutdown()


def test_a_removed_trace_directory_is_made_again(tmp_path):
    directory = tmp_path / "traces"
    w = quiet_writer(directory)
    for i in range(5):
        w.submit(record(i))
    w.flush()
    shutil.rmtree(directory)  # an operator cleaning up while the program runs
    for i in range(5, 9):
        w.submit(record(i))
    w.flush()
    assert directory.is_dir()
    assert sorted(int(s["span_id"], 16) - 1 for s in lines_on_disk(directory)) == [5, 6, 7, 8]
    assert w.written == 9 and w.dropped == 0  # the first 5 were on disk when deleted
    w.shutdown()
    latest = {s.metric: s.value for s in scan(directory).samples}
    assert latest["agentscope.capture.spans_written"] == 9


def test_a_file_removed_during_the_write_is_written_again(tmp_path, monkeypatch):
    w = quiet_writer(tmp_path)
    real = os.write
    removed = []

    def write_then_remove(fd, data):
        n = real(fd, data)
        if not removed:
            removed.append(1)
            for p in tmp_path.glob("spans-*"):
                p.unlink()
        return n

    monkeypatch.setattr(appendfile.os, "write", write_then_remove)
    for i in range(4):
        w.submit(record(i))
    w.flush()
    assert len(lines_on_disk(tmp_path)) == 4 and w.written == 4 and w.dropped == 0
    w.shutdown()


def test_a_directory_replaced_by_a_file_drops_and_counts(tmp_path):
    directory = tmp_path / "traces"
    w = quiet_writer(directory)
    w.submit(record(0))
    w.flush()
    shutil.rmtree(directory)
    directory.write_text("a file where the directory was")
    for i in range(1, 4):
        w.submit(record(i))
    w.flush()
    assert w.written == 1 and w.dropped == 3 and w.write_errors >= 1
    w.shutdown()


def test_the_queue_is_bounded_by_bytes_too(tmp_path):
    w = quiet_writer(tmp_path, max_queue_bytes=1 << 20)

    class Big:
        def __init__(self, i):
            self.nbytes = 300_000
            self.end_ns = T0 + 2
            self.i = i

        def encode(self, writer):
            return json.dumps({"i": self.i}) + "\n"

    for i in range(10):
        w.submit(Big(i))
    assert len(w._queue) == 3 and w.dropped == 7  # 3 x 300 kB fit in 1 MiB
    w.flush()
    assert w._queued_bytes == 0 and w.written == 3
    w.submit(Big(10))
    assert len(w._queue) == 1  # room again
    w.shutdown()


def test_large_attributes_are_cut_and_counted_against_the_byte_bound(tmp_path):
    rt = agentscope.init(tmp_path, flush_interval_s=3600)
    payload = "p" * 100_000
    with agentscope.stage("tool", name="big"):
        agentscope.annotate(prompt=payload, tags=[payload] * 3)
    queued = list(rt.writer._queue)
    assert queued[0].nbytes >= 4 * attributes.VALUE_LIMIT
    assert rt.writer._queued_bytes == queued[0].nbytes
    agentscope.shutdown()
    (span,) = scan(tmp_path).spans
    assert span.attrs["agentscope.prompt"] == "p" * attributes.VALUE_LIMIT
    assert span.attrs["agentscope.tags"] == ["p" * attributes.VALUE_LIMIT] * 3


def test_sdk_spans_count_their_attributes_and_events_against_the_byte_bound(tmp_path):
    """In SDK mode the span's text is counted on the application's thread (read from the SDK
    span's own mapping, not its copying properties): its attributes and its events'."""
    from opentelemetry.sdk.trace import TracerProvider

    rt = agentscope.init(tmp_path, flush_interval_s=3600, tracer_provider=TracerProvider())
    assert rt.mode == "sdk"
    rt.writer._need_start = False  # no writer thread: the queue as the spans left it
    with agentscope.stage("tool", name="big") as span:
        span.set_attribute("prompt", "p" * 30_000)
        span.set_attribute("tags", ("t" * 1000, "u" * 2000))
        span.add_event("chunk", {"text": "e" * 5_000})
    (queued,) = rt.writer._queue
    assert 38_000 <= queued.nbytes < 38_200  # the strings, the tool name, nothing twice
    assert rt.writer._queued_bytes == queued.nbytes
    agentscope.shutdown()
    (span,) = scan(tmp_path).spans
    assert span.attrs["prompt"] == "p" * attributes.VALUE_LIMIT
    assert span.events[0].attrs["text"] == "e" * 5_000


def test_writes_are_chunked_so_memory_stays_bounded(tmp_path, monkeypatch):
    w = quiet_writer(tmp_path)
    sizes = []
    real = os.write

    def spy(fd, data):
        sizes.append(len(data))
        return real(fd, data)

    monkeypatch.setattr(appendfile.os, "write", spy)
    big = "y" * 10_000
    for i in range(2000):
        w.submit(record(i, name=big))
    w.flush()
    assert len(lines_on_disk(tmp_path)) == 2000 == w.written
    assert len(sizes) > 1 and max(sizes) <= CHUNK_BYTES + 11_000
    w.shutdown()


def test_a_starved_writer_thread_is_helped_by_the_producers(tmp_path):
    """The writer's thread never runs here (as when the application's threads hold the
    interpreter lock): once the queue holds spans older than a flush interval, producers
    write chunks themselves, so a crash loses at most about one interval of spans."""
    w = quiet_writer(tmp_path)
    w.flush_interval_s = 1.0
    old = T0
    for i in range(300):  # a backlog that ended long ago ...
        w.submit(record(i, end_ns=old + i))
    assert w.written == 0
    for i in range(300, 1100):  # ... and producers still producing, 2 s later
        w.submit(record(i, end_ns=old + 2_000_000_000 + i))
    assert w.caught_up >= 1 and w.written >= 300
    on_disk = {int(s["span_id"], 16) - 1 for s in lines_on_disk(tmp_path)}
    assert set(range(300)) <= on_disk  # the oldest went first
    w.shutdown()
    assert w.written == 1100 and w.dropped == 0


def test_a_full_queue_of_old_spans_is_helped_too(tmp_path):
    w = quiet_writer(tmp_path, max_queue=64)
    for i in range(64):
        w.submit(record(i, end_ns=T0 + i))
    w.submit(record(64, end_ns=T0 + 5_000_000_000_000))  # full, and the oldest is old
    assert w.dropped == 1 and w.written == 64
    w.shutdown()


def test_an_encoding_failure_is_counted_dropped(tmp_path):
    w = quiet_writer(tmp_path)

    class Unencodable:
        nbytes = 0
        end_ns = T0

        def encode(self, writer):
            raise ValueError("cannot")

    w.submit(record(0))
    w.submit(Unencodable())
    assert w.flush() is True
    assert w.written == 1 and w.dropped == 1 and w.write_errors == 1
    w.shutdown()


def test_an_infinite_flush_interval_keeps_the_writer_alive(tmp_path, monkeypatch):
    monkeypatch.setenv("AGENTSCOPE_FLUSH_INTERVAL", "inf")
    rt = agentscope.init(tmp_path)
    assert rt.writer.flush_interval_s == 1.0
    with agentscope.task(name="t"):
        pass
    deadline = time.monotonic() + 30
    while rt.writer.written == 0 and time.monotonic() < deadline:  # written by the thread
        time.sleep(0.05)
    assert rt.writer.written == 1 and rt.writer._thread.is_alive()


def test_flush_never_raises(tmp_path, monkeypatch):
    rt = agentscope.init(tmp_path, flush_interval_s=3600)
    with agentscope.task(name="t"):
        pass

    def broken(*a, **k):
        raise RuntimeError("bug")

    monkeypatch.setattr(rt.writer, "_write_chunk", broken)
    assert agentscope.flush() is False
    assert agentscope.flush(float("nan")) is False
    monkeypatch.undo()
    assert agentscope.flush(float("inf")) is True
    assert state.active.writer.written == 1


def test_large_attribute_values_are_neither_memoized_nor_cached(tmp_path):
    """A `with stage(..., payload=...)` per call with a large, different value each time: the
    values are held by their spans only (counted against the byte bound), not by a memo."""
    from agentscope.capture import instrument

    rt = agentscope.init(tmp_path, flush_interval_s=3600, max_queue=100_000)
    rt.writer.max_queue_bytes = 1 << 20
    rt.writer._need_start = False  # no writer thread: the queue as the spans left it
    for i in range(200):
        with agentscope.stage("tool", name="big", payload=f"{i:06d}" + "z" * 50_000):
            pass
    assert not [v for key in instrument._attributes_cache for _, _, v in key[2]
                if type(v) is str and len(v) > 4096]  # (the memo keeps none of them)
    assert rt.writer._queued_bytes <= rt.writer.max_queue_bytes
    assert rt.writer.dropped == 200 - len(rt.writer._queue) > 100  # beyond 1 MiB: dropped
    agentscope.shutdown()
    spans = scan(tmp_path).spans
    assert len(spans) == rt.writer.written
    assert all(len(s.attrs["agentscope.payload"]) == attributes.VALUE_LIMIT for s in spans)
