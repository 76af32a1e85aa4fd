"""The things scenario agents wait on, each in its own process (as the real ones would be):

* ``slow-api``: an HTTP API that answers ``GET /wait?s=0.3`` after that many seconds: pure
  waiting, like a remote API or a search service under load. Not instrumented (a third
  party's).
* ``model-server``: an "LLM" with a fixed number of slots on the CPU. A request waits for a
  slot, then decodes its tokens (a real matrix-vector product per token, numpy). Its spans
  join the caller's trace (W3C ``traceparent``) and report the queue time the way vLLM does
  (``gen_ai.latency.time_in_queue`` on one span per request): a span labelled ``inference``
  that may really have spent its time queued. It writes its own truth (slot wait, compute).
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
from typing import Any, Optional


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
    """Replies with JSON and keeps the console quiet."""

    def reply_json(self, payload: dict) -> None:
        body = json.dumps(payload).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128


def _serve(handler: type) -> None:
    import signal

    httpd = _Server(("127.0.0.1", 0), handler)

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

    def decode(self, prompt_tokens: int, max_tokens: int) -> float:
        np = self.np
        state = np.full(self.w.shape[0], (prompt_tokens % 97) / 97.0, dtype=np.float32)
        for _ in range(max_tokens):
            state = np.tanh(self.w @ state)
        return float(state[0])


def model_server(slots: int) -> None:
    from opentelemetry import context as otel_context

    import agentscope

    from .truth import Recorder

    agentscope.init(service="model-server")
    rec = Recorder(os.environ.get("AGENTSCOPE_TRACE_DIR", "."),
                   os.environ.get("AGENTSCOPE_SCENARIO", "?"))
    model = Model()
    t0 = time.perf_counter()
    model.decode(1, 200)
    per_token_s = (time.perf_counter() - t0) / 200
    slot = threading.Semaphore(slots)

    class Handler(JSONHandler):
        def do_GET(self) -> None:  # noqa: N802
            self.reply_json({"per_token_s": per_token_s, "slots": slots})

        def do_POST(self) -> None:  # noqa: N802
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            token = otel_context.attach(extract_context(self.headers))
            try:
                # one span per request, as vLLM's: it covers the wait for a slot too, and
                # says how long that was in gen_ai.latency.time_in_queue
                with agentscope.stage("inference", name="llm_request", model="cpu-mlp-768",
                                      input_tokens=body.get("prompt_tokens", 0),
                                      output_tokens=body["max_tokens"]) as span:
                    t0 = time.perf_counter()
                    slot.acquire()
                    t1 = time.perf_counter()
                    try:
                        model.decode(body.get("prompt_tokens", 0), body["max_tokens"])
                    finally:
                        slot.release()
                    t2 = time.perf_counter()
                    span.set_attribute("gen_ai.latency.time_in_queue", t1 - t0)
                rec.span(span, {"queue": t1 - t0, "cpu": t2 - t1})
            finally:
                otel_context.detach(token)
            self.reply_json({"queue_s": t1 - t0, "compute_s": t2 - t1})

    try:
        _serve(Handler)
    finally:
        rec.close()
        agentscope.shutdown()


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
        model_server(int(args[1]) if len(args) > 1 else 1)
    elif what == "lock-db":
        lock_db(args[1], float(args[2]))
    elif what == "llm-server":  # the scripted OpenAI-compatible endpoint (llm_server.py)
        from .llm_server import serve

        serve()
    else:
        sys.exit("usage: python -m agentscope.scenarios.services "
                 "slow-api | model-server [SLOTS] | lock-db PATH SECONDS | llm-server")


if __name__ == "__main__":
    main()
