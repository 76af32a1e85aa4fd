"""The span writer: crash safety, torn lines, several processes, bounded queue, fork."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import subprocess
import textwrap
import time

import pytest

import agentscope
from agentscope.capture.writer import SpanFileWriter
from agentscope.formats import spanfile
from agentscope.records import SpanRecord
from agentscope.store.tracedir import scan

from .conftest import PYTHON, child_env, read_spans

T0 = 1_700_000_000_000_000_000

WRITER = textwrap.dedent("""
    import sys, time, agentscope
    agentscope.init(sys.argv[1], flush_interval_s=0.2)
    mode = sys.argv[2]
    if mode == "burst":
        for i in range(1000):
            with agentscope.stage("tool", name="s", seq=i):
                pass
        print("ended", flush=True)
        time.sleep(60)
    else:  # stream: spans without end until killed
        i = 0
        while True:
            with agentscope.stage("tool", name="s", seq=i):
                pass
            i += 1
            if i % 200 == 0:
                time.sleep(0.001)
""")


def _spawn(tmp_path, mode):
    return subprocess.Popen([PYTHON, "-c", WRITER, str(tmp_path), mode], stdout=subprocess.PIPE,
                            text=True, env=child_env())


def test_sigkill_after_a_flush_interval_loses_nothing(tmp_path):
    proc = _spawn(tmp_path, "burst")
    try:
        assert proc.stdout.readline().strip() == "ended"
        time.sleep(0.6)  # > flush interval
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    result = scan(tmp_path)
    assert not result.problems
    assert sorted(s.attrs["agentscope.seq"] for s in result.spans) == list(range(1000))


def test_sigkill_mid_stream_leaves_a_loadable_prefix(tmp_path):
    proc = _spawn(tmp_path, "stream")
    time.sleep(1.5)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    result = scan(tmp_path)
    assert all(p.torn for p in result.problems)  # at most a torn last line
    assert len(result.problems) <= 1
    seqs = sorted(s.attrs["agentscope.seq"] for s in result.spans)
    assert len(seqs) > 100
    assert seqs == list(range(len(seqs)))  # nothing lost before the last flush


def test_torn_and_bad_lines_are_reported_with_file_and_line(tmp_path):
    good = SpanRecord("1" * 32, "2" * 16, None, "ok", "tool", "internal", T0 + 1, T0 + 2, "unset", None,
                      "svc", "h", 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, {})
    path = tmp_path / "spans-h-1-1.jsonl"
    bad_end = good._replace(span_id="3" * 16, start_ns=T0 + 5, end_ns=T0 + 4)
    path.write_text(spanfile.encode(good) + "{not json\n" + spanfile.encode(bad_end)
                    + spanfile.encode(good._replace(span_id="4" * 16))[:40])
    result = scan(tmp_path)
    assert [s.span_id for s in result.spans] == ["2" * 16]
    reasons = [(p.line, p.torn, p.reason.split(" (")[0].split(";")[0]) for p in result.problems]
    assert reasons[0] == (2, False, "not valid JSON")
    assert reasons[1][:2] == (3, False) and "before start_ns" in result.problems[1].reason
    assert result.problems[1].span_id == "3" * 16
    assert reasons[2][:2] == (4, True)
    assert str(result.problems[0]).startswith(f"{path}:2: ")


def test_several_processes_share_one_directory(tmp_path):
    code = textwrap.dedent("""
        import sys, agentscope
        agentscope.init(sys.argv[1], service="p" + sys.argv[2])
        for i in range(500):
            with agentscope.stage("tool", name="w", seq=i):
                pass
    """)
    procs = [subprocess.Popen([PYTHON, "-c", code, str(tmp_path), str(n)], env=child_env())
             for n in range(4)]
    assert [p.wait() for p in procs] == [0, 0, 0, 0]
    result = scan(tmp_path)
    assert not result.problems
    assert len(result.spans) == 2000
    assert len([f for f in result.files if f.kind == "spans"]) == 4
    assert {s.service for s in result.spans} == {"p0", "p1", "p2", "p3"}


def test_bounded_queue_drops_new_spans_and_records_the_count(tmp_path):
    writer = SpanFileWriter(tmp_path, service="s", flush_interval_s=3600, max_queue=10)
    writer.wake_at = None
    rec = SpanRecord("1" * 32, "2" * 16, None, "x", "tool", "internal", T0 + 1, T0 + 2, "unset", None,
                     None, None, None, None, None, None, None, None, None, None, None, None, {})
    for i in range(100):
        writer.submit(rec._replace(span_id=f"{i + 1:016x}"))
    assert writer.dropped == 90
    writer.shutdown()
    result = scan(tmp_path)
    assert [int(s.span_id, 16) for s in result.spans] == list(range(1, 11))  # oldest kept
    latest = {s.metric: s.value for s in result.samples}
    assert latest["agentscope.capture.spans_dropped"] == 90
    assert latest["agentscope.capture.spans_written"] == 10
    writer.submit(rec)  # after shutdown: counted, not raised
    assert writer.dropped == 91


def test_unwritable_directory_counts_errors_without_raising(tmp_path):
    writer = SpanFileWriter(tmp_path / "d", service="s", flush_interval_s=3600)
    rec = SpanRecord("1" * 32, "2" * 16, None, "x", "tool", "internal", T0 + 1, T0 + 2, "unset", None,
                     None, None, None, None, None, None, None, None, None, None, None, None, {})
    os.rmdir(tmp_path / "d")
    (tmp_path / "d").write_text("a file where the directory was")
    writer.submit(rec)
    writer.flush()
    assert writer.write_errors >= 1 and writer.dropped == 1
    writer.shutdown()


def test_file_rotation_keeps_every_span(tmp_path):
    writer = SpanFileWriter(tmp_path, service="s", flush_interval_s=3600, max_file_bytes=4096)
    rec = SpanRecord("1" * 32, "2" * 16, None, "x" * 100, "tool", "internal", T0 + 1, T0 + 2, "unset",
                     None, None, None, None, None, None, None, None, None, None, None, None, None,
                     {})
    for i in range(200):
        writer.submit(rec._replace(span_id=f"{i + 1:016x}"))
        if i % 20 == 19:
            writer.flush()
    writer.shutdown()
    result = scan(tmp_path)
    assert len(result.spans) == 200 and not result.problems
    assert len([f for f in result.files if f.kind == "spans"]) > 3


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_forked_child_writes_its_own_file(trace_dir):
    with agentscope.stage("tool", name="before-fork"):
        pass  # queued in the parent, not yet flushed
    pid = os.fork()
    if pid == 0:  # child
        try:
            with agentscope.stage("tool", name="in-child"):
                pass
            agentscope.shutdown()
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    spans = read_spans(trace_dir)
    names = sorted(s.name for s in spans)
    assert names == ["before-fork", "in-child"]  # nothing written twice
    child = next(s for s in spans if s.name == "in-child")
    assert child.pid == pid


def _mp_worker(n):
    with agentscope.stage("tool", name=f"mp-{n}"):
        return n * n


def test_multiprocessing_pool_workers_write_their_spans(trace_dir):
    """Pool workers are SIGTERMed by Pool.__exit__: no exit handler runs there."""
    from agentscope.capture import state
    state.active.writer.flush_interval_s = 3600  # only the fork path can write them in time
    ctx = multiprocessing.get_context("fork")
    with agentscope.task(name="mp-task"):
        with ctx.Pool(2) as pool:
            assert pool.map(_mp_worker, range(4)) == [0, 1, 4, 9]
    spans = read_spans(trace_dir)
    task = next(s for s in spans if s.name == "mp-task")
    workers = [s for s in spans if s.name.startswith("mp-") and s.name != "mp-task"]
    assert sorted(s.name for s in workers) == ["mp-0", "mp-1", "mp-2", "mp-3"]
    assert {s.parent_span_id for s in workers} == {task.span_id}


def test_spans_of_a_process_exiting_normally_are_written_at_exit(tmp_path):
    code = "import agentscope; agentscope.init(); agentscope.stage('tool', name='x')(int)()"
    subprocess.run([PYTHON, "-c", code], check=True,
                   env=child_env(AGENTSCOPE_TRACE_DIR=str(tmp_path),
                                 AGENTSCOPE_FLUSH_INTERVAL="3600"))
    assert [s.name for s in scan(tmp_path).spans] == ["x"]
    lines = [json.loads(x) for p in tmp_path.glob("samples-*.jsonl") for x in p.read_text().split("\n") if x]
    assert {x["metric"] for x in lines} >= {"agentscope.capture.spans_dropped"}


def test_multiprocessing_fork_process_flushes_through_its_finalizer(trace_dir):
    from agentscope.capture import state
    state.active.writer.flush_interval_s = 3600  # only the exit path can write the child's span
    ctx = multiprocessing.get_context("fork")
    p = ctx.Process(target=_mp_worker, args=(7,))
    p.start()
    p.join(10)
    assert p.exitcode == 0
    assert [s.name for s in read_spans(trace_dir)] == ["mp-7"]
