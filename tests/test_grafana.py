"""Metrics and dashboards, checked against a real Prometheus (and a real Pushgateway): every
PromQL query of every dashboard panel must return data, with the dashboards' variables
(service, lane, host) at "All", and return only the chosen series with a value picked.

`.ci/run` installs Debian's `prometheus` and `prometheus-pushgateway`; without them the
server tests are skipped (the dashboard tests still run)."""

from __future__ import annotations

import json
import re
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
OTHER_HOST = "gpu-box"  # the fixture's second host
VARIABLES = ("service", "lane", "host")


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
    in the collectors' own sample format, so that every panel has something to show. A second
    host, gpu-box, with a GPU always busy and its CPU counters, gives the host variable two
    values to tell apart."""
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
    rows = []
    for t in range(first - 1_000_000_000, last + 1_000_000_001, 100_000_000):
        rows += [SampleRecord(t, OTHER_HOST, None, "gpu.nvidia", "gpu0", metric, value)
                 for metric, value in (("hw.gpu.utilization", 0.95),
                                       ("hw.gpu.memory.usage", 60e9),
                                       ("hw.gpu.memory.limit", 80e9), ("hw.gpu.power", 600.0))]
        rows += [SampleRecord(t, OTHER_HOST, None, "host.cpu", None, metric, value)
                 for metric, value in (("system.cpu.utilization", 0.5),
                                       ("system.cpu.run_queue", 4.0),
                                       ("system.cpu.logical.count", 8.0))]
    (d / f"samples-{OTHER_HOST}-1-1-fixture.jsonl").write_text(
        "".join(samplefile.encode(r) for r in rows))
    return d


@pytest.fixture(scope="module")
def tasks(trace_dir):
    """What the dashboards' figures are checked against: (service, lane, duration s,
    orchestration s) of each task of ``trace_dir``."""
    import agentscope

    with agentscope.analyze(trace_dir, db=":memory:") as analysis:
        return [(t.service, t.lane, t.duration_ns / 1e9, t.orchestration_ns / 1e9)
                for t in analysis.task_results]


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


def test_each_dashboard_has_service_lane_and_host_variables():
    for uid, (_, _, hidden) in grafana.DASHBOARDS.items():
        text = grafana.to_json(grafana.build(uid))
        found = grafana.variables(text)
        assert list(found) == ["datasource", *VARIABLES], uid
        for name in VARIABLES:
            v = found[name]
            assert v["type"] == "query" and v["datasource"] == {"type": "prometheus",
                                                                "uid": "${datasource}"}
            assert v["multi"] and v["includeAll"] and v["allValue"] == ".*"
            assert v["current"]["value"] == ["$__all"]
            assert re.fullmatch(r"label_values\((.+), " + name + r"\)", v["query"]), v["query"]
            # shown where a panel reads a series of it; hidden (and carried by the links) else
            assert v["hide"] == (2 if name in hidden else 0), (uid, name)
            assert (name in hidden) == all(f'${name}"' not in e for _, e in grafana.queries(text))
        link, = json.loads(text)["links"]
        assert link["type"] == "dashboards" and link["tags"] == ["agentscope"]
        assert link["includeVars"] and link["keepTime"]


SELECTOR = re.compile(grafana.METRIC.pattern + r"(\{[^}]*\})?")


def test_every_series_a_panel_reads_is_filtered_by_the_variables_of_its_labels(trace_dir):
    """Each metric a panel reads is selected with ``=~"$service"``, ``=~"$lane"`` and
    ``=~"$host"`` for each of those labels it carries, and for no other; every panel is
    filtered by one variable at least."""
    from prometheus_client import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    import agentscope

    with agentscope.analyze(trace_dir, db=":memory:") as analysis:
        text = generate_latest(prometheus.registry_for(analysis)).decode()
    labels: dict = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels.setdefault(sample.name, set()).update(sample.labels)
    assert {"service", "lane"} <= labels["agentscope_tasks_total"]
    assert "host" in labels["agentscope_gpu_idle_ratio"]
    for uid in grafana.DASHBOARDS:
        for title, expr in grafana.queries(grafana.to_json(grafana.build(uid))):
            assert any(f"${v}" in expr for v in VARIABLES), (title, expr)
            for name, selector in SELECTOR.findall(expr):
                for v in VARIABLES:
                    assert (f'{v}=~"${v}"' in selector) == (v in labels[name]), (title, name)


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


def test_task_series_carry_the_service_of_the_root_span_bounded(trace_dir, monkeypatch):
    """``service`` (and ``lane``) on every per-task series, each adding up to the analysis;
    past MAX_SERVICES services the rest are service="(other)"."""
    import collections

    import agentscope

    def value(families, name, by):
        got: dict = {}
        for s in families[name]:
            if s.name.endswith("_total"):
                key = tuple(s.labels[b] for b in by)
                got[key] = got.get(key, 0.0) + s.value
        return got

    with agentscope.analyze(trace_dir, db=":memory:") as analysis:
        families = {f.name: f.samples for f in prometheus.analysis_metrics(analysis)}
        tasks = analysis.task_results
        total = sum(t.duration_ns for t in tasks) / 1e9
        summary = analysis.summary
        by_stage = analysis.breakdown("stage")
        monkeypatch.setattr(prometheus, "MAX_SERVICES", 3)
        few = {f.name: f.samples for f in prometheus.analysis_metrics(analysis)}
    where = collections.Counter((t.service, t.lane) for t in tasks)
    assert value(families, "agentscope_tasks", ("service", "lane")) == pytest.approx(where)
    seconds: dict = {}
    orch: dict = {}
    for t in tasks:
        seconds[t.service, t.lane] = seconds.get((t.service, t.lane), 0.0) + t.duration_ns / 1e9
        orch[t.service, t.lane] = orch.get((t.service, t.lane), 0.0) + t.orchestration_ns / 1e9
    for name in ("agentscope_critical_path_seconds", "agentscope_critical_path_evidence_seconds",
                 "agentscope_critical_path_stage_seconds"):
        assert value(families, name, ("service", "lane")) == pytest.approx(seconds, abs=1e-4)
    assert value(families, "agentscope_orchestration_seconds", ("service", "lane")) \
        == pytest.approx(orch)
    # summed over services and lanes: the fleet's figures
    basis = value(families, "agentscope_critical_path_evidence_seconds", ("basis",))
    assert {b: v / total for (b,), v in basis.items()} == pytest.approx(
        summary.evidence_basis, abs=1e-4)
    stage = value(families, "agentscope_critical_path_stage_seconds", ("stage", "class"))
    assert stage == pytest.approx({(st, c): v for st, row in by_stage.items()
                                   for c, v in row.items()}, abs=1e-5)
    counts = collections.Counter(t.service for t in tasks)
    kept = {name for name, _ in counts.most_common(3)}
    bounded = value(few, "agentscope_tasks", ("service",))
    assert set(bounded) == {(n,) for n in kept} | {("(other)",)}
    assert bounded[("(other)",)] == len(tasks) - sum(counts[n] for n in kept)


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


def _expand(expr: str, **chosen: list) -> str:
    """``expr`` as Grafana sends it: a variable not chosen is "All" (its all value ``.*``),
    one value is itself, several are a regex alternative (our test values need no escaping)."""
    for name in VARIABLES:
        values = chosen.get(name)
        assert values is None or all(re.fullmatch(r"[\w.-]+", v) for v in values)
        expr = expr.replace(f"${name}", ".*" if values is None else values[0]
                            if len(values) == 1 else "(" + "|".join(values) + ")")
    return expr


def _panels() -> list:
    """(dashboard, panel title, PromQL with the variables) of every panel query."""
    return [(uid, title, expr) for uid in grafana.DASHBOARDS
            for title, expr in grafana.queries(grafana.to_json(grafana.build(uid)))]


def _has_data(result: list) -> bool:
    return bool(result) and not all(r["value"][1] == "NaN" for r in result)


def _options(base: str, name: str, **chosen: list) -> set:
    """The values Grafana offers for variable ``name``: its ``label_values(SELECTOR, LABEL)``
    is Prometheus's label values API with SELECTOR as ``match[]``."""
    query = grafana.variables(grafana.to_json(grafana.build("agentscope-fleet")))[name]["query"]
    selector, label = re.fullmatch(r"label_values\((.+), (\w+)\)", query).groups()
    url = f"{base}/api/v1/label/{label}/values?" + urllib.parse.urlencode(
        {"match[]": _expand(selector, **chosen)})
    got = json.loads(_get(url))
    assert got["status"] == "success", got
    return set(got["data"])


def _every_panel_returns_data(base: str, tasks: list) -> None:
    # counters need two scrapes for increase(); wait until the last panel query has data
    _wait(lambda: _query(base, "sum by (lane) (increase(agentscope_tasks_total[1h]))"),
          timeout=60)
    # "All": every panel has data
    empty = [f"{uid}: {title}: {expr}" for uid, title, expr in _panels()
             if not _has_data(_query(base, _expand(expr)))]
    assert not empty, "panels without data:\n" + "\n".join(empty)
    _the_variables_filter(base, tasks)


def _the_variables_filter(base: str, tasks: list) -> None:
    services = {s for s, _, _, _ in tasks}
    assert _options(base, "service") == services
    assert _options(base, "lane") == {"online", "batch"}
    assert _options(base, "lane", service=["scenario-cpu-model"]) == {"online"}
    assert _options(base, "host") == {"vm", OTHER_HOST}
    # one value of each: every query that reads the variable returns only that value's series
    # (where its result keeps the label); a value nobody has: no series at all
    for name, value in (("lane", "batch"), ("service", "example-agent"), ("host", "vm")):
        for uid, title, expr in _panels():
            if f"${name}" not in expr:
                continue
            result = _query(base, _expand(expr, **{name: [value]}))
            assert _has_data(result), (name, value, title, expr)
            assert {r["metric"].get(name, value) for r in result} == {value}, (title, result)
            nothing = _query(base, _expand(expr, **{name: ["no-such-" + name]}))
            assert not _has_data(nothing), (name, title, expr)

    def figure(title: str, query: int = 0, **chosen: list) -> dict:
        expr = [e for _, t, e in _panels() if t == title][query]
        return {tuple(sorted(r["metric"].items())): float(r["value"][1])
                for r in _query(base, _expand(expr, **chosen))}

    # the figures of the chosen tasks, against the analysis
    for chosen in ({"lane": ["batch"]}, {"service": ["example-agent"]},
                   {"service": ["example-agent", "scenario-queue-behind-batch"],
                    "lane": ["batch"]}):
        picked = [t for t in tasks if t[0] in chosen.get("service", [t[0]])
                  and t[1] in chosen.get("lane", [t[1]])]
        assert 0 < len(picked) < len(tasks)
        assert sum(figure("Tasks by bottleneck", **chosen).values()) == len(picked)
        orch, = figure("Orchestration share of critical paths", **chosen).values()
        assert orch == pytest.approx(sum(t[3] for t in picked) / sum(t[2] for t in picked),
                                     rel=1e-6)
        assert sum(figure("What the verdicts rest on (share of critical-path time)",
                          **chosen).values()) == pytest.approx(1.0)
    assert sum(figure("Tasks by bottleneck").values()) == len(tasks)
    busy = figure("GPU busy")
    assert {dict(k)["host"] for k in busy} == {"vm", OTHER_HOST}
    assert {dict(k)["host"] for k in figure("GPU busy", host=[OTHER_HOST])} == {OTHER_HOST}
    per_core = figure("CPU pressure (PSI some) and run queue per core", 1, host=[OTHER_HOST])
    assert list(per_core.values()) == [0.5]  # 4 runnable on 8 cores: the join on host holds


@pytest.mark.skipif(PROMETHEUS is None, reason="needs Debian's prometheus (.ci/run installs it)")
def test_a_real_prometheus_scrapes_serve_and_every_panel_has_data(trace_dir, tasks,
                                                                   tmp_path):
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
        _every_panel_returns_data(base, tasks)
    finally:
        _stop(prom, serve)


@pytest.mark.skipif(PROMETHEUS is None or PUSHGATEWAY is None,
                    reason="needs Debian's prometheus and prometheus-pushgateway")
def test_analyze_pushes_to_a_real_pushgateway_and_every_panel_has_data(trace_dir, tasks,
                                                                         tmp_path):
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
        _every_panel_returns_data(base, tasks)
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
        == {"class", "service", "lane", "task"}
    evidence = metrics["agentscope.critical_path.evidence"]
    assert evidence.unit == "s" and evidence.sum.is_monotonic


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
