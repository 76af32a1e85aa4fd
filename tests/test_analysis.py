"""Verdicts on real instrumented runs whose bottleneck is known by construction, and the JSON
report of ARCHITECTURE §7."""

from __future__ import annotations

import concurrent.futures
import http.server
import subprocess
import sys
import threading
import time

import pytest

import agentscope

BURN = "import time\nt=time.process_time()\nwhile time.process_time()-t<{s}: pass\n"


def spin(seconds):
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


class _Slow(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802
        time.sleep(0.3)
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def analysed(tmp_path_factory):
    """Run every scenario once, traced into one directory with the in-process sampler on (on
    a loaded machine, the counters are what tell a computing task that waited for a CPU from
    one that waited on I/O), then load and analyse it."""
    d = tmp_path_factory.mktemp("scenarios")
    agentscope.init(d, service="scenarios", flush_interval_s=0.1, collect=True)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Slow)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_port}/"
    try:
        _run_scenarios(url)
    finally:
        server.shutdown()
        agentscope.shutdown()
    with agentscope.analyze(d, db=":memory:") as analysis:
        tasks = {t.name: t for t in analysis.task_results}
        yield tasks, analysis


def _run_scenarios(url):
    import urllib.request

    with agentscope.task(name="cpu-subprocess-tool"):
        with agentscope.stage("context", name="prompt"):
            spin(0.02)
        with agentscope.stage("tool", name="compile"):
            subprocess.run([sys.executable, "-c", BURN.format(s=0.5)], check=True)

    with agentscope.task(name="io-slow-http"):
        with agentscope.stage("tool", name="fetch"):
            for _ in range(2):
                urllib.request.urlopen(url, timeout=5).read()

    with agentscope.task(name="cpu-inference-in-process"):  # a model run on the CPU
        with agentscope.stage("inference", name="local-forward", model="tiny"):
            spin(0.4)

    with agentscope.task(name="tool-labelled-compute-that-sleeps"):
        with agentscope.stage("tool", name="heavy-compute"):
            time.sleep(0.4)

    with agentscope.task(name="inference-queued-on-server"):
        with agentscope.stage("inference", name="chat", model="m", server_address="10.0.0.9"):
            time.sleep(0.4)
            agentscope.annotate(time_in_queue=0.35, time_in_model_decode=0.04)

    worker = threading.Semaphore(1)

    def queued_task(i):
        with agentscope.task(name=f"queued-{i}", lane="batch"):
            with agentscope.stage("queue", name="wait-for-worker"):
                worker.acquire()
            try:
                with agentscope.stage("tool", name="work"):
                    spin(0.15)
            finally:
                worker.release()

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        list(pool.map(queued_task, range(4)))


def test_verdicts_follow_the_evidence(analysed):
    tasks, analysis = analysed
    assert not analysis.problems
    expected = {
        "cpu-subprocess-tool": "cpu",
        "io-slow-http": "io",
        "cpu-inference-in-process": "cpu",
        "tool-labelled-compute-that-sleeps": "io",
        "inference-queued-on-server": "queue",
    }
    for name, cls in expected.items():
        t = tasks[name]
        assert t.bottleneck == cls, (name, t.shares, t.evidence)
        assert t.shares[cls] > 0.6, (name, t.shares)
        assert t.confidence >= 0.5
    # the single worker: the last tasks waited longest; most of the fleet queued
    queued = sorted((tasks[f"queued-{i}"] for i in range(4)), key=lambda t: t.duration_ns)
    assert queued[0].bottleneck == "cpu"  # the first one got the worker at once
    assert all(t.bottleneck == "queue" for t in queued[2:]), [t.shares for t in queued]


def test_evidence_names_spans_and_measurements(analysed):
    tasks, *_ = analysed
    compile_ = tasks["cpu-subprocess-tool"].evidence[0]
    assert compile_.startswith("compile (tool)") and "child processes" in compile_
    assert "on-CPU" in tasks["io-slow-http"].evidence[0]
    assert "server queue 0.35 s" in tasks["inference-queued-on-server"].evidence[0]


def test_shares_and_critical_path_are_consistent(analysed):
    tasks, analysis, *_ = analysed
    for t in tasks.values():
        assert abs(sum(t.shares.values()) - 1) < 1e-6, t.shares
        segs = t.segments
        assert segs[0].start_ns == t.start_ns and segs[-1].end_ns == t.start_ns + t.duration_ns
        assert all(a.end_ns == b.start_ns for a, b in zip(segs, segs[1:]))
    s = analysis.summary
    assert s.tasks == len(tasks) == 9
    assert abs(sum(s.share_of_critical_path.values()) - 1) < 1e-3
    assert set(s.bottlenecks) <= {"cpu", "io", "queue", "gpu", "memory"}


def test_json_report_follows_the_contract(analysed):
    tasks, analysis = analysed
    doc = analysis.to_dict()
    assert doc["schema"] == "agentscope.analysis/v1"
    t = next(x for x in doc["tasks"] if x["name"] == "cpu-subprocess-tool")
    assert set(t) >= {"trace_id", "name", "lane", "start", "duration_s", "bottleneck",
                      "confidence", "shares", "evidence", "critical_path"}
    assert t["lane"] == "online" and t["start"].endswith("Z")
    assert set(t["shares"]) == {"gpu", "cpu", "memory", "io", "queue", "untraced"}
    assert t["shares"]["untraced"] == 0 and t["measured_share"] == 1.0  # all measured
    assert doc["summary"]["measured_share"] == 1.0
    assert {s["basis"] for s in t["critical_path"]} == {"measured"}
    path = t["critical_path"]
    assert path[0]["start_s"] == 0 and abs(path[-1]["end_s"] - t["duration_s"]) < 1e-6
    for a, b in zip(path, path[1:]):
        assert a["end_s"] == b["start_s"]
    assert {"span_id", "name", "stage", "start_s", "end_s", "class"} <= set(path[0])
    assert doc["summary"]["tasks"] == 9


def test_tasks_and_critical_path_views(analysed):
    tasks, analysis = analysed
    rows = dict(analysis.query_rows("SELECT name, bottleneck FROM tasks")[1])
    assert rows["io-slow-http"] == "io" and len(rows) == len(tasks)
    path = analysis.query_rows(
        "SELECT c.name, c.class, c.start_s, c.end_s FROM critical_path c JOIN tasks USING (trace_id) "
        "WHERE tasks.name = 'cpu-subprocess-tool' ORDER BY c.seq")[1]
    t = tasks["cpu-subprocess-tool"]
    assert [(r[0], r[1]) for r in path] == [(s.name, s.cls) for s in t.segments]
    assert path[0][2] == 0 and abs(path[-1][3] - t.duration_ns / 1e9) < 1e-6
