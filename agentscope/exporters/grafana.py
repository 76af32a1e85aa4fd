"""Grafana dashboards over the metrics of exporters/prometheus.py, built with Grafana's own
``grafana-foundation-sdk`` builders, and a provisioning file that loads them.

Two dashboards: the **fleet overview** (where the critical-path time goes, with the time
whose class rests on a stage label or an assumption apart from the measured, the bottleneck
of tasks, GPU idle and what the critical paths did meanwhile, orchestration share, what the
verdicts rest on (measured, stage labels, untraced), tasks per hour,
tail latency by lane) and the **hosts and GPUs** view (the sampler's latest counters). Every
panel queries a Prometheus data source chosen by the dashboard's ``datasource`` variable.

Both dashboards have the template variables ``service``, ``lane`` and ``host`` (Prometheus
queries, multi-select, "All" is the regex ``.*``). ``service`` and ``lane`` filter every
series that carries them: the per-task metrics (tasks, durations, critical-path seconds);
``host`` every series of a host: the sampler's counters and the GPUs' shares. In the queries
below ``<T>`` stands for the task filter and ``<H>`` for the host filter. The hosts dashboard
has no series of a service or a lane: there both are hidden, and carried by the links
between the two dashboards.

``agentscope export grafana --out DIR`` writes ``DIR/dashboards/*.json`` and
``DIR/provisioning/dashboards/agentscope.yaml``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

TASK_FILTER = 'service=~"$service", lane=~"$lane"'  # <T>: the series of tasks
HOST_FILTER = 'host=~"$host"'  # <H>: the series of a host

# (title, kind, unit, [(expr, legend)]) per panel; kind: stat | bargauge | timeseries | piechart
FLEET = [
    # the measured part of each class, and apart the part only assumed (from a stage label)
    ("Where the critical-path time goes (assumed: from a stage label, not measured)",
     "piechart", "s", [
         ("sum by (class) (agentscope_critical_path_seconds_total{<T>}) - sum by (class) "
          "(agentscope_critical_path_assumed_seconds_total{<T>})", "{{class}}"),
         ("sum by (class) (agentscope_critical_path_assumed_seconds_total{<T>})",
          "{{class}} (assumed)")]),
    ("Critical-path time by stage and class", "bargauge", "s", [
        ("sum by (stage, class) (agentscope_critical_path_stage_seconds_total{<T>})",
         "{{stage}} {{class}}")]),
    ("Tasks by bottleneck", "bargauge", "none", [
        ("sum by (bottleneck) (agentscope_tasks_total{<T>})", "{{bottleneck}}")]),
    # the shares as ratios of the counters (the ratio gauges are of all tasks: not filtered)
    ("Orchestration share of critical paths", "stat", "percentunit", [
        ("sum(agentscope_orchestration_seconds_total{<T>}) / "
         "sum(agentscope_critical_path_seconds_total{<T>})", "orchestration")]),
    ("What the verdicts rest on (share of critical-path time)", "stat", "percentunit", [
        ("sum by (basis) (agentscope_critical_path_evidence_seconds_total{<T>}) / ignoring "
         "(basis) group_left sum(agentscope_critical_path_evidence_seconds_total{<T>})",
         "{{basis}}")]),
    ("Critical-path time per class assumed from a stage label, not measured", "stat",
     "percentunit", [
         ("sum by (class) (agentscope_critical_path_assumed_seconds_total{<T>}) / ignoring "
          "(class) group_left sum(agentscope_critical_path_seconds_total{<T>})",
          "{{class}} (assumed)")]),
    ("GPU idle", "stat", "percentunit", [
        ("agentscope_gpu_idle_ratio{<H>}", "{{gpu}}@{{host}}")]),
    # each GPU's shares sum to 1: over several GPUs, their mean
    ("While the GPU sat idle, the critical paths were", "bargauge", "percentunit", [
        ("avg by (stage, class) (agentscope_gpu_idle_attribution_ratio{<H>})",
         "{{stage}} {{class}}")]),
    ("Tasks per hour, by lane", "timeseries", "none", [
        ("sum by (lane) (increase(agentscope_tasks_total{<T>}[1h]))", "{{lane}}")]),
    ("Task latency by lane (p50, p95, p99 of the analysed tasks)", "timeseries", "s", [
        (f"histogram_quantile({q}, sum by (le, lane) "
         "(agentscope_task_duration_seconds_bucket{<T>}))", f"p{round(q * 100)} {{{{lane}}}}")
        for q in (0.5, 0.95, 0.99)]),
    ("Critical-path time per class, by lane", "timeseries", "s", [
        ("sum by (lane, class) (agentscope_critical_path_seconds_total{<T>})",
         "{{lane}} {{class}}"),
        ("sum by (lane, class) (agentscope_critical_path_assumed_seconds_total{<T>})",
         "{{lane}} {{class}} (assumed)")]),
]

HOSTS = [
    ("Host CPU busy", "timeseries", "percentunit", [
        ('system_cpu_utilization_ratio{device="", <H>}', "{{host}}")]),
    ("CPU pressure (PSI some) and run queue per core", "timeseries", "percentunit", [
        ("system_pressure_cpu_some_ratio{<H>}", "PSI cpu {{host}}"),
        ("system_cpu_run_queue{<H>} / on (host) system_cpu_logical_count{<H>}",
         "run queue/core {{host}}")]),
    ("Memory", "timeseries", "bytes", [
        ("system_memory_usage_bytes{<H>}", "used {{host}}"),
        ("system_memory_available_bytes{<H>}", "available {{host}}")]),
    ("Memory and I/O pressure (PSI some)", "timeseries", "percentunit", [
        ("system_pressure_memory_some_ratio{<H>}", "memory {{host}}"),
        ("system_pressure_io_some_ratio{<H>}", "io {{host}}")]),
    ("Agents' process tree: CPU (cores) and threads waiting for a CPU", "timeseries", "none", [
        ("agentscope_tree_cpu_utilization_cores{<H>}", "cores {{host}} {{pid}}"),
        ("agentscope_tree_runqueue_wait_threads{<H>}", "waiting {{host}} {{pid}}")]),
    ("GPU busy", "timeseries", "percentunit", [
        ("hw_gpu_utilization_ratio{<H>}", "{{device}}@{{host}}")]),
    ("GPU memory", "timeseries", "bytes", [
        ("hw_gpu_memory_usage_bytes{<H>}", "used {{device}}@{{host}}"),
        ("hw_gpu_memory_limit_bytes{<H>}", "total {{device}}@{{host}}")]),
    ("GPU power", "timeseries", "watt", [("hw_gpu_power_watts{<H>}", "{{device}}@{{host}}")]),
    # host: where the sampler that scraped the model server ran
    ("Model server: requests waiting and running", "timeseries", "none", [
        ("model_server_requests_waiting{<H>}", "waiting {{device}}"),
        ("model_server_requests_running{<H>}", "running {{device}}")]),
    ("Model server KV cache in use", "timeseries", "percentunit", [
        ("model_server_kv_cache_usage_ratio{<H>}", "{{device}}")]),
]

# the metrics read with the host filter: the host variable offers the hosts they carry
HOST_METRICS = sorted({m for _, _, _, qs in FLEET + HOSTS for expr, _ in qs
                       for m in re.findall(r"([a-z0-9_]+)\{[^}]*<H>", expr)})

# (name, query); label_values(SELECTOR, LABEL): the values of LABEL over the series of SELECTOR
VARIABLES = [
    ("service", "label_values(agentscope_tasks_total, service)"),
    ("lane", 'label_values(agentscope_tasks_total{service=~"$service"}, lane)'),
    ("host", 'label_values({__name__=~"%s"}, host)' % "|".join(HOST_METRICS)),
]

# uid -> (title, panels, the variables hidden there: no series of it carries them)
DASHBOARDS = {"agentscope-fleet": ("agentscope: fleet overview", FLEET, ()),
              "agentscope-hosts": ("agentscope: hosts and GPUs", HOSTS, ("service", "lane"))}


def _filtered(expr: str) -> str:
    return expr.replace("<T>", TASK_FILTER).replace("<H>", HOST_FILTER)


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
    from grafana_foundation_sdk.models.dashboard import (DashboardLinkType, DataSourceRef,
                                                         GridPos, VariableHide, VariableOption,
                                                         VariableRefresh, VariableSort)

    title, panels, hidden = DASHBOARDS[uid]
    kinds = {"stat": stat.Panel, "bargauge": bargauge.Panel, "timeseries": timeseries.Panel,
             "piechart": piechart.Panel}
    source = DataSourceRef(type_val="prometheus", uid="${datasource}")
    d = (dashboard.Dashboard(title).uid(uid).tags(["agentscope"]).refresh("30s")
         .time("now-6h", "now").timezone("browser")
         .with_variable(dashboard.DatasourceVariable("datasource").label("Prometheus")
                        .type("prometheus")))
    for name, query in VARIABLES:
        d = d.with_variable(
            dashboard.QueryVariable(name).label(name).datasource(source).query(query)
            .refresh(VariableRefresh.ON_TIME_RANGE_CHANGED).sort(VariableSort.ALPHABETICAL_ASC)
            .multi(True).include_all(True).all_value(".*")
            .current(VariableOption(selected=True, text=["All"], value=["$__all"]))
            .hide(VariableHide.HIDE_VARIABLE if name in hidden else VariableHide.DONT_HIDE))
    # to the other agentscope dashboard, with the time range and the variables' values
    d = d.link(dashboard.DashboardLink("agentscope").type(DashboardLinkType.DASHBOARDS)
               .tags(["agentscope"]).as_dropdown(False).include_vars(True).keep_time(True))
    for i, (name, kind, unit, queries) in enumerate(panels):
        p = kinds[kind]().title(name).datasource(source).unit(unit).grid_pos(
            GridPos(h=8, w=12, x=12 * (i % 2), y=8 * (i // 2)))
        for k, (expr, legend) in enumerate(queries):
            p = p.with_target(prometheus.Dataquery().expr(_filtered(expr)).legend_format(legend)
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


def variables(text: str) -> dict:
    """{name: the variable's JSON} of a dashboard's JSON, the datasource's included."""
    return {v["name"]: v for v in json.loads(text).get("templating", {}).get("list", [])}


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
