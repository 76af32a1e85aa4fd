"""Metrics and dashboards, checked against a real Prometheus (and a real Pushgateway): every
PromQL query of every dashboard panel must return data.

`.ci/run` installs Debian's `prometheus` and `prometheus-pushgateway`; without them the
server tests are skipped (the dashboard tests still run)."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from click.testing import CliRunner

from agentscope.cli import main
from agentscope.exporters import grafana, prometheus
from agentscope.formats import samplefile
from agentscope.records import SampleRecord

REPO = Path(__file__).resolve().parents[1]
SCENARIO = REPO / "sample_traces" / "queue" / "queue-behind-batch"
PROMETHEUS = shutil.which("prometheus")
PUSHGATEWAY = shutil.which("prometheus-pushgateway") or shutil.which("pushgateway")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str, timeout: float = 5) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read()


def _wait(what, timeout: float = 30, every: float = 0.2):
    end = time.monotonic() + timeout
    while True:
        try:
            got = what()
            if got:
                return got
        except OSError:
            pass
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(every)


@pytest.fixture(scope="module")
def trace_dir(tmp_path_factory):
    """The sample traces (50 tasks, with host counters; queue-behind-batch with its model
    server's vLLM metrics, scraped as it ran) plus a GPU's counters over the minutes of that
    recording. No GPU exists here: that series is written for this test (busy, then idle),
    in the collectors' own sample format, so that every panel has something to show."""
    d = tmp_path_factory.mktemp("served") / "trace"
    shutil.copytree(REPO / "sample_traces", d, ignore=shutil.ignore_patterns(".agentscope"))
    first = last = None
    for path in SCENARIO.glob("spans-*.jsonl"):
        for line in path.read_text().splitlines():
            span = json.loads(line)
            first = span["start_ns"] if first is None else min(first, span["start_ns"])
            last = span["end_ns"] if last is None else max(last, span["end_ns"])
    rows = []
    t = first - 1_000_000_000
    k = 0
    while t <= last + 1_000_000_000:
        busy = k % 10 < 4
        rows += [SampleRecord(t, "vm", None, "gpu.nvidia", "gpu0", "hw.gpu.utilization",
                              0.9 if busy else 0.0),
                 SampleRecord(t, "vm", None, "gpu.nvidia", "gpu0", "hw.gpu.memory.usage", 30e9),
                 SampleRecord(t, "vm", None, "gpu.nvidia", "gpu0", "hw.gpu.memory.limit", 80e9),
                 SampleRecord(t, "vm", None, "gpu.nvidia", "gpu0", "hw.gpu.power", 350.0)]
        t += 100_000_000
        k += 1
    (d / "samples-vm-1-1-gpu-fixture.jsonl").write_text(
        "".join(samplefile.encode(r) for r in rows))
    return d


# ---- the dashboards ---------------------------------------------------------------------------

def test_dashboards_validate_and_read_only_metrics_we_export(tmp_path):
    result = CliRunner().invoke(main, ["export", "grafana", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    names = prometheus.exported_names()
    boards = sorted((tmp_path / "dashboards").glob("*.json"))
    assert [b.stem for b in boards] == ["agentscope-fleet", "agentscope-hosts"]
    for board in boards:
        text = board.read_text()
        model = grafana.validate(text)  # the SDK's own model parses it back
        assert model.uid == board.stem and model.panels
        data = json.loads(text)
        for panel in data["panels"]:
            assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
            assert panel["targets"], panel["title"]
            for target in panel["targets"]:
                used = grafana.metrics_of(target["expr"])
                assert used and used <= names, (panel["title"], target["expr"], used - names)
    prov = (tmp_path / "provisioning" / "dashboards" / "agentscope.yaml").read_text()
    assert str((tmp_path / "dashboards").resolve()) in prov and "type: file" in prov


def test_fleet_dashboard_answers_the_fleet_questions():
    titles = " | ".join(t for t, _ in grafana.queries(grafana.to_json(grafana.build(
        "agentscope-fleet"))))
    for words in ("critical-path time goes", "GPU idle", "GPU sat idle", "Orchestration",
                  "Tasks per hour", "latency by lane"):
        assert words in titles


# ---- the metrics ------------------------------------------------------------------------------

def test_metrics_follow_prometheus_naming_and_carry_the_analysis(trace_dir):
    from prometheus_client import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    import agentscope

    with agentscope.analyze(trace_dir, db=":memory:") as analysis:
        text = generate_latest(prometheus.registry_for(analysis)).decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    samples = {s.name for f in families.values() for s in f.samples}
    assert samples <= prometheus.exported_names()
    for name in samples:
        assert name == name.lower() and "." not in name
    tasks = families["agentscope_tasks"].samples
    assert sum(s.value for s in tasks) == len(analysis.task_results) == 50
    assert {s.labels["bottleneck"] for s in tasks} == {t.bottleneck for t in analysis.task_results}
    # critical-path seconds add up to the tasks' durations
    path = sum(s.value for s in families["agentscope_critical_path_seconds"].samples)
    assert path == pytest.approx(sum(t.duration_ns for t in analysis.task_results) / 1e9, rel=1e-6)
    assert families["hw_gpu_utilization_ratio"].samples[0].labels["device"] == "gpu0"
    assert "agentscope_gpu_idle_ratio" in families  # the GPU counters joined the analysis
    # the model server's metrics are the ones recorded with queue-behind-batch (the model
    # server panels of the hosts dashboard read them)
    server = json.loads((SCENARIO / "scenario.json").read_text())["runs"][-1]["model_server"]
    for name in ("model_server_requests_running", "model_server_requests_waiting",
                 "model_server_kv_cache_usage_ratio"):
        got = families[name].samples
        assert got and {x.labels["device"] for x in got} == {urllib.parse.urlparse(server).netloc}


def _prometheus(tmp_path: Path, target: str, job: str, honor: bool = False):
    port = _free_port()
    (tmp_path / "prometheus.yml").write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        f"scrape_configs:\n  - job_name: {job}\n    honor_labels: {str(honor).lower()}\n"
        f"    static_configs:\n      - targets: ['{target}']\n")
    proc = subprocess.Popen([PROMETHEUS, f"--config.file={tmp_path / 'prometheus.yml'}",
                             f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                             f"--web.listen-address=127.0.0.1:{port}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return proc, f"http://127.0.0.1:{port}"


def _stop(*procs) -> None:
    for p in procs:
        if p is not None:
            p.terminate()
            p.wait(10)


def _query(base: str, expr: str) -> list:
    got = json.loads(_get(f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": expr})))
    assert got["status"] == "success", got
    return got["data"]["result"]


def _every_panel_returns_data(base: str) -> None:
    # counters need two scrapes for increase(); wait until the last panel query has data
    _wait(lambda: _query(base, "sum by (lane) (increase(agentscope_tasks_total[1h]))"),
          timeout=60)
    empty = []
    for uid in grafana.DASHBOARDS:
        for title, expr in grafana.queries(grafana.to_json(grafana.build(uid))):
            result = _query(base, expr)
            values = [r["value"][1] for r in result]
            if not result or all(v == "NaN" for v in values):
                empty.append(f"{uid}: {title}: {expr}")
    assert not empty, "panels without data:\n" + "\n".join(empty)


@pytest.mark.skipif(PROMETHEUS is None, reason="needs Debian's prometheus (.ci/run installs it)")
def test_a_real_prometheus_scrapes_serve_and_every_panel_has_data(trace_dir, tmp_path):
    serve = subprocess.Popen([sys.executable, "-m", "agentscope.cli", "serve", str(trace_dir),
                              "--port", "0", "--refresh", "1"],
                             stderr=subprocess.PIPE, text=True)
    prom = None
    try:
        line = serve.stderr.readline()
        assert "serving metrics of" in line and "127.0.0.1:" in line, line
        endpoint = line.strip().rsplit("http://", 1)[1].split("/")[0]
        text = _get(f"http://{endpoint}/metrics").decode()
        assert "agentscope_tasks_total{" in text
        prom, base = _prometheus(tmp_path, endpoint, "agentscope")
        _wait(lambda: _query(base, 'up{job="agentscope"} == 1'), timeout=60)
        _every_panel_returns_data(base)
    finally:
        _stop(prom, serve)


@pytest.mark.skipif(PROMETHEUS is None or PUSHGATEWAY is None,
                    reason="needs Debian's prometheus and prometheus-pushgateway")
def test_analyze_pushes_to_a_real_pushgateway_and_every_panel_has_data(trace_dir, tmp_path):
    port = _free_port()
    gateway = subprocess.Popen([PUSHGATEWAY, f"--web.listen-address=127.0.0.1:{port}"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    prom = None
    try:
        _wait(lambda: _get(f"http://127.0.0.1:{port}/-/ready"))
        result = subprocess.run(
            [sys.executable, "-m", "agentscope.cli", "analyze", str(trace_dir), "--db",
             str(tmp_path / "db.duckdb"), "--push-gateway", f"http://127.0.0.1:{port}"],
            capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, result.stderr
        assert "pushed the analysis" in result.stderr
        assert b'agentscope_tasks_total{' in _get(f"http://127.0.0.1:{port}/metrics")
        prom, base = _prometheus(tmp_path, f"127.0.0.1:{port}", "pushgateway", honor=True)
        _wait(lambda: _query(base, 'agentscope_tasks_total{job="agentscope"}'), timeout=60)
        _every_panel_returns_data(base)
    finally:
        _stop(prom, gateway)


def test_a_push_to_nowhere_is_an_error_after_the_report(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "agentscope.cli", "analyze", str(SCENARIO), "--db",
         str(tmp_path / "db.duckdb"), "--push-gateway", f"http://127.0.0.1:{_free_port()}"],
        capture_output=True, text=True, timeout=120)
    assert result.returncode == 1
    assert "could not push" in result.stderr
    assert "tasks" in result.stdout  # the report was still printed


def test_otlp_metrics_are_sent_as_protobuf_with_opentelemetry_names(trace_dir):
    """A local OTLP/HTTP receiver gets one ExportMetricsServiceRequest: the analysis's and the
    sampler's metrics under their OpenTelemetry names, values equal to the Prometheus ones."""
    import http.server
    import threading

    from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import \
        ExportMetricsServiceRequest

    got = []

    class Receiver(http.server.BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802
            body = self.rfile.read(int(self.headers["Content-Length"]))
            got.append((self.path, self.headers["Content-Type"], self.headers.get("X-Key"),
                        body))
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{httpd.server_port}/v1/metrics"
        result = CliRunner().invoke(main, ["export", "otlp-metrics", str(trace_dir),
                                           "--endpoint", url, "--header", "X-Key=secret",
                                           "--db", str(trace_dir.parent / "otlp.duckdb")])
        assert result.exit_code == 0, result.output
    finally:
        httpd.shutdown()
    (path, ctype, key, body), = got
    assert path == "/v1/metrics" and ctype == "application/x-protobuf" and key == "secret"
    req = ExportMetricsServiceRequest.FromString(body)
    metrics = {m.name: m for m in req.resource_metrics[0].scope_metrics[0].metrics}
    tasks = metrics["agentscope.tasks"]
    assert tasks.unit == "{task}" and tasks.sum.is_monotonic
    assert sum(p.as_double for p in tasks.sum.data_points) == 50
    hist = metrics["agentscope.task.duration"].histogram.data_points
    assert sum(p.count for p in hist) == 50
    for p in hist:
        assert sum(p.bucket_counts) == p.count and len(p.bucket_counts) == len(
            p.explicit_bounds) + 1
    assert metrics["hw.gpu.utilization"].unit == "1"
    assert metrics["system.memory.usage"].unit == "By"
    assert {kv.key for kv in metrics["agentscope.critical_path"].sum.data_points[0].attributes} \
        == {"class", "lane", "task"}


def test_otlp_metrics_to_nowhere_fails_clearly(trace_dir):
    result = CliRunner().invoke(main, ["export", "otlp-metrics", str(trace_dir), "--endpoint",
                                       f"http://127.0.0.1:{_free_port()}/v1/metrics", "--db",
                                       str(trace_dir.parent / "otlp2.duckdb")])
    assert result.exit_code == 1 and "could not send" in result.output


def test_serve_picks_up_what_was_appended(trace_dir, tmp_path):
    """The collector analyses again at a scrape when files changed (and --refresh passed)."""
    from agentscope.exporters.prometheus import TraceDirCollector

    d = tmp_path / "growing"
    shutil.copytree(SCENARIO, d, ignore=shutil.ignore_patterns(".agentscope", "*.duckdb"))
    collector = TraceDirCollector(str(d), str(tmp_path / "db.duckdb"), refresh_s=0.0)

    def tasks():
        fam = next(f for f in collector.collect() if f.name == "agentscope_tasks")
        return sum(s.value for s in fam.samples)

    assert tasks() == 3 and collector.refreshes == 1
    assert tasks() == 3 and collector.refreshes == 1  # nothing new: not analysed again
    other = REPO / "sample_traces" / "io" / "io-db"
    for f in other.glob("spans-*.jsonl"):
        shutil.copy(f, d / f.name)
    assert tasks() == 5 and collector.refreshes == 2


def test_serve_keeps_serving_the_last_result_when_an_analysis_fails(trace_dir, tmp_path,
                                                                     monkeypatch):
    from agentscope.exporters.prometheus import TraceDirCollector

    collector = TraceDirCollector(str(trace_dir), str(tmp_path / "db.duckdb"), refresh_s=0.0)
    first = {f.name for f in collector.collect()}
    assert "agentscope_tasks" in first

    def locked():
        raise OSError("Could not set lock on file")

    monkeypatch.setattr(collector, "refresh", locked)
    monkeypatch.setattr(collector, "_seen", None)  # as if files changed
    again = {f.name: f for f in collector.collect()}
    assert set(again) == first  # the last good result
    assert again["agentscope_refresh_failures"].samples[0].value == 1
