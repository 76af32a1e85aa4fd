"""The metrics of exporters/prometheus.py sent over OTLP/HTTP (protobuf), for an
OpenTelemetry Collector or any OTLP metrics backend: ``agentscope export otlp-metrics``.

The same values as the Prometheus endpoint, under OpenTelemetry names (dotted, the unit in
``unit``): ``agentscope.tasks`` ({task}, a cumulative sum), ``agentscope.task.duration`` (s, an
explicit-bucket histogram), ``agentscope.critical_path`` (s) and the part of it whose class
rests on a stage label or an assumption, ``agentscope.critical_path.assumed`` (s), ... and the
sampler's own names
(``system.cpu.utilization``, ``hw.gpu.utilization``, ...). A Collector's Prometheus exporter
maps them back to the names ``agentscope serve`` uses (``agentscope_tasks_total``,
``hw_gpu_utilization_ratio``).
"""

from __future__ import annotations

import os
import time
import urllib.request
from typing import Any, Optional

from .. import metric_names as mn
from .prometheus import SAMPLED, analysis_metrics, sampled_metrics

# Prometheus family name -> (OpenTelemetry name, unit)
OTEL_NAMES = {
    "agentscope_tasks": ("agentscope.tasks", "{task}"),
    "agentscope_task_duration_seconds": ("agentscope.task.duration", "s"),
    "agentscope_critical_path_seconds": ("agentscope.critical_path", "s"),
    "agentscope_orchestration_seconds": ("agentscope.orchestration", "s"),
    "agentscope_critical_path_stage_seconds": ("agentscope.critical_path.stage", "s"),
    "agentscope_orchestration_ratio": ("agentscope.orchestration.ratio", "1"),
    "agentscope_critical_path_basis_ratio": ("agentscope.critical_path.basis", "1"),
    "agentscope_critical_path_evidence_seconds": ("agentscope.critical_path.evidence", "s"),
    "agentscope_critical_path_assumed_seconds": ("agentscope.critical_path.assumed", "s"),
    "agentscope_critical_path_assumed_ratio": ("agentscope.critical_path.assumed.ratio", "1"),
    "agentscope_gpu_busy_ratio": ("agentscope.gpu.busy", "1"),
    "agentscope_gpu_idle_ratio": ("agentscope.gpu.idle", "1"),
    "agentscope_gpu_idle_attribution_ratio": ("agentscope.gpu.idle.attribution", "1"),
}
# the sampled counters: their own names and units (agentscope/metric_names.py)
OTEL_NAMES.update({prom: (otel, mn.UNITS[otel]) for otel, (prom, _) in SAMPLED.items()})


def request(analysis: Any, service: str = "agentscope") -> Any:
    """An ``ExportMetricsServiceRequest`` with the metrics of ``analysis`` and the latest
    samples of its store."""
    from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import \
        ExportMetricsServiceRequest
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
    from opentelemetry.proto.metrics.v1 import metrics_pb2 as pb

    from .._version import __version__

    now = time.time_ns()
    families = analysis_metrics(analysis) + sampled_metrics(analysis)
    req = ExportMetricsServiceRequest()
    rm = req.resource_metrics.add()
    rm.resource.attributes.append(KeyValue(key="service.name",
                                           value=AnyValue(string_value=service)))
    sm = rm.scope_metrics.add()
    sm.scope.name, sm.scope.version = "agentscope", __version__

    def attrs(point: Any, labels: dict) -> None:
        for k, v in sorted(labels.items()):
            if k != "le" and v != "":
                point.attributes.append(KeyValue(key=k, value=AnyValue(string_value=str(v))))

    for fam in families:
        name, unit = OTEL_NAMES.get(fam.name, (fam.name, "1"))
        m = sm.metrics.add(name=name, description=fam.documentation, unit=unit)
        if fam.type == "counter":
            m.sum.aggregation_temporality = pb.AGGREGATION_TEMPORALITY_CUMULATIVE
            m.sum.is_monotonic = True
            for s in fam.samples:
                if s.name.endswith("_total"):
                    p = m.sum.data_points.add(time_unix_nano=now, as_double=s.value)
                    attrs(p, s.labels)
        elif fam.type == "histogram":
            m.histogram.aggregation_temporality = pb.AGGREGATION_TEMPORALITY_CUMULATIVE
            series: dict = {}
            for s in fam.samples:
                key = tuple(sorted((k, v) for k, v in s.labels.items() if k != "le"))
                d = series.setdefault(key, {"buckets": [], "sum": 0.0, "count": 0})
                if s.name.endswith("_bucket"):
                    d["buckets"].append((float(s.labels["le"]), s.value))
                elif s.name.endswith("_sum"):
                    d["sum"] = s.value
                elif s.name.endswith("_count"):
                    d["count"] = int(s.value)
            for key, d in series.items():
                cumulative = sorted(d["buckets"])
                bounds = [b for b, _ in cumulative if b != float("inf")]
                counts, prev = [], 0.0
                for _, c in cumulative:  # cumulative (le) counts -> per-bucket counts
                    counts.append(int(c - prev))
                    prev = c
                p = m.histogram.data_points.add(time_unix_nano=now, count=d["count"],
                                                sum=d["sum"], explicit_bounds=bounds,
                                                bucket_counts=counts)
                attrs(p, dict(key))
        else:
            for s in fam.samples:
                p = m.gauge.data_points.add(time_unix_nano=now, as_double=s.value)
                attrs(p, s.labels)
    return req


def default_endpoint(env: Optional[dict] = None) -> str:
    """Where OTLP metrics go when no endpoint is given, as the OpenTelemetry SDKs decide:
    ``OTEL_EXPORTER_OTLP_METRICS_ENDPOINT``, else ``OTEL_EXPORTER_OTLP_ENDPOINT``/v1/metrics,
    else http://localhost:4318/v1/metrics."""
    env = os.environ if env is None else env
    if env.get("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"):
        return env["OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"]
    if env.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
        return env["OTEL_EXPORTER_OTLP_ENDPOINT"].rstrip("/") + "/v1/metrics"
    return "http://localhost:4318/v1/metrics"


def export(analysis: Any, endpoint: Optional[str] = None,
           headers: "dict | None" = None) -> tuple:
    """Send the metrics of ``analysis`` to ``endpoint`` (default: :func:`default_endpoint`);
    returns (endpoint, metrics, data points, HTTP status). Raises on a failure."""
    endpoint = endpoint or default_endpoint()
    req = request(analysis)
    metrics = req.resource_metrics[0].scope_metrics[0].metrics
    points = sum(len(getattr(m, m.WhichOneof("data")).data_points) for m in metrics)
    return endpoint, len(metrics), points, send(endpoint, req, headers=headers)


def send(endpoint: str, req: Any, timeout: float = 30, headers: "dict | None" = None) -> int:
    """POST ``req`` to an OTLP/HTTP metrics endpoint (``.../v1/metrics``); returns the HTTP
    status (raises on a failure)."""
    body = req.SerializeToString()
    r = urllib.request.Request(endpoint, body, {"Content-Type": "application/x-protobuf",
                                                **(headers or {})}, method="POST")
    with urllib.request.urlopen(r, timeout=timeout) as resp:
        return resp.status
