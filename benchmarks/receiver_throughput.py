"""Throughput of the live OTLP receiver (`agentscope receive`) on one core.

Generates ``--tasks`` tasks (benchmarks/gen_traces.py, about 104 spans each, with agentscope's
stage and accounting as attributes) and, from the same spans, OTLP requests of ``--batch``
spans: protobuf, gzip'ed protobuf and OTLP/JSON (hex ids, camelCase, as the spec has it). Then
measures, in one run:

  receiver, <encoding>      a Receiver in a child process pinned to one core (CPU 0), fed by
                            ``--clients`` keep-alive HTTP connections from this process (pinned
                            to the other cores): spans acknowledged per second of wall time, and
                            per second of the receiver's own CPU time. Every request is written
                            and fsync'ed before its answer, as in production.
  baseline: load            Store.load of the same spans as an OTLP/JSON lines file (one request
                            per line, the Collector file exporter's layout; the loader's fastest
                            path for OTLP)
  baseline: analyze         agentscope.analyze(dir, db=":memory:") of that file: load + analysis

The receiver only decodes and appends; the baselines are the other way into agentscope of the
same spans, measured on the same machine in the same run.

Usage: python benchmarks/receiver_throughput.py [--tasks 2000] [--batch 512] [--clients 4]
"""

from __future__ import annotations

import argparse
import gzip
import http.client
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gen_traces import generate, otlp_span  # noqa: E402

from agentscope import semconv  # noqa: E402

# the receiver, in a child pinned to one core: prints its port, then, for each line read from
# stdin, its CPU seconds so far and the spans it acknowledged
_CHILD = """
import os, sys, time
from agentscope.collectors.receiver import Receiver
cpu = int(sys.argv[2])
if cpu >= 0:
    os.sched_setaffinity(0, {cpu})
r = Receiver(sys.argv[1], port=0).start()
print(r.port, flush=True)
for _ in sys.stdin:
    print(time.process_time(), r.spans_accepted, flush=True)
r.stop()
"""


def _kv(key, value):
    if isinstance(value, bool):
        return {"key": key, "value": {"boolValue": value}}
    if isinstance(value, int):
        return {"key": key, "value": {"intValue": str(value)}}
    return {"key": key, "value": {"stringValue": str(value)}}


def otlp_json_requests(tasks: int, batch: int) -> tuple:
    """(OTLP/JSON requests of ``batch`` spans, span count) of gen_traces' spans, with the
    stage and every accounting column as attributes (what agentscope's SDK mode sends)."""
    requests, spans, n = [], [], 0

    def flush():
        requests.append({"resourceSpans": [{
            "resource": {"attributes": [_kv("service.name", "bench"), _kv("host.name", "h")]},
            "scopeSpans": [{"scope": {"name": "bench"}, "spans": list(spans)}]}]})
        spans.clear()

    for r in generate(tasks, spans_per_task=104):
        spans.append(otlp_span(r, {attr: getattr(r, col) for col, attr in
                                   semconv.ACCOUNTING_ATTRIBUTES.items()
                                   if getattr(r, col) is not None}))
        n += 1
        if len(spans) >= batch:
            flush()
    if spans:
        flush()
    return requests, n


def to_protobuf(request: dict) -> bytes:
    """The same request as a serialized ExportTraceServiceRequest (ids as bytes)."""
    import base64

    from google.protobuf.json_format import ParseDict
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    doc = json.loads(json.dumps(request))
    for span in doc["resourceSpans"][0]["scopeSpans"][0]["spans"]:
        for key in ("traceId", "spanId", "parentSpanId"):
            if key in span:
                span[key] = base64.b64encode(bytes.fromhex(span[key])).decode()
    return ParseDict(doc, ExportTraceServiceRequest()).SerializeToString()


def measure_receiver(work: Path, name: str, bodies: list, headers: dict, clients: int,
                     n_spans: int) -> tuple:
    """(wall seconds, receiver CPU seconds) to have every body acknowledged."""
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    pin = cpus[0] if len(cpus) > 1 else -1
    child = subprocess.Popen([sys.executable, "-c", _CHILD, str(work / name), str(pin)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        port = int(child.stdout.readline())
        if pin >= 0:  # this process (the clients) on the other cores
            os.sched_setaffinity(0, set(cpus) - {pin})

        def ask() -> tuple:
            child.stdin.write("\n")
            child.stdin.flush()
            cpu, accepted = child.stdout.readline().split()
            return float(cpu), int(accepted)

        warm = http.client.HTTPConnection("127.0.0.1", port)  # imports, first file: not timed
        warm.request("POST", "/v1/traces", body=bodies[0], headers=headers)
        assert warm.getresponse().read() is not None
        warm.close()
        cpu0, accepted0 = ask()
        failures = []

        def client(k: int) -> None:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
            for body in bodies[k::clients]:
                conn.request("POST", "/v1/traces", body=body, headers=headers)
                resp = conn.getresponse()
                resp.read()
                if resp.status != 200:
                    failures.append(resp.status)
            conn.close()

        threads = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.perf_counter() - t0
        cpu1, accepted1 = ask()
        assert not failures, failures[:5]
        assert accepted1 - accepted0 == n_spans, (accepted1 - accepted0, n_spans)
        return wall, cpu1 - cpu0
    finally:
        if cpus:
            os.sched_setaffinity(0, set(cpus))
        child.stdin.close()
        child.wait(60)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", type=int, default=2000)
    ap.add_argument("--batch", type=int, default=512, help="spans per request")
    ap.add_argument("--clients", type=int, default=4, help="concurrent HTTP connections")
    ap.add_argument("--repeat", type=int, default=3,
                    help="interleaved rounds of every step (the median is printed)")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="agentscope-receiver-bench-"))
    try:
        return run(args, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def run(args, work: Path) -> int:
    from agentscope.analysis import analyze
    from agentscope.store.duckdb_store import Store

    requests, n_spans = otlp_json_requests(args.tasks, args.batch)
    json_bodies = [json.dumps(r, separators=(",", ":")).encode() for r in requests]
    proto_bodies = [to_protobuf(r) for r in requests]
    gzip_bodies = [gzip.compress(b, 6) for b in proto_bodies]
    otlp_dir = work / "otlp"
    otlp_dir.mkdir()
    (otlp_dir / "traces.jsonl").write_bytes(b"\n".join(json_bodies) + b"\n")

    figures = {}  # name -> (spans, wall seconds, CPU seconds or None): medians of the rounds
    runs: dict = {}
    steps = (("receiver, protobuf", proto_bodies, {"Content-Type": "application/x-protobuf"}),
             ("receiver, protobuf + gzip", gzip_bodies,
              {"Content-Type": "application/x-protobuf", "Content-Encoding": "gzip"}),
             ("receiver, OTLP/JSON", json_bodies, {"Content-Type": "application/json"}))
    warm = Store(None)  # imports and DuckDB's first use, outside the timings
    warm.load(otlp_dir)
    warm.close()
    for round_no in range(args.repeat):
        for name, bodies, headers in steps:
            wall, cpu = measure_receiver(work, f"{name.replace(' ', '_').replace(',', '')}"
                                         f"_{round_no}", bodies, headers, args.clients,
                                         n_spans)
            runs.setdefault(name, []).append((wall, cpu))
        store = Store(None)
        t0 = time.perf_counter()
        report = store.load(otlp_dir)
        runs.setdefault("baseline: load OTLP/JSON lines", []).append(
            (time.perf_counter() - t0, None))
        store.close()
        assert report.spans_added == n_spans and not report.problems, report.problems[:3]
        t0 = time.perf_counter()
        analysis = analyze(otlp_dir, db=":memory:")
        runs.setdefault("baseline: analyze OTLP/JSON lines", []).append(
            (time.perf_counter() - t0, None))
        assert analysis.summary.spans == n_spans
        analysis.close()
    ranges = {}
    for name, got in runs.items():
        wall = statistics.median(w for w, _ in got)
        cpus = [c for _, c in got if c is not None]
        figures[name] = (n_spans, wall, statistics.median(cpus) if cpus else None)
        ranges[name] = f"{min(w for w, _ in got):.2f}-{max(w for w, _ in got):.2f}"

    mb = {name: sum(map(len, b)) / 1e6 for name, b in (
        ("protobuf", proto_bodies), ("gzip", gzip_bodies), ("JSON", json_bodies))}
    print(f"receiver throughput: {n_spans} spans ({args.tasks} tasks) in {len(requests)} "
          f"requests of {args.batch}; bodies {mb['protobuf']:.1f} MB protobuf, "
          f"{mb['gzip']:.1f} MB gzip'ed, {mb['JSON']:.1f} MB JSON; {args.clients} clients; "
          f"Python {platform.python_version()}, {os.cpu_count()} CPUs")
    print(f"medians of {args.repeat} interleaved rounds (min-max seconds)")
    print(f"{'step':<36}{'spans':>9}{'seconds':>10}{'(min-max)':>13}{'spans/s':>12}{'CPU s':>9}"
          f"{'spans/CPU-s':>13}")
    for name, (n, wall, cpu) in figures.items():
        per_cpu = f"{n / cpu:>13,.0f}" if cpu else f"{'':>13}"
        cpu_s = f"{cpu:>9.3f}" if cpu is not None else f"{'':>9}"
        print(f"{name:<36}{n:>9}{wall:>10.3f}{ranges[name]:>13}{n / wall:>12,.0f}{cpu_s}"
              f"{per_cpu}")
    base = figures["baseline: analyze OTLP/JSON lines"]
    for name in ("receiver, protobuf", "receiver, OTLP/JSON"):
        n, wall, _ = figures[name]
        print(f"{name} vs analyze of the same spans as OTLP/JSON: "
              f"{(n / wall) / (base[0] / base[1]):.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
