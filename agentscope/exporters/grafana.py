"""Grafana dashboards over the metrics of exporters/prometheus.py, built with Grafana's own
``grafana-foundation-sdk`` builders, and a provisioning file that loads them.

Two dashboards: the **fleet overview** (where the critical-path time goes, with the time
whose class rests on a stage label or an assumption apart from the measured, the bottleneck
of tasks, GPU idle and what the critical paths did meanwhile, orchestration share, what the
verdicts rest on (measured, stage labels, untraced), tasks per hour,
tail latency by lane) and the **hosts and GPUs** view (the sampler's latest counters). Every
panel queries a Prometheus data source chosen by the dashboard's ``datasource`` variable.

``agentscope export grafana --out DIR`` writes ``DIR/dashboards/*.json`` and
``DIR/provisioning/dashboards/agentscope.yaml``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

# (title, kind, unit, [(expr, legend)]) per panel; kind: stat | bargauge | timeseries | piechart
FLEET = [
    # the measured part of each class, and apart the part only assumed (from a stage label)
    ("Where the critical-path time goes (assumed: from a stage label, not measured)",
     "piechart", "s", [
         ("sum by (class) (agentscope_critical_path_seconds_total) - sum by (class) "
          "(agentscope_critical_path_assumed_seconds_total)", "{{class}}"),
         ("sum by (class) (agentscope_critical_path_assumed_seconds_total)",
          "{{class}} (assumed)")]),
    ("Critical-path time by stage and class", "bargauge", "s", [
        ("sum by (stage, class) (agentscope_critical_path_stage_seconds_total)",
         "{{stage}} {{class}}")]),
    ("Tasks by bottleneck", "bargauge", "none", [
        ("sum by (bottleneck) (agentscope_tasks_total)", "{{bottleneck}}")]),
    ("Orchestration share of critical paths", "stat", "percentunit", [
        ("agentscope_orchestration_ratio", "orchestration")]),
    ("What the verdicts rest on (share of critical-path time)", "stat", "percentunit", [
        ("agentscope_critical_path_basis_ratio", "{{basis}}")]),
    ("Critical-path time per class assumed from a stage label, not measured", "stat",
     "percentunit", [("agentscope_critical_path_assumed_ratio", "{{class}} (assumed)")]),
    ("GPU idle", "stat", "percentunit", [
        ("agentscope_gpu_idle_ratio", "{{gpu}}@{{host}}")]),
    ("While the GPU sat idle, the critical paths were", "bargauge", "percentunit", [
        ("sum by (stage, class) (agentscope_gpu_idle_attribution_ratio)",
         "{{stage}} {{class}}")]),
    ("Tasks per hour, by lane", "timeseries", "none", [
        ("sum by (lane) (increase(agentscope_tasks_total[1h]))", "{{lane}}")]),
    ("Task latency by lane (p50, p95, p99 of the analysed tasks)", "timeseries", "s", [
        ("histogram_quantile(0.5, sum by (le, lane) (agentscope_task_duration_seconds_bucket))",
         "p50 {{lane}}"),
        ("histogram_quantile(0.95, sum by (le, lane) (agentscope_task_duration_seconds_bucket))",
         "p95 {{lane}}"),
        ("histogram_quantile(0.99, sum by (le, lane) (agentscope_task_duration_seconds_bucket))",
         "p99 {{lane}}")]),
    ("Critical-path time per class, by lane", "timeseries", "s", [
        ("sum by (lane, class) (agentscope_critical_path_seconds_total)",
         "{{lane}} {{class}}"),
        ("sum by (lane, class) (agentscope_critical_path_assumed_seconds_total)",
         "{{lane}} {{class}} (assumed)")]),
]

HOSTS = [
    ("Host CPU busy", "timeseries", "percentunit", [
        ('system_cpu_utilization_ratio{device=""}', "{{host}}")]),
    ("CPU pressure (PSI some) and run queue per core", "timeseries", "percentunit", [
        ("system_pressure_cpu_some_ratio", "PSI cpu {{host}}"),
        ("system_cpu_run_queue / on (host) system_cpu_logical_count", "run queue/core {{host}}")]),
    ("Memory", "timeseries", "bytes", [
        ("system_memory_usage_bytes", "used {{host}}"),
        ("system_memory_available_bytes", "available {{host}}")]),
    ("Memory and I/O pressure (PSI some)", "timeseries", "percentunit", [
        ("system_pressure_memory_some_ratio", "memory {{host}}"),
        ("system_pressure_io_some_ratio", "io {{host}}")]),
    ("Agents' process tree: CPU (cores) and threads waiting for a CPU", "timeseries", "none", [
        ("agentscope_tree_cpu_utilization_cores", "cores {{host}} {{pid}}"),
        ("agentscope_tree_runqueue_wait_threads", "waiting {{host}} {{pid}}")]),
    ("GPU busy", "timeseries", "percentunit", [
        ("hw_gpu_utilization_ratio", "{{device}}@{{host}}")]),
    ("GPU memory", "timeseries", "bytes", [
        ("hw_gpu_memory_usage_bytes", "used {{device}}@{{host}}"),
        ("hw_gpu_memory_limit_bytes", "total {{device}}@{{host}}")]),
    ("GPU power", "timeseries", "watt", [("hw_gpu_power_watts", "{{device}}@{{host}}")]),
    ("Model server: requests waiting and running", "timeseries", "none", [
        ("model_server_requests_waiting", "waiting {{device}}"),
        ("model_server_requests_running", "running {{device}}")]),
    ("Model server KV cache in use", "timeseries", "percentunit", [
        ("model_server_kv_cache_usage_ratio", "{{device}}")]),
]

DASHBOARDS = {"agentscope-fleet": ("agentscope: fleet overview", FLEET),
              "agentscope-hosts": ("agentscope: hosts and GPUs", HOSTS)}

PROVISIONING = """# Grafana dashboard provisioning (written by `agentscope export grafana`): copy to
# /etc/grafana/provisioning/dashboards/ and point `path` at the dashboards folder.
apiVersion: 1
providers:
  - name: agentscope
    folder: agentscope
    type: file
    disableDeletion: false
    updateIntervalSeconds: 30
    options:
      path: {path}
"""


def build(uid: str) -> Any:
    """The dashboard ``uid`` (a key of DASHBOARDS), as the SDK's model."""
    from grafana_foundation_sdk.builders import (bargauge, dashboard, piechart, prometheus,
                                                 stat, timeseries)
    from grafana_foundation_sdk.models.dashboard import DataSourceRef, GridPos

    title, panels = DASHBOARDS[uid]
    kinds = {"stat": stat.Panel, "bargauge": bargauge.Panel, "timeseries": timeseries.Panel,
             "piechart": piechart.Panel}
    source = DataSourceRef(type_val="prometheus", uid="${datasource}")
    d = (dashboard.Dashboard(title).uid(uid).tags(["agentscope"]).refresh("30s")
         .time("now-6h", "now").timezone("browser")
         .with_variable(dashboard.DatasourceVariable("datasource").label("Prometheus")
                        .type("prometheus")))
    for i, (name, kind, unit, queries) in enumerate(panels):
        p = kinds[kind]().title(name).datasource(source).unit(unit).grid_pos(
            GridPos(h=8, w=12, x=12 * (i % 2), y=8 * (i // 2)))
        for k, (expr, legend) in enumerate(queries):
            p = p.with_target(prometheus.Dataquery().expr(expr).legend_format(legend)
                              .ref_id(chr(ord("A") + k)))
        d = d.with_panel(p)
    return d.build()


def to_json(model: Any) -> str:
    from grafana_foundation_sdk.cog.encoder import JSONEncoder

    return json.dumps(model, cls=JSONEncoder, indent=2, sort_keys=True) + "\n"


def validate(text: str) -> Any:
    """Parse dashboard JSON back into the SDK's model (raises on a malformed dashboard)."""
    from grafana_foundation_sdk.models.dashboard import Dashboard

    return Dashboard.from_json(json.loads(text))


def queries(text: str) -> list:
    """[(panel title, PromQL)] of a dashboard's JSON."""
    return [(p["title"], t["expr"]) for p in json.loads(text).get("panels", [])
            for t in p.get("targets", [])]


METRIC = re.compile(r"\b((?:agentscope|system|hw|model_server)_[a-z0-9_]+)")


def metrics_of(expr: str) -> set:
    """The metric names a PromQL expression reads (ours all start with agentscope_, system_,
    hw_ or model_server_)."""
    return set(METRIC.findall(expr))


def write(out: "str | Path") -> list:
    """Write the dashboards and the provisioning file below ``out``; returns the paths."""
    out = Path(out)
    boards = out / "dashboards"
    boards.mkdir(parents=True, exist_ok=True)
    written = []
    for uid in DASHBOARDS:
        text = to_json(build(uid))
        validate(text)
        path = boards / f"{uid}.json"
        path.write_text(text)
        written.append(path)
    prov = out / "provisioning" / "dashboards"
    prov.mkdir(parents=True, exist_ok=True)
    path = prov / "agentscope.yaml"
    path.write_text(PROVISIONING.format(path=boards.resolve()))
    written.append(path)
    return written
