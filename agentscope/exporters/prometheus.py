"""agentscope's findings as Prometheus metrics: a custom collector computed at scrape time.

Two kinds of metric, with Prometheus naming rules (``snake_case``, the unit as a suffix,
``_total`` on counters, ``_ratio`` for 0..1):

* **From the analysis** (``agentscope_*``): tasks and their durations by bottleneck class,
  service, lane and task name; critical-path seconds per class (by service, lane and task,
  and by stage), and apart the part of them whose class rests on a stage label or an
  assumption rather than on measurement (``agentscope_critical_path_assumed_*``), and by what
  their class rests on (``agentscope_critical_path_evidence_seconds_total``);
  orchestration; per GPU, its busy and idle shares and what the critical paths did while it
  sat idle. ``service`` is the service of each task's root span; with ``lane`` it is on
  every per-task series, so that a dashboard can filter each of them by both.
* **From the sampler** (the latest value of each host, GPU and model-server counter in the
  store): the OpenTelemetry names the collectors write, mapped the standard way (``.`` to
  ``_``, the unit as a suffix: ``hw.gpu.utilization`` → ``hw_gpu_utilization_ratio``,
  ``system.memory.usage`` → ``system_memory_usage_bytes``).

:class:`TraceDirCollector` serves a trace directory (``agentscope serve``): at a scrape it
loads what was appended since the last one and analyses again, at most every
``refresh_s``. :func:`registry_for` wraps one analysis (``analyze --push-gateway``).
"""

from __future__ import annotations

import functools
import socket
import threading
import time
from typing import Any, Callable, Iterable, Optional

import numpy as np

from .. import metric_names as mn
from ..analyzers.evidence import BASES, CLASSES
from ..analyzers.verdict import breakdown, task_arrays

# task durations: 10 ms .. 30 min
DURATION_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
                    120.0, 300.0, 600.0, 1800.0)
MAX_TASK_NAMES = 100  # more distinct task names than this: the rest are task="(other)"
MAX_SERVICES = 20  # more distinct services of root spans than this: the rest are "(other)"
NONE = "(none)"  # the label value of a task without a lane, or a root span without a service
OTHER = "(other)"  # a task name or service past the commonest ones kept

# sampler metric -> (Prometheus name, help). Units per docs/collectors.md.
SAMPLED = {
    mn.SYSTEM_CPU_UTILIZATION: ("system_cpu_utilization_ratio", "Host CPU busy, 0..1"),
    mn.SYSTEM_CPU_RUN_QUEUE: ("system_cpu_run_queue", "Runnable tasks on the host"),
    mn.SYSTEM_CPU_LOGICAL_COUNT: ("system_cpu_logical_count", "Logical CPUs of the host"),
    mn.SYSTEM_PRESSURE_CPU_SOME: ("system_pressure_cpu_some_ratio",
                                 "Share of time some task waited for a CPU (PSI)"),
    mn.SYSTEM_PRESSURE_MEMORY_SOME: ("system_pressure_memory_some_ratio",
                                    "Share of time some task stalled on memory (PSI)"),
    mn.SYSTEM_PRESSURE_MEMORY_FULL: ("system_pressure_memory_full_ratio",
                                    "Share of time all tasks stalled on memory (PSI)"),
    mn.SYSTEM_PRESSURE_IO_SOME: ("system_pressure_io_some_ratio",
                                "Share of time some task stalled on I/O (PSI)"),
    mn.SYSTEM_MEMORY_USAGE: ("system_memory_usage_bytes", "Host memory in use"),
    mn.SYSTEM_MEMORY_AVAILABLE: ("system_memory_available_bytes", "Host memory available"),
    mn.SYSTEM_MEMORY_LIMIT: ("system_memory_limit_bytes", "Host memory in all"),
    mn.SYSTEM_PAGING_MAJOR_FAULTS: ("system_paging_major_faults_per_second",
                                   "Major page faults per second"),
    mn.SYSTEM_PAGING_SWAP_IN: ("system_paging_swap_in_per_second", "Pages swapped in per second"),
    mn.SYSTEM_DISK_IO_READ: ("system_disk_io_read_bytes_per_second", "Disk reads"),
    mn.SYSTEM_DISK_IO_WRITE: ("system_disk_io_write_bytes_per_second", "Disk writes"),
    mn.SYSTEM_NETWORK_IO_RECEIVE: ("system_network_io_receive_bytes_per_second",
                                  "Network received"),
    mn.SYSTEM_NETWORK_IO_TRANSMIT: ("system_network_io_transmit_bytes_per_second",
                                   "Network sent"),
    mn.HW_GPU_UTILIZATION: ("hw_gpu_utilization_ratio", "GPU busy (NVML), 0..1"),
    mn.HW_GPU_MEMORY_UTILIZATION: ("hw_gpu_memory_utilization_ratio",
                                  "GPU memory bandwidth busy (NVML), 0..1"),
    mn.HW_GPU_MEMORY_USAGE: ("hw_gpu_memory_usage_bytes", "GPU memory in use"),
    mn.HW_GPU_MEMORY_LIMIT: ("hw_gpu_memory_limit_bytes", "GPU memory in all"),
    mn.HW_GPU_POWER: ("hw_gpu_power_watts", "GPU power draw"),
    mn.HW_GPU_CLOCK_SM: ("hw_gpu_clock_sm_megahertz", "GPU SM clock"),
    mn.AGENTSCOPE_TREE_CPU_UTILIZATION: ("agentscope_tree_cpu_utilization_cores",
                                        "CPU of the agent's process tree, in cores"),
    mn.AGENTSCOPE_TREE_RUNQUEUE_WAIT: ("agentscope_tree_runqueue_wait_threads",
                                      "Agent threads waiting for a CPU, on average"),
    mn.MODEL_SERVER_REQUESTS_WAITING: ("model_server_requests_waiting",
                                      "Requests waiting at the model server"),
    mn.MODEL_SERVER_REQUESTS_RUNNING: ("model_server_requests_running",
                                      "Requests running at the model server"),
    mn.MODEL_SERVER_KV_CACHE_USAGE: ("model_server_kv_cache_usage_ratio",
                                    "Model server KV cache in use, 0..1"),
}


ANALYSIS_NAMES = (
    "agentscope_tasks_total", "agentscope_task_duration_seconds_bucket",
    "agentscope_task_duration_seconds_sum", "agentscope_task_duration_seconds_count",
    "agentscope_critical_path_seconds_total", "agentscope_orchestration_seconds_total",
    "agentscope_critical_path_stage_seconds_total", "agentscope_orchestration_ratio",
    "agentscope_critical_path_basis_ratio", "agentscope_critical_path_evidence_seconds_total",
    "agentscope_critical_path_assumed_seconds_total",
    "agentscope_critical_path_assumed_ratio", "agentscope_gpu_busy_ratio",
    "agentscope_gpu_idle_ratio", "agentscope_gpu_idle_attribution_ratio",
    "agentscope_last_refresh_timestamp_seconds", "agentscope_refresh_failures_total")


def exported_names() -> set:
    """Every sample name the exporter can write."""
    return set(ANALYSIS_NAMES) | {name for name, _ in SAMPLED.values()}


def _families() -> Any:
    from prometheus_client.core import (CounterMetricFamily, GaugeMetricFamily,
                                        HistogramMetricFamily)

    return CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily


def analysis_metrics(analysis: Any) -> list:
    """The ``agentscope_*`` metric families of one analysis."""
    Counter, Gauge, Histogram = _families()
    tasks = analysis.task_results
    names = _commonest([t.name for t in tasks], MAX_TASK_NAMES)
    services = _commonest([t.service or NONE for t in tasks], MAX_SERVICES)
    # per task: its (service, lane) labels
    where = [(services.get(t.service or NONE, OTHER), t.lane or NONE) for t in tasks]
    count = Counter("agentscope_tasks", "Tasks analysed, by bottleneck class, service (of the "
                    "root span), lane and task name", labels=["bottleneck", "service", "lane",
                                                              "task"])
    duration = Histogram("agentscope_task_duration_seconds", "Task duration (root span, end to "
                         "end), by bottleneck class, service, lane and task name",
                         labels=["bottleneck", "service", "lane", "task"])
    path = Counter("agentscope_critical_path_seconds", "Critical-path seconds attributed to "
                   "each resource class, by service, lane and task name",
                   labels=["class", "service", "lane", "task"])
    orch = Counter("agentscope_orchestration_seconds", "Critical-path seconds of the agents' "
                   "own code (task and agent spans' self time), by service and lane",
                   labels=["service", "lane"])
    guessed = Counter("agentscope_critical_path_assumed_seconds", "The part of "
                      "agentscope_critical_path_seconds whose class rests on a stage label or "
                      "an assumption, not on measurement, by service, lane and task name",
                      labels=["class", "service", "lane", "task"])
    # each task's group: (bottleneck, service, lane, task name) and (service, lane), as codes;
    # sums by bincount add in task order, as a loop over the tasks would
    keys = [(t.bottleneck, service, lane, names.get(t.name, OTHER))
            for t, (service, lane) in zip(tasks, where)]
    group_of: dict = {}
    group = np.fromiter((group_of.setdefault(k, len(group_of)) for k in keys), dtype=np.int64,
                        count=len(keys))
    groups = list(group_of)
    cols = task_arrays(tasks)
    seconds_each = cols.duration / 1e9
    order = np.argsort(group, kind="stable")  # each group's tasks together, in task order
    each = np.split(seconds_each[order], np.cumsum(np.bincount(group, minlength=len(groups)))[:-1])
    for key, values in sorted(zip(groups, each)):
        count.add_metric(list(key), len(values))
        # (Python's sum, as before: 3.12's compensates rounding, numpy's does not)
        duration.add_metric(list(key), _buckets(values), sum(values.tolist()))
    # the critical-path seconds per class: by (service, lane, task name), without bottleneck
    place_of: dict = {}
    place = np.asarray([place_of.setdefault(k[1:], len(place_of)) for k in groups],
                       dtype=np.int64)[group] if len(groups) else group
    places = list(place_of)
    for series, matrix in ((path, cols.shares), (guessed, cols.assumed)):
        sums = {(c,) + p: v for c_no, c in enumerate(CLASSES) for p, v in zip(places, np.bincount(
            place, matrix[:, c_no] * cols.duration / 1e9, len(places)).tolist())}
        for key, v in sorted(sums.items()):
            series.add_metric(list(key), v)
    orch_of: dict = {}
    orch_group = np.fromiter((orch_of.setdefault(w, len(orch_of)) for w in where),
                             dtype=np.int64, count=len(where))
    orchestration = np.fromiter((t.orchestration_ns for t in tasks), dtype=np.int64,
                                count=len(tasks))
    for key, v in sorted(zip(orch_of, np.bincount(orch_group, orchestration / 1e9,
                                                   len(orch_of)).tolist())):
        orch.add_metric(list(key), v)
    stage = Counter("agentscope_critical_path_stage_seconds", "Critical-path seconds per "
                    "resource class, by the stage of the span that held the path, and by "
                    "service and lane", labels=["class", "stage", "service", "lane"])
    evidence = Counter("agentscope_critical_path_evidence_seconds", "Critical-path seconds by "
                       "what their class rests on (measured evidence, a stage label, or "
                       "nothing: untraced), by service and lane",
                       labels=["basis", "service", "lane"])
    by_stage, by_basis = _section_seconds(analysis.sections, analysis.stage_codes(), where)
    for (st, service, lane), row in sorted(by_stage.items()):
        for c in CLASSES:
            stage.add_metric([c, st, service, lane], row.get(c, 0.0))
    for key, v in sorted(by_basis.items()):
        evidence.add_metric(list(key), v)
    summary = analysis.summary
    share = Gauge("agentscope_orchestration_ratio", "Share of all critical-path time that was "
                  "the agents' own code")
    share.add_metric([], summary.orchestration_share)
    basis = Gauge("agentscope_critical_path_basis_ratio", "Share of all critical-path time by "
                  "what its class rests on: measured evidence, a stage label, or nothing "
                  "(untraced)", labels=["basis"])
    for key, v in sorted((summary.evidence_basis or {}).items()):
        basis.add_metric([key], v)
    assumed = Gauge("agentscope_critical_path_assumed_ratio", "Share of all critical-path time "
                    "that is of each class only by a stage label or an assumption, not by "
                    "measurement", labels=["class"])
    for c in CLASSES:
        assumed.add_metric([c], (summary.assumed_share_of_critical_path or {}).get(c, 0.0))
    out = [count, duration, path, guessed, orch, stage, evidence, share, basis, assumed]
    gpu = summary.gpu
    if gpu:
        busy = Gauge("agentscope_gpu_busy_ratio", "Share of the analysed tasks' time the GPU "
                     "was busy", labels=["gpu", "host"])
        idle = Gauge("agentscope_gpu_idle_ratio", "Share of the analysed tasks' time the GPU "
                     "was idle (under 5 %)", labels=["gpu", "host"])
        why = Gauge("agentscope_gpu_idle_attribution_ratio", "While the GPU sat idle: share "
                    "of the critical paths' time per stage and class", labels=[
                        "gpu", "host", "stage", "class"])
        for key, d in sorted(gpu.items()):
            device, _, host = key.partition("@")
            busy.add_metric([device, host], d["busy"])
            idle.add_metric([device, host], d["idle"])
            for what, v in sorted(d["idle_while"].items()):
                st, _, cls = what.rpartition(" ")
                why.add_metric([device, host, st, cls], v)
        out += [busy, idle, why]
    return out


def _commonest(values: list, limit: int) -> dict:
    """The label values kept (the commonest ``limit``, ties in order of appearance), each
    mapped to itself; the rest are to be ``OTHER``."""
    counts: dict = {}
    for v in values:
        counts[v] = counts.get(v, 0) + 1
    kept = sorted(counts, key=lambda n: -counts[n])[:limit]
    return {n: n for n in kept}


def _section_seconds(sections: Any, stage_codes: tuple, where: list) -> tuple:
    """Critical-path seconds of the sections, summed by (stage, service, lane) per class
    ({key: {class: seconds}}, as :func:`~agentscope.analyzers.verdict.breakdown`), and by
    (basis, service, lane) ({key: seconds}); ``stage_codes``: each section's stage as
    ``Analysis.stage_codes()`` gives it; ``where``: each task's (service, lane)."""
    if not len(sections) or not where:
        return {}, {}
    groups = sorted(set(where))
    group_of = {g: k for k, g in enumerate(groups)}
    group = np.asarray([group_of[w] for w in where], dtype=np.int64)[
        np.asarray(sections.task, dtype=np.int64)]
    stage, stages = stage_codes
    by_stage = {}
    for k, row in breakdown(sections, stage * len(groups) + group).items():
        st, g = divmod(int(k), len(groups))
        by_stage[(stages[st],) + groups[g]] = row
    basis = (np.asarray(sections.basis, dtype=np.int64) if sections.basis is not None
             else np.zeros(len(sections), dtype=np.int64))  # None: all measured
    length = (np.asarray(sections.end_ns) - np.asarray(sections.start_ns)) / 1e9
    sums = np.bincount(basis * len(groups) + group, length, len(BASES) * len(groups))
    by_basis = {(BASES[b],) + groups[g]: float(sums[b * len(groups) + g])
                for b in range(len(BASES)) for g in range(len(groups))}
    return by_stage, by_basis


def _buckets(values: Any) -> list:
    """The cumulative histogram buckets of ``values`` (an array of seconds)."""
    ordered = np.sort(np.asarray(values, dtype=np.float64))
    counts = np.searchsorted(ordered, DURATION_BUCKETS, side="right").tolist()
    return [(_le(b), n) for b, n in zip(DURATION_BUCKETS, counts)] + [("+Inf", len(values))]


def _le(b: float) -> str:
    return repr(float(b))


def sampled_metrics(analysis: Any) -> list:
    """The latest value of each sampled host, GPU and model-server counter, as gauges."""
    _, Gauge, _ = _families()
    families: dict = {}
    for r in analysis.latest_samples(list(SAMPLED)):
        if r.value is None:
            continue
        name, help_ = SAMPLED[r.metric]
        fam = families.get(r.metric)
        if fam is None:
            fam = families[r.metric] = Gauge(name, f"{help_} (latest sample; {r.metric})",
                                             labels=["host", "device", "pid"])
        fam.add_metric([r.host or "", r.device or "", "" if r.pid is None else str(r.pid)],
                       r.value)
    return list(families.values())


def check_source(trace_dir: str, db: Optional[str]) -> None:
    """ValueError where ``serve`` cannot watch ``trace_dir`` with the store ``db``: a URL's
    window is read into a store of its own at each refresh (one kept in ``db`` would gather
    every refresh's rows, and keep traces the window has left)."""
    from .. import urls

    if urls.is_url(trace_dir) and db is not None:
        raise ValueError("serve reads a ClickHouse SOURCE's window into a store of its own at "
                         "each refresh; --db (db=) keeps a trace directory's store")


class TraceDirCollector:
    """A prometheus_client collector over a trace directory or a ClickHouse URL: it loads and
    analyses again at a scrape when the source changed (a directory: only the traces the new
    data touched, ``analyze(previous=)``; a URL: its window read again, which a window given
    as a duration, ``since=1h``, moves with the clock), at most every ``refresh_s`` seconds;
    in between it serves the last result."""

    def __init__(self, trace_dir: str, db: Optional[str] = None, refresh_s: float = 15.0):
        from .. import urls

        check_source(trace_dir, db)
        self.trace_dir = trace_dir
        # what the log names: a URL without its password
        self.name = urls.parse(trace_dir).display if urls.is_url(trace_dir) else trace_dir
        self.db = db
        self.refresh_s = refresh_s
        self._lock = threading.Lock()
        self._at = 0.0
        self._seen: Optional[tuple] = None
        self._metrics: list = []
        self._analysis: Any = None
        self.refreshes = 0
        self.failures = 0  # refreshes that raised: the last good result is served meanwhile

    def _state(self) -> tuple:
        from ..analysis import source_state

        return source_state(self.trace_dir)

    def update(self) -> None:
        """Load and analyse again if the source changed since the last analysis (or there
        is none yet): what a scrape does once ``refresh_s`` has passed."""
        self._at = time.monotonic()
        state = self._state()
        if state != self._seen or not self._metrics:
            self.refresh()
            self._seen = state

    def refresh(self) -> None:
        from .. import urls
        from ..analysis import analyze

        if urls.is_url(self.trace_dir):
            # the window read again, into a store of its own; the last one's is let go
            analysis = analyze(self.trace_dir, self.db)
            try:
                metrics = analysis_metrics(analysis) + sampled_metrics(analysis)
            except BaseException:
                analysis.close()
                raise
            if self._analysis is not None:
                self._analysis.close()
        else:
            # only the traces touched since the last refresh are analysed again (analyze's
            # previous=); the last analysis is kept for that
            analysis = analyze(self.trace_dir, self.db, previous=self._analysis)
            metrics = analysis_metrics(analysis) + sampled_metrics(analysis)
        self._analysis = analysis
        up = _families()[1]("agentscope_last_refresh_timestamp_seconds", "When the source "
                            "was last loaded and analysed")
        up.add_metric([], time.time())
        self._metrics = metrics + [up]
        self.refreshes += 1

    def collect(self) -> Iterable[Any]:
        with self._lock:
            now = time.monotonic()
            if not self._metrics or now - self._at >= self.refresh_s:
                try:
                    self.update()
                except Exception as e:  # a locked store, a vanished file: keep serving
                    self.failures += 1
                    from .._log import log_once

                    log_once(f"serve:{type(e).__name__}", "agentscope serve: could not "
                             "analyse %s again (%r); serving the last result", self.name,
                             e)
            metrics = list(self._metrics)
        failed = _families()[0]("agentscope_refresh_failures", "Times serve could not load "
                                "and analyse the source again")
        failed.add_metric([], self.failures)
        return iter(metrics + [failed])


class _Fixed:
    def __init__(self, metrics: list) -> None:
        self.metrics = metrics

    def collect(self) -> Iterable[Any]:
        return iter(self.metrics)


def registry_for(analysis: Any) -> Any:
    """A registry holding the metrics of ``analysis`` and the latest samples of its store."""
    from prometheus_client import CollectorRegistry

    registry = CollectorRegistry(auto_describe=False)
    metrics = analysis_metrics(analysis) + sampled_metrics(analysis)
    registry.register(_Fixed(metrics))
    return registry


def push(url: str, job: str, analysis: Any, timeout: float = 30) -> None:
    """Push the metrics of ``analysis`` to a Prometheus Pushgateway at ``url``, replacing
    ``job``'s (raises on a failure)."""
    from prometheus_client import push_to_gateway

    push_to_gateway(url, job=job, registry=registry_for(analysis), timeout=timeout)


# the scrape server: a listen queue for a burst of scrapers (Python's default is 5: SYNs past
# it are dropped and retried a second or more later), and a deadline on every connection
SCRAPE_BACKLOG = 256
SCRAPE_TIMEOUT_S = 10.0
# an answer rendered this recently is sent again: a burst of scrapes renders it once (the
# exposition of a large fleet takes ~0.1 s of CPU to write, under one interpreter lock)
SCRAPE_REUSE_S = 1.0


def serve(trace_dir: str, db: Optional[str] = None, refresh_s: float = 15.0,
          port: int = 9464, address: str = "127.0.0.1",
          ready: Optional[Callable[[str], None]] = None,
          stop: Optional[threading.Event] = None,
          timeout_s: float = SCRAPE_TIMEOUT_S) -> None:
    """Serve the metrics of ``trace_dir`` on http://ADDRESS:PORT/metrics until SIGINT or
    SIGTERM (or ``stop`` is set). The first analysis runs before the server starts, so its
    errors raise here; ``ready(url)`` is called once it listens. A connection that has not
    sent its request, or not taken its answer, within ``timeout_s`` is closed
    (:func:`metrics_server`)."""
    from prometheus_client import CollectorRegistry

    from .._signals import handle, restore

    registry = CollectorRegistry(auto_describe=False)
    collector = TraceDirCollector(trace_dir, db, refresh_s)
    collector.update()  # (the first scrape, within refresh_s, serves this one)
    registry.register(collector)
    server = metrics_server(registry, port, address, timeout_s)
    stop = stop or threading.Event()
    previous = handle(("SIGINT", "SIGTERM"), lambda *_: stop.set())
    try:
        if ready is not None:
            ready(f"http://{_host(address)}:{server.server_port}/metrics")
        stop.wait()
    finally:
        server.shutdown()
        server.server_close()
        restore(previous)


def metrics_server(registry: Any, port: int = 9464, address: str = "127.0.0.1",
                   timeout_s: float = SCRAPE_TIMEOUT_S) -> Any:
    """Serve ``registry`` on http://ADDRESS:PORT/ (any path; ``/metrics`` by convention) from
    a daemon thread, until ``.shutdown()``; returns the server (``.server_port``: the port,
    when 0 asked for any free one).

    prometheus_client's own ``start_http_server`` listens with Python's default queue of 5
    connections and no deadline: a burst of scrapers has its SYNs dropped (each retried a
    second or more later, past a scraper's timeout), and every half-open connection holds a
    thread for ever. Here the listen queue holds :data:`SCRAPE_BACKLOG`; a connection that has
    not sent its request line and headers, or not read its answer, within ``timeout_s`` is
    closed and its thread ends; each request has a thread of its own (daemon: none outlives
    the process), and the answer is one connection's (HTTP/1.0: no idle keep-alive to hold).
    The answer is prometheus_client's own (``MetricsHandler``'s): the text or OpenMetrics
    format as the scraper's ``Accept`` asks, gzip'ed when its ``Accept-Encoding`` allows,
    ``?name[]=`` filters; one rendered less than :data:`SCRAPE_REUSE_S` ago for the same
    request is sent again, and concurrent scrapes wait for one rendering rather than each
    making its own."""
    family = socket.getaddrinfo(address, port, type=socket.SOCK_STREAM,
                                flags=socket.AI_PASSIVE)[0][0]
    server_class, ipv6_class, handler = _scrape_classes()
    server = (ipv6_class if family == socket.AF_INET6 else server_class)((address, port),
                                                                       handler)
    server.registry = registry
    server.timeout_s = timeout_s
    threading.Thread(target=server.serve_forever, name="agentscope-serve",
                     daemon=True).start()
    return server


def _host(address: str) -> str:
    """``address`` as the host part of a URL (an IPv6 address in brackets)."""
    return f"[{address}]" if ":" in address else address


@functools.lru_cache(maxsize=None)
def _scrape_classes() -> tuple:
    """The server and handler classes, made on first use (prometheus_client and http.server
    are imported only by a process that serves)."""
    import socketserver
    from http.server import ThreadingHTTPServer

    from urllib.parse import parse_qs, urlparse

    from prometheus_client.exposition import MetricsHandler, _bake_output

    from .._log import log

    class ScrapeServer(ThreadingHTTPServer):
        daemon_threads = True
        request_queue_size = SCRAPE_BACKLOG
        registry: Any = None
        timeout_s: float = SCRAPE_TIMEOUT_S
        reuse_s: float = SCRAPE_REUSE_S

        def __init__(self, *args: Any) -> None:
            super().__init__(*args)
            self._rendering = threading.Lock()
            self._answers: dict = {}  # (Accept, Accept-Encoding, query) -> (when, answer)

        def answer(self, accept: Any, encoding: Any, query: str) -> tuple:
            """(status, headers, body) for a scrape, as prometheus_client makes it; one made
            less than ``reuse_s`` ago for the same request is reused."""
            key = (accept, encoding, query)
            with self._rendering:
                hit = self._answers.get(key)
                if hit is not None and time.monotonic() - hit[0] < self.reuse_s:
                    return hit[1]
                got = _bake_output(self.registry, accept, encoding, parse_qs(query), False)
                if len(self._answers) >= 16:  # scrapers send few distinct headers
                    self._answers.clear()
                self._answers[key] = (time.monotonic(), got)
                return got

        def server_bind(self) -> None:
            socketserver.TCPServer.server_bind(self)  # not HTTPServer's: no reverse DNS
            self.server_name, self.server_port = self.server_address[:2]

        def handle_error(self, request: Any, client_address: Any) -> None:
            # a scraper that went away mid-answer, a connection timed out while written to:
            # the connection is closed; no traceback on the operator's terminal
            log.debug("agentscope serve: a scrape from %s failed", client_address,
                      exc_info=True)

    class IPv6ScrapeServer(ScrapeServer):
        address_family = socket.AF_INET6

    class ScrapeHandler(MetricsHandler):
        server: ScrapeServer

        def setup(self) -> None:
            self.timeout = self.server.timeout_s  # StreamRequestHandler: socket's timeout
            super().setup()

        def do_GET(self) -> None:  # MetricsHandler's, with the server's reuse
            status, headers, body = self.server.answer(
                self.headers.get("Accept"), self.headers.get("Accept-Encoding"),
                urlparse(self.path).query)
            self.send_response(int(status.split(" ")[0]))
            for header in headers:
                self.send_header(*header)
            self.end_headers()
            self.wfile.write(body)

    return ScrapeServer, IPv6ScrapeServer, ScrapeHandler
