"""The things scenario agents wait on, each in its own process (as the real ones would be):

* ``slow-api``: an HTTP API that answers ``GET /wait?s=0.3`` after that many seconds: pure
  waiting, like a remote API or a search service under load. Not instrumented (a third
  party's).
* ``model-server``: an "LLM" with a fixed number of slots on the CPU. A request waits for a
  slot (first come, first served), then decodes its tokens (a real matrix-vector product per
  token, numpy). Its spans join the caller's trace (W3C ``traceparent``) and report the queue
  time the way vLLM does (``gen_ai.latency.time_in_queue`` on one span per request): a span
  labelled ``inference`` that may really have spent its time queued; the span also names the
  requests that held the slots meanwhile (``agentscope.queue.held_by``). ``GET /metrics``
  answers vLLM's Prometheus metrics (see :class:`ServerMetrics`), any other ``GET`` its
  ``/info``. It writes its own truth (slot wait, compute). It listens on
  ``AGENTSCOPE_MODEL_SERVER_PORT`` when that is set (a scenario scraped by ``agentscope run
  --model-server`` must know the port before the server starts), else on a free port.
* ``lock-db PATH SECONDS``: holds an exclusive lock on a SQLite database for that long, like
  a migration or a long writer: readers wait on the database.
* ``llm-server``: a scripted OpenAI-compatible model endpoint (``/v1/chat/completions``,
  answers after the wait its model name asks for) with the slow API's ``/wait`` beside it:
  what the framework scenarios' real clients talk to (llm_server.py).

The JSON handler and the ``get_json``/``post_json`` clients (which pass the current span's
``traceparent``) serve examples/local_services.py too.

``python -m agentscope.scenarios.services NAME ...`` runs one; :class:`Service` starts one and
reads the URL it prints.
"""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from typing import Any, Callable, Optional


class Service:
    """A service in a child process; its first line of output is its URL (or "ready")."""

    def __init__(self, *args: str, env: Optional[dict] = None) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", __name__, *args],
                                     stdout=subprocess.PIPE, text=True,
                                     env=None if env is None else {**os.environ, **env})
        self.url = (self.proc.stdout.readline() if self.proc.stdout else "").strip()
        if not self.url:
            self.proc.kill()
            raise RuntimeError(f"service {args[0]} did not start")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()  # SIGTERM: an instrumented service flushes its spans
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def __enter__(self) -> "Service":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def extract_context(headers: Any) -> Any:
    """The trace context an HTTP request's headers carry (W3C ``traceparent``)."""
    from opentelemetry import propagate

    return propagate.extract({k.lower(): v for k, v in headers.items()})


def get_json(url: str, timeout: float = 60) -> dict:
    """GET with the current span's ``traceparent``."""
    from opentelemetry import propagate

    headers: dict = {}
    propagate.inject(headers)
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers),
                                timeout=timeout) as r:
        return json.load(r)


def post_json(url: str, payload: dict, timeout: float = 60) -> dict:
    """POST JSON with the current span's ``traceparent``."""
    from opentelemetry import propagate

    headers = {"Content-Type": "application/json"}
    propagate.inject(headers)
    req = urllib.request.Request(url, json.dumps(payload).encode(), headers)
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.load(r)


class JSONHandler(http.server.BaseHTTPRequestHandler):
    """Replies with JSON (or other bytes) and keeps the console quiet."""

    def reply(self, body: bytes, content_type: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def reply_json(self, payload: dict) -> None:
        self.reply(json.dumps(payload).encode(), "application/json")

    def log_message(self, *args: object) -> None:
        pass


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128


def _serve(handler: type, port: int = 0) -> None:
    """Serve on 127.0.0.1:``port`` (0: a free one) until SIGTERM; the first line printed
    is the URL (what :class:`Service` reads)."""
    import signal

    httpd = _Server(("127.0.0.1", port), handler)

    def stop(signum: int, frame: object) -> None:
        threading.Thread(target=httpd.shutdown).start()

    signal.signal(signal.SIGTERM, stop)
    print(f"http://127.0.0.1:{httpd.server_port}", flush=True)
    httpd.serve_forever()


def slow_api() -> None:
    class Handler(JSONHandler):
        def do_GET(self) -> None:  # noqa: N802
            q = urllib.parse.parse_qs(urllib.parse.urlparse(self.path).query)
            seconds = float(q.get("s", ["0.25"])[0])
            time.sleep(seconds)
            self.reply_json({"waited_s": seconds})

    _serve(Handler)


class Model:
    """A small "language model" on the CPU: one hidden-state update per token, a real
    matrix-vector product (``hidden`` squared multiply-adds)."""

    def __init__(self, hidden: int = 768) -> None:
        import numpy as np

        rng = np.random.default_rng(7)
        self.w = (rng.standard_normal((hidden, hidden)) / hidden ** 0.5).astype(np.float32)
        self.np = np

    def decode(self, prompt_tokens: int, max_tokens: int,
               on_token: Optional[Callable[[], None]] = None) -> float:
        """Generate ``max_tokens`` tokens; ``on_token`` is called after each (the server
        counts them for its KV-cache gauge and times the first)."""
        np = self.np
        state = np.full(self.w.shape[0], (prompt_tokens % 97) / 97.0, dtype=np.float32)
        for _ in range(max_tokens):
            state = np.tanh(self.w @ state)
            if on_token is not None:
                on_token()
        return float(state[0])


MODEL_NAME = "cpu-mlp-768"
# the nominal KV cache: what one slot holds, a 32k-token context (a batch generation here
# runs to some 20,000 tokens at ~30 µs a token); the usage gauge is the running requests'
# tokens, prompt and generated so far, over slots × this
KV_TOKENS_PER_SLOT = 32768
# the queue-time and time-to-first-token buckets: this server's requests take milliseconds
# to seconds, not vLLM's minutes (the names and labels are vLLM's, the buckets our own)
LATENCY_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
                   30.0, 60.0)
PORT_VARIABLE = "AGENTSCOPE_MODEL_SERVER_PORT"  # the port the model server listens on
QUEUE_RESOURCE = "agentscope.queue.resource"
QUEUE_HELD_BY = "agentscope.queue.held_by"


class Request:
    """One request at the model server: whose (its trace id) and how many tokens it holds
    in the KV cache."""

    __slots__ = ("trace_id", "prompt_tokens", "generated")

    def __init__(self, trace_id: str, prompt_tokens: int) -> None:
        self.trace_id = trace_id
        self.prompt_tokens = prompt_tokens
        self.generated = 0  # written by its own handler thread only; read by scrapes

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.generated


class Slots:
    """The server's ``n`` slots, first come first served, and who holds them.

    Besides handing out slots (as a semaphore would), it remembers, for each request waiting,
    the trace ids of every request that held a slot at any moment of its wait: the ones
    holding when it arrived and each one that got a slot before it did. That is what a span
    can say about *why* it queued (``agentscope.queue.held_by``), and what the scrape's
    running/waiting gauges count. One condition guards it all."""

    def __init__(self, n: int) -> None:
        self.n = n
        self._cond = threading.Condition()
        self._holding: dict = {}  # Request -> None, in the order they got a slot
        self._waiting: dict = {}  # Request -> {trace id: None} seen holding, in arrival order

    def acquire(self, req: Request) -> list:
        """Wait for a slot; returns the trace ids that held one while ``req`` waited
        (empty if a slot was free and nobody was ahead)."""
        with self._cond:
            seen = self._waiting[req] = dict.fromkeys(r.trace_id for r in self._holding)
            waited = False
            while len(self._holding) >= self.n or next(iter(self._waiting)) is not req:
                waited = True
                self._cond.wait()
            del self._waiting[req]
            self._holding[req] = None
            for others in self._waiting.values():
                others[req.trace_id] = None
            self._cond.notify_all()  # with free slots left, the next in line may go too
        return list(seen) if waited else []

    def release(self, req: Request) -> None:
        with self._cond:
            del self._holding[req]
            self._cond.notify_all()

    def snapshot(self) -> tuple:
        """(requests running, requests waiting, tokens the running ones hold)."""
        with self._cond:
            return (len(self._holding), len(self._waiting),
                    sum(r.tokens for r in self._holding))


class ServerMetrics:
    """What ``GET /metrics`` answers: vLLM's metric names, with its ``model_name`` label, so
    that ``agentscope run --model-server`` (collectors/modelserver.py) scrapes this server as
    it would a vLLM: the gauges ``vllm:num_requests_running``, ``vllm:num_requests_waiting``,
    ``vllm:kv_cache_usage_perc`` (0..1, see :data:`KV_TOKENS_PER_SLOT`), the counter
    ``vllm:num_preemptions_total`` (always 0: a request keeps its slot to the end) and the
    histograms ``vllm:request_queue_time_seconds`` and ``vllm:time_to_first_token_seconds``
    (from arrival to the first token computed). The gauges are read from the slots at each
    scrape."""

    def __init__(self, slots: Slots) -> None:
        from prometheus_client import CollectorRegistry, Counter, Histogram

        self.slots = slots
        self.registry = CollectorRegistry()
        self.registry.register(self)  # the gauges: collect() below
        label = ["model_name"]
        self._queue = Histogram("vllm:request_queue_time_seconds", "Time spent waiting for a "
                                "slot", label, registry=self.registry,
                                buckets=LATENCY_BUCKETS).labels(MODEL_NAME)
        self._ttft = Histogram("vllm:time_to_first_token_seconds", "Time from arrival to the "
                               "first token", label, registry=self.registry,
                               buckets=LATENCY_BUCKETS).labels(MODEL_NAME)
        Counter("vllm:num_preemptions", "Requests preempted (never, here)", label,
                registry=self.registry).labels(MODEL_NAME)

    def queued(self, seconds: float) -> None:
        self._queue.observe(seconds)

    def first_token(self, seconds: float) -> None:
        self._ttft.observe(seconds)

    def collect(self) -> Any:
        from prometheus_client.core import GaugeMetricFamily

        running, waiting, tokens = self.slots.snapshot()
        kv = min(1.0, tokens / (self.slots.n * KV_TOKENS_PER_SLOT))
        for name, about, value in (
                ("vllm:num_requests_running", "Requests holding a slot", running),
                ("vllm:num_requests_waiting", "Requests waiting for a slot", waiting),
                ("vllm:kv_cache_usage_perc", "KV cache in use, 0..1 (nominal: "
                 f"{KV_TOKENS_PER_SLOT} tokens a slot)", kv)):
            family = GaugeMetricFamily(name, about, labels=["model_name"])
            family.add_metric([MODEL_NAME], value)
            yield family

    def exposition(self) -> tuple:
        """(body, content type) of a scrape."""
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return generate_latest(self.registry), CONTENT_TYPE_LATEST


def queue_attributes(held_by: list) -> dict:
    """The span attributes that say which resource a request queued for, and who held it
    meanwhile (absent when it did not wait)."""
    attrs: dict = {QUEUE_RESOURCE: "model-server"}
    if held_by:
        attrs[QUEUE_HELD_BY] = held_by
    return attrs


def model_server(slots: int, hidden: int = 768) -> None:
    from opentelemetry import context as otel_context

    import agentscope

    from .truth import Recorder

    agentscope.init(service="model-server")
    rec = Recorder(os.environ.get("AGENTSCOPE_TRACE_DIR", "."),
                   os.environ.get("AGENTSCOPE_SCENARIO", "?"))
    model = Model(hidden)
    t0 = time.perf_counter()
    model.decode(1, 200)
    per_token_s = (time.perf_counter() - t0) / 200
    board = Slots(slots)
    metrics = ServerMetrics(board)

    class Handler(JSONHandler):
        def do_GET(self) -> None:  # noqa: N802
            if urllib.parse.urlparse(self.path).path == "/metrics":
                self.reply(*metrics.exposition())
            else:
                self.reply_json({"per_token_s": per_token_s, "slots": slots})

        def do_POST(self) -> None:  # noqa: N802
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            token = otel_context.attach(extract_context(self.headers))
            try:
                # one span per request, as vLLM's: it covers the wait for a slot too, and
                # says how long that was in gen_ai.latency.time_in_queue
                with agentscope.stage("inference", name="llm_request", model=MODEL_NAME,
                                      input_tokens=body.get("prompt_tokens", 0),
                                      output_tokens=body["max_tokens"]) as span:
                    req = Request(f"{span.get_span_context().trace_id:032x}",
                                  body.get("prompt_tokens", 0))
                    t0 = time.perf_counter()
                    held_by = board.acquire(req)
                    t1 = time.perf_counter()
                    metrics.queued(t1 - t0)
                    try:
                        model.decode(req.prompt_tokens, body["max_tokens"],
                                     _token_counter(req, metrics, t0))
                    finally:
                        board.release(req)
                    t2 = time.perf_counter()
                    span.set_attribute("gen_ai.latency.time_in_queue", t1 - t0)
                    span.set_attributes(queue_attributes(held_by))
                rec.span(span, {"queue": t1 - t0, "cpu": t2 - t1})
            finally:
                otel_context.detach(token)
            self.reply_json({"queue_s": t1 - t0, "compute_s": t2 - t1})

    try:
        _serve(Handler, int(os.environ.get(PORT_VARIABLE) or 0))
    finally:
        rec.close()
        agentscope.shutdown()


def _token_counter(req: Request, metrics: ServerMetrics, arrived: float) -> Callable[[], None]:
    """What the decode loop calls after each token: the request's count grows (the KV-cache
    gauge), and the first one's time since arrival is the time to first token."""
    def token() -> None:
        req.generated += 1
        if req.generated == 1:
            metrics.first_token(time.perf_counter() - arrived)
    return token


def lock_db(path: str, seconds: float) -> None:
    import sqlite3

    con = sqlite3.connect(path, isolation_level=None)
    con.execute("BEGIN EXCLUSIVE")
    con.execute("UPDATE kv SET v = v + 1 WHERE k = 'migrations'")
    print("locked", flush=True)
    time.sleep(seconds)
    con.execute("COMMIT")
    con.close()


def main(argv: "list[str] | None" = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    what = args[0] if args else ""
    if what == "slow-api":
        slow_api()
    elif what == "model-server":
        model_server(int(args[1]) if len(args) > 1 else 1,
                     int(args[2]) if len(args) > 2 else 768)
    elif what == "lock-db":
        lock_db(args[1], float(args[2]))
    elif what == "llm-server":  # the scripted OpenAI-compatible endpoint (llm_server.py)
        from .llm_server import serve

        serve()
    else:
        sys.exit("usage: python -m agentscope.scenarios.services "
                 "slow-api | model-server [SLOTS [HIDDEN]] | lock-db PATH SECONDS | llm-server")


if __name__ == "__main__":
    main()
