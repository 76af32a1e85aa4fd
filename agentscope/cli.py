"""The ``agentscope`` command line: a thin client of the library (ARCHITECTURE §6).

Exit codes: 0 ok, 1 the input had problems (the report is still produced), 2 usage error.
"""

from __future__ import annotations

import collections
import contextlib
import json
import sys

import click

from ._version import __version__


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="agentscope")
def main() -> None:
    """agentscope: what really slows each AI agent task down.

    Instrument your agent with agentscope.task / agentscope.stage, run it, then inspect the
    trace directory it wrote.
    """


@main.command()
@click.argument("trace_dir", type=click.Path(file_okay=False, path_type=str))
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table",
              show_default=True, help="Output format.")
@click.option("--max-problems", type=int, default=20, show_default=True,
              help="How many problem lines to print (all are counted).")
def check(trace_dir: str, fmt: str, max_problems: int) -> None:
    """Validate the capture files in TRACE_DIR and summarize what they hold.

    Every bad line is reported with its file and line number; the rest still load.
    Exits 1 if any line had a problem.

    \b
    Example:
        agentscope check traces/
    """
    from .store.tracedir import scan

    try:
        result = scan(trace_dir)
    except FileNotFoundError as e:
        raise click.UsageError(str(e)) from None
    stages = collections.Counter(s.stage or "(none)" for s in result.spans)
    traces = {s.trace_id for s in result.spans}
    drops = _latest(result.samples, "agentscope.capture.spans_dropped")
    if fmt == "json":
        click.echo(json.dumps({
            "trace_dir": trace_dir, "files": len(result.files), "spans": len(result.spans),
            "traces": len(traces), "samples": len(result.samples), "stages": dict(stages),
            "duplicates": result.duplicates, "spans_dropped_by_writers": drops,
            "problems": [{"file": p.path, "line": p.line, "span_id": p.span_id,
                          "reason": p.reason, "torn": p.torn} for p in result.problems],
        }, indent=2))
    else:
        click.echo(f"{trace_dir}: {len(result.files)} files, {len(result.spans)} spans in "
                   f"{len(traces)} traces, {len(result.samples)} samples")
        for name, count in sorted(stages.items(), key=lambda kv: -kv[1]):
            click.echo(f"  {name:<10} {count:>8} spans")
        if result.duplicates:
            click.echo(f"  {result.duplicates} duplicate spans (same trace_id, span_id) ignored")
        if drops:
            click.echo(f"  writers dropped {int(drops)} spans (queue full or write errors)")
        if result.problems:
            click.echo(f"{len(result.problems)} problem lines:", err=True)
            for p in result.problems[:max_problems]:
                click.echo(f"  {p}", err=True)
            if len(result.problems) > max_problems:
                click.echo(f"  ... and {len(result.problems) - max_problems} more", err=True)
    sys.exit(1 if result.problems else 0)


def _keep_freed_memory() -> None:
    """Let this batch process keep and reuse the memory it frees: on this kind of VM a page
    fault costs microseconds, and an analysis of 1M spans otherwise faults in ~2.5 GB (glibc
    gives arrays of a few MB back to the OS when freed, then faults fresh pages for the next).
    The same as MALLOC_MMAP_THRESHOLD_/MALLOC_TRIM_THRESHOLD_/MALLOC_TOP_PAD_; glibc only."""
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        m_trim_threshold, m_top_pad, m_mmap_threshold = -1, -2, -3
        libc.mallopt(m_mmap_threshold, 32 << 20)  # glibc's largest allowed value
        libc.mallopt(m_trim_threshold, 1 << 30)
        libc.mallopt(m_top_pad, 256 << 20)
    except (OSError, AttributeError):
        pass  # not glibc: the defaults are fine, only slower here


def _open_and_load(trace_dir: str, db: "str | None", quiet: bool = False):
    """Open (creating) the store of TRACE_DIR and load what is new, with a progress bar on long
    loads when stderr is a terminal."""
    from pathlib import Path

    from .store.duckdb_store import Store

    root = Path(trace_dir)
    if not root.is_dir():
        raise click.UsageError(f"no such trace directory: {trace_dir}")
    _keep_freed_memory()
    store = Store.for_trace_dir(root, db)
    # DuckDB keeps up to 1 GB of its blocks for reuse instead of returning them to the OS
    # (this is a short-lived batch process: the pages are not faulted in again and again)
    store.con.execute("SET block_allocator_memory = '1GB'")
    found = Store.sources(root)  # looked at once: for the bar's length and for the load
    total = sum(s.path.stat().st_size for s in found[0])
    if not quiet and total > 32 << 20 and sys.stderr.isatty():
        with click.progressbar(length=total, label="loading traces", file=sys.stderr,
                               show_pos=False) as bar:
            report = store.load(root, progress=bar.update, found=found)
    else:
        report = store.load(root, found=found)
    return store, report


@main.command()
@click.argument("trace_dir", type=click.Path(file_okay=False, path_type=str))
@click.option("--format", "fmt", type=click.Choice(["table", "json", "markdown"]),
              default="table", show_default=True, help="Output format.")
@click.option("--db", type=click.Path(dir_okay=False, path_type=str), default=None,
              help="DuckDB file to use [default: TRACE_DIR/.agentscope/agentscope.duckdb].")
@click.option("--limit", type=int, default=20, show_default=True,
              help="Tasks to list in table and markdown output (JSON lists all).")
@click.option("--push-gateway", "push_gateway", default=None, metavar="URL",
              help="Also push the analysis as Prometheus metrics to this Pushgateway "
                   "(e.g. http://localhost:9091), as `agentscope serve` exposes them.")
@click.option("--push-job", default="agentscope", show_default=True,
              help="The Pushgateway job to push under (replaces that job's metrics).")
def analyze(trace_dir: str, fmt: str, db: "str | None", limit: int,
            push_gateway: "str | None", push_job: str) -> None:
    """Load TRACE_DIR into the store and name what limited each task.

    For every task (trace): its critical path, each section classified as gpu, cpu, memory,
    io or queue from measured evidence, the task's shares and bottleneck with a confidence,
    and a fleet summary. Files loaded before are skipped; new lines of growing files are added.

    \b
    Examples:
        agentscope analyze traces/
        agentscope analyze traces/ --format json > report.json
        agentscope analyze traces/ --format markdown >> $GITHUB_STEP_SUMMARY
        agentscope analyze traces/ --push-gateway http://localhost:9091

    Exit code 1 if some input could not be loaded (the report covers the rest).
    """
    pushed = True
    with _analysed(trace_dir, db) as (store, load, analysis, problems):
        if push_gateway:  # before the store closes: the sampled counters come from it
            pushed = _push(push_gateway, push_job, analysis, store)
    if fmt == "json":
        from .analyzers.tasks import gc_paused
        from .exporters.json_report import report

        # indented for a person at a terminal; compact (several times faster) into pipes
        indent = 2 if sys.stdout.isatty() else None
        with gc_paused():
            click.echo(json.dumps(report(analysis, problems, load), indent=indent))
    elif fmt == "markdown":
        from .exporters.table import markdown

        click.echo(markdown(analysis, problems, limit), nl=False)
    else:
        from rich.console import Console

        from .exporters.table import render

        console = Console()
        if not console.is_terminal:
            console = Console(width=120)  # pipes and files: do not squeeze to 80 columns
        render(analysis, problems, console, limit)
    sys.exit(1 if problems or not pushed else 0)


def _push(url: str, job: str, analysis, store) -> bool:
    """Push the analysis's metrics to a Prometheus Pushgateway; a failure is an error on
    stderr (and exit code 1 after the report)."""
    from prometheus_client import push_to_gateway

    from .exporters.prometheus import registry_for

    try:
        push_to_gateway(url, job=job, registry=registry_for(analysis, store.con), timeout=30)
        click.echo(f"pushed the analysis to {url} (job {job})", err=True)
        return True
    except Exception as e:  # the report is still printed
        click.echo(f"agentscope analyze: could not push to {url}: {e}", err=True)
        return False


@contextlib.contextmanager
def _analysed(trace_dir: str, db: "str | None"):
    """Load TRACE_DIR and analyse it: (store, load report, analysis, input problems), the
    store open until the block ends. Says on stderr why there are no tasks, if there are
    none."""
    from .analyzers.pipeline import analyze_store

    store, load = _open_and_load(trace_dir, db)
    try:
        analysis = analyze_store(store)
        problems = store.all_problems()
        _say_why_no_tasks(trace_dir, store, load, analysis)
        yield store, load, analysis, problems
    finally:
        store.close()


def _say_why_no_tasks(trace_dir: str, store, load, analysis) -> None:
    """On stderr: why there is nothing to report, when there is nothing."""
    if load.files_seen == 0:
        click.echo(f"no capture files in {trace_dir} (looked for spans-*.jsonl, samples-*.jsonl "
                   "and OTLP/JSON *.json, *.jsonl); record some with agentscope.init(...)",
                   err=True)
    elif not analysis.tasks:
        samples = store.query("SELECT count(*) FROM samples").fetchall()[0][0]
        if samples:
            click.echo(f"{trace_dir} has {samples} counter samples but no spans: run the "
                       "agent with agentscope.init() (or under `agentscope run`) to record "
                       "its tasks", err=True)


@main.command()
@click.argument("trace_dir", type=click.Path(file_okay=False, path_type=str))
@click.option("--html", "html_path", type=click.Path(dir_okay=False, path_type=str),
              required=True, help="Where to write the report (one self-contained file).")
@click.option("--db", type=click.Path(dir_okay=False, path_type=str), default=None,
              help="DuckDB file to use [default: TRACE_DIR/.agentscope/agentscope.duckdb].")
@click.option("--timelines", type=click.IntRange(min=0), default=100, show_default=True,
              help="Tasks that get a timeline (every span): all when there are no more; else "
                   "the most typical of each bottleneck class, then the slowest.")
def report(trace_dir: str, html_path: str, db: "str | None", timelines: int) -> None:
    """Write a self-contained HTML report of TRACE_DIR (no network needed to view it).

    Fleet views (where the critical-path time went, by stage and lane; latency by bottleneck
    class; the tasks that lost most to each class), a table of every task that sorts and
    filters, and task timelines: every span, the critical path coloured by class, the host's
    counters under it and the evidence in words. The address selects a view:
    FILE#task=3, FILE#q=pytest, FILE#class=io.

    \b
    Example:
        agentscope report traces/ --html report.html

    Exit code 1 if some input could not be loaded (the report covers the rest).
    """
    from .exporters import html_report

    with _analysed(trace_dir, db) as (store, _, analysis, problems):
        data = html_report.write(html_path, analysis, problems, store, timelines,
                                 source=trace_dir)
    click.echo(f"wrote {html_path}: {len(analysis.tasks)} tasks, "
               f"{len(data['timelines'])} with a timeline", err=True)
    sys.exit(1 if problems else 0)


@main.command()
@click.argument("trace_dir", type=click.Path(file_okay=False, path_type=str))
@click.argument("statement")
@click.option("--db", type=click.Path(dir_okay=False, path_type=str), default=None,
              help="DuckDB file [default: TRACE_DIR/.agentscope/agentscope.duckdb].")
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table",
              show_default=True)
def query(trace_dir: str, statement: str, db: "str | None", fmt: str) -> None:
    """Run read-only SQL over the store of TRACE_DIR.

    Tables: spans, samples; views: tasks, critical_path (built by analyze, which runs first if
    the store does not exist yet).

    \b
    Examples:
        agentscope query traces/ "SELECT bottleneck, count(*) FROM tasks GROUP BY ALL"
        agentscope query traces/ "SELECT name, class, duration_s FROM critical_path
                                  WHERE trace_id = '...' ORDER BY seq"
    """
    import duckdb

    from .analyzers.pipeline import analyze_store
    from .store.duckdb_store import Store

    store, _ = _open_and_load(trace_dir, db, quiet=True)
    try:
        analyze_store(store)
        path = store.path
    finally:
        store.close()
    ro = Store(path, read_only=True)
    try:
        cursor = ro.con.execute(statement)
        columns = [d[0] for d in cursor.description or []]
        rows = cursor.fetchall()
    except duckdb.Error as e:
        raise click.UsageError(f"SQL error: {e}") from None
    finally:
        ro.close()
    if fmt == "json":
        click.echo(json.dumps([dict(zip(columns, r)) for r in rows], default=str, indent=2))
    elif fmt == "csv":
        import csv

        w = csv.writer(sys.stdout)
        w.writerow(columns)
        w.writerows(rows)
    else:
        from rich.console import Console
        from rich.table import Table

        table = Table(*columns)
        for r in rows:
            table.add_row(*("" if v is None else str(v) for v in r))
        Console().print(table)


_COLLECT_OPTIONS = [
    click.option("--hz", type=float, default=10.0, show_default=True,
                 help="Samples per second (ARCHITECTURE §6; 100 for short bursts)."),
    click.option("--model-server", "model_servers", multiple=True, metavar="URL",
                 help="Also scrape a vLLM/SGLang Prometheus endpoint, e.g. "
                      "http://127.0.0.1:8000/metrics (repeatable)."),
    click.option("--no-gpu", is_flag=True, help="Do not read NVIDIA GPUs (NVML)."),
    click.option("--no-per-core", is_flag=True,
                 help="Host CPU utilization in total only, not per core."),
    click.option("--proc-root", default="/proc", show_default=True, metavar="DIR",
                 help="Where /proc is (e.g. /host/proc in a container watching its host)."),
]


def _collect_options(f):
    for option in reversed(_COLLECT_OPTIONS):
        f = option(f)
    return f


def _sampler(out: str, pid: "int | None", hz: float, model_servers: tuple,
             no_gpu: bool, no_per_core: bool, proc_root: str):
    from .collectors import Sampler, default_sources

    if not hz > 0:
        raise click.UsageError("--hz must be positive")
    sources, absent = default_sources(pid, root=proc_root, per_core=not no_per_core,
                                      gpus=not no_gpu, model_servers=model_servers)
    for name, reason in absent:
        click.echo(f"agentscope: {name} absent: {reason}", err=True)
    return Sampler(out, sources, absent, interval_s=1.0 / hz)


@main.command()
@click.option("--out", "out", type=click.Path(file_okay=False, path_type=str), required=True,
              help="Trace directory to write the sample files into.")
@click.option("--pid", type=int, default=None,
              help="Also watch this process and its descendants; stop when it exits.")
@click.option("--duration", type=float, default=None, help="Stop after this many seconds.")
@_collect_options
def collect(out: str, pid: "int | None", duration: "float | None", hz: float,
            model_servers: tuple, no_gpu: bool, no_per_core: bool, proc_root: str) -> None:
    """Sample host, process-tree, GPU and model-server counters until stopped (a sidecar).

    Samples go to OUT/samples-<host>-<pid>-<ms>-collector.jsonl, beside the spans of the
    agents writing there; `agentscope analyze OUT` joins them with the critical paths.
    Stops on Ctrl-C / SIGTERM, after --duration, or when --pid exits.

    \b
    Examples:
        agentscope collect --out traces/ --pid 4242
        agentscope collect --out traces/ --hz 100 --model-server localhost:8000
    """
    import os
    import signal
    import threading
    import time

    sampler = _sampler(out, pid, hz, model_servers, no_gpu, no_per_core, proc_root)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda *_: stop.set())
    deadline = None if duration is None else time.monotonic() + duration

    def watch() -> None:
        while not stop.is_set():
            if deadline is not None and time.monotonic() >= deadline:
                stop.set()
            elif pid is not None and not _alive(pid):
                stop.set()
            stop.wait(0.05)

    threading.Thread(target=watch, daemon=True).start()
    click.echo(f"agentscope: sampling {hz:g} times a second into {sampler.path} "
               f"(sources: {', '.join(s.name for s in sampler.sources)})", err=True)
    sampler.run(stop)
    sampler.stop()
    click.echo(f"agentscope: {sampler.samples} samples in {sampler.rounds} rounds "
               f"(pid {os.getpid()})", err=True)


def _alive(pid: int) -> bool:
    import os

    from .collectors.proctree import stat_fields

    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie (exited, not yet reaped) is not running
        with open(f"/proc/{pid}/stat", "rb") as f:
            return stat_fields(f.read())[:1] != [b"Z"]
    except OSError:
        return True


@main.command(context_settings={"ignore_unknown_options": True,
                                "allow_interspersed_args": False})
@click.option("--trace-dir", type=click.Path(file_okay=False, path_type=str), default="traces",
              show_default=True, help="Where the program's spans and the samples go.")
@_collect_options
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def run(trace_dir: str, command: tuple, hz: float, model_servers: tuple, no_gpu: bool,
        no_per_core: bool, proc_root: str) -> None:
    """Run COMMAND with tracing configured and its counters sampled.

    The program finds the trace directory through AGENTSCOPE_TRACE_DIR (agentscope.init()
    needs no argument), so an instrumented program needs no change. Signals (SIGINT, SIGTERM,
    SIGHUP, SIGQUIT, SIGUSR1/2) are forwarded to it (a Ctrl-C at the terminal reaches it
    directly, once); the exit code is its exit code (128 + N if it was killed by signal N);
    the samples are flushed before exiting.

    \b
    Examples:
        agentscope run -- python my_agent.py --tasks 10
        agentscope run --trace-dir traces/ --hz 100 -- ./run_agents.sh
        agentscope analyze traces/
    """
    import os
    import signal
    import subprocess
    import threading

    env = dict(os.environ)
    env["AGENTSCOPE_TRACE_DIR"] = os.path.abspath(trace_dir)
    # sampled here, once; an instrumented program only probes its own interpreter lock
    env["AGENTSCOPE_COLLECT"] = "gil"
    os.makedirs(trace_dir, exist_ok=True)
    try:
        child = subprocess.Popen(list(command), env=env)
    except OSError as e:
        click.echo(f"agentscope run: cannot start {command[0]}: {e.strerror or e}", err=True)
        sys.exit(127 if isinstance(e, FileNotFoundError) else 126)
    forwarded = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1,
                 signal.SIGUSR2)
    for sig in forwarded:
        signal.signal(sig, lambda signum, _frame: _forward(child, signum))
    sampler = None
    try:
        sampler = _sampler(trace_dir, child.pid, hz, model_servers, no_gpu,
                           no_per_core, proc_root)
        stop = threading.Event()
        thread = threading.Thread(target=sampler.run, args=(stop,), daemon=True)
        thread.start()
    except Exception as e:  # the program runs even if sampling cannot
        click.echo(f"agentscope run: not sampling counters ({e})", err=True)
        stop, thread = None, None
    while True:
        try:
            code = child.wait()
            break
        except KeyboardInterrupt:  # forwarded already; keep waiting for the child
            continue
    if stop is not None:
        stop.set()
        thread.join(5.0)
        sampler.stop()
    for sig in forwarded:
        signal.signal(sig, signal.SIG_DFL)
    sys.exit(code if code >= 0 else 128 - code)


@main.command()
@click.argument("trace_dir", type=click.Path(file_okay=False, exists=True, path_type=str))
@click.option("--port", type=click.IntRange(0, 65535), default=9464, show_default=True,
              help="Port of the metrics endpoint (0: any free port).")
@click.option("--address", default="127.0.0.1", show_default=True,
              help="Address to listen on (0.0.0.0: every interface).")
@click.option("--db", type=click.Path(dir_okay=False, path_type=str), default=None,
              help="DuckDB file to use [default: TRACE_DIR/.agentscope/agentscope.duckdb].")
@click.option("--refresh", type=float, default=15.0, show_default=True,
              help="Seconds between loads of what was appended to TRACE_DIR (at a scrape).")
def serve(trace_dir: str, port: int, address: str, db: "str | None", refresh: float) -> None:
    """Expose TRACE_DIR's analysis as Prometheus metrics on http://ADDRESS:PORT/metrics.

    Computed at scrape time: new lines in TRACE_DIR (a live `agentscope run` writing into it)
    are loaded and analysed again, at most every --refresh seconds. Metric names:
    docs/grafana.md. Stops on Ctrl-C or SIGTERM.

    \b
    Examples:
        agentscope serve traces/                      # scrape localhost:9464/metrics
        agentscope serve traces/ --address 0.0.0.0 --port 9464
    """
    import signal
    import threading

    from prometheus_client import CollectorRegistry, start_http_server

    from .exporters.prometheus import TraceDirCollector

    registry = CollectorRegistry(auto_describe=False)
    collector = TraceDirCollector(trace_dir, db, refresh)
    collector.refresh()  # a first analysis now: errors show here, not at the first scrape
    registry.register(collector)
    server, thread = start_http_server(port, addr=address, registry=registry)
    click.echo(f"agentscope: serving metrics of {trace_dir} on "
               f"http://{address}:{server.server_port}/metrics", err=True)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    server.shutdown()


@main.group()
def export() -> None:
    """Export for other tools: Grafana dashboards, OTLP metrics.

    \b
    Examples:
        agentscope export grafana --out grafana/
        agentscope export otlp-metrics traces/ --endpoint http://localhost:4318/v1/metrics
    """


@export.command("grafana")
@click.option("--out", type=click.Path(file_okay=False, path_type=str), required=True,
              help="Folder to write dashboards/*.json and provisioning/dashboards/*.yaml into.")
def export_grafana(out: str) -> None:
    """Write Grafana dashboards over `agentscope serve`'s metrics, and a provisioning file.

    The fleet overview (where the critical-path time goes, GPU idle and why, orchestration
    share, tasks per hour, tail latency by lane) and a hosts-and-GPUs view. Each panel
    queries the Prometheus data source picked by the dashboard's `datasource` variable.
    Wiring it up: docs/grafana.md."""
    from .exporters.grafana import write

    for path in write(out):
        click.echo(str(path))


@export.command("otlp-metrics")
@click.argument("trace_dir", type=click.Path(file_okay=False, exists=True, path_type=str))
@click.option("--endpoint", default=None, metavar="URL",
              help="OTLP/HTTP metrics endpoint [default: $OTEL_EXPORTER_OTLP_METRICS_ENDPOINT, "
                   "else $OTEL_EXPORTER_OTLP_ENDPOINT/v1/metrics, else "
                   "http://localhost:4318/v1/metrics].")
@click.option("--header", "headers", multiple=True, metavar="KEY=VALUE",
              help="An HTTP header to send (repeatable), e.g. an API key.")
@click.option("--db", type=click.Path(dir_okay=False, path_type=str), default=None,
              help="DuckDB file to use [default: TRACE_DIR/.agentscope/agentscope.duckdb].")
def export_otlp_metrics(trace_dir: str, endpoint: "str | None", headers: tuple,
                        db: "str | None") -> None:
    """Analyse TRACE_DIR and send its metrics once over OTLP/HTTP (protobuf).

    The same values as `agentscope serve`, under OpenTelemetry names (agentscope.tasks,
    agentscope.task.duration, agentscope.critical_path, system.cpu.utilization, ...)."""
    import os

    from .exporters.otlp_metrics import request, send

    if endpoint is None:
        endpoint = os.environ.get("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT") or (
            os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"].rstrip("/") + "/v1/metrics"
            if os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") else
            "http://localhost:4318/v1/metrics")
    extra = {}
    for h in headers:
        key, sep, value = h.partition("=")
        if not sep:
            raise click.UsageError(f"--header wants KEY=VALUE, not {h!r}")
        extra[key.strip()] = value.strip()
    with _analysed(trace_dir, db) as (store, _, analysis, _problems):
        req = request(analysis, store.con)
    points = sum(len(getattr(m, m.WhichOneof("data")).data_points)
                 for m in req.resource_metrics[0].scope_metrics[0].metrics)
    try:
        status = send(endpoint, req, headers=extra)
    except Exception as e:
        click.echo(f"agentscope export otlp-metrics: could not send to {endpoint}: {e}",
                   err=True)
        sys.exit(1)
    click.echo(f"sent {len(req.resource_metrics[0].scope_metrics[0].metrics)} metrics "
               f"({points} points) to {endpoint}: HTTP {status}", err=True)


@main.group()
def scenarios() -> None:
    """Labelled scenarios: agents whose bottleneck is known, to check the verdicts.

    \b
    Examples:
        agentscope scenarios list
        agentscope scenarios run io-db --out runs/io-db
        agentscope scenarios run all --out runs/ --load 2
        agentscope scenarios score runs/
    """


@scenarios.command("list")
def scenarios_list() -> None:
    """Name every scenario, the class its tasks are built to have, and what it does."""
    from .scenarios import GPU_MISSING, catalogue

    for s in catalogue().values():
        click.echo(f"{s.name:<20} {s.expect:<7} {s.about}")
    click.echo(f"\n{GPU_MISSING}")


@scenarios.command("run")
@click.argument("name")
@click.option("--out", type=click.Path(file_okay=False, path_type=str), required=True,
              help="Trace directory to record into (with NAME all: one folder per scenario "
                   "below it).")
@click.option("--tasks", type=click.IntRange(min=1), default=4, show_default=True,
              help="Tasks per scenario (times the load level for most).")
@click.option("--load", type=click.IntRange(min=1), default=1, show_default=True,
              help="Load level: how many tasks run at once, as a multiple of the "
                   "scenario's own.")
@click.option("--hz", type=float, default=10.0, show_default=True,
              help="Counter samples per second.")
def scenarios_run(name: str, out: str, tasks: int, load: int, hz: float) -> None:
    """Record scenario NAME (or all) with counters on and its ground truth beside it.

    Exits 0 when every scenario ran; a scenario this machine cannot produce (e.g. no disk
    under --out to page from) is skipped with the reason."""
    import os

    from .scenarios import UNAVAILABLE, catalogue, run as run_scenario

    names = list(catalogue()) if name == "all" else [name]
    unknown = [n for n in names if n not in catalogue()]
    if unknown:
        raise click.UsageError(f"no scenario {unknown[0]!r}; see `agentscope scenarios list`")
    failed = []
    for n in names:
        where = os.path.join(out, n) if name == "all" else out
        click.echo(f"scenario {n} -> {where}", err=True)
        code = run_scenario(n, where, tasks=tasks, load=load, hz=hz)
        if code == UNAVAILABLE:
            click.echo(f"scenario {n}: not produced on this machine (see above)", err=True)
        elif code:
            failed.append(n)
    if failed:
        click.echo(f"failed: {', '.join(failed)}", err=True)
        sys.exit(1)


@scenarios.command("score")
@click.argument("trace_dir", type=click.Path(file_okay=False, exists=True, path_type=str))
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text",
              show_default=True)
def scenarios_score(trace_dir: str, fmt: str) -> None:
    """Analyse TRACE_DIR and score the verdicts against the ground truth recorded there."""
    from .scenarios import describe, score

    try:
        got = score(trace_dir)
    except ValueError as e:
        raise click.UsageError(str(e))
    if fmt == "json":
        click.echo(json.dumps(got.to_json(), indent=2))
    else:
        click.echo(describe(got), nl=False)


def _forward(child, signum: int) -> None:
    import signal

    if signum == signal.SIGINT and _terminal_sent_it_to_the_group():
        return  # Ctrl-C reached the program already (same foreground process group)
    try:
        child.send_signal(signum)
    except (ProcessLookupError, OSError):
        pass


def _terminal_sent_it_to_the_group() -> bool:
    """Whether this process (and so its child, which shares its process group) is in the
    terminal's foreground group: a Ctrl-C from there is delivered to both, so forwarding it
    would interrupt the program twice."""
    import os

    for fd in (0, 1, 2):
        try:
            return os.tcgetpgrp(fd) == os.getpgrp()
        except OSError:
            continue
    return False


def _latest(samples: list, metric: str) -> float:
    """Sum over writer processes of each one's latest cumulative value of ``metric``."""
    latest: dict = {}
    for s in samples:
        if s.metric == metric:
            key = (s.host, s.pid)
            if key not in latest or s.ts_ns >= latest[key][0]:
                latest[key] = (s.ts_ns, s.value)
    return sum(v for _, v in latest.values())


if __name__ == "__main__":  # pragma: no cover
    main()
