"""Two local HTTP services the example agent talks to, both instrumented with agentscope.

* a **model server** with one inference slot: requests wait in a queue for the slot, then
  "decode" tokens by doing real arithmetic (a small matrix-vector product per token, on the CPU);
  it reports its queue time the way vLLM does (``gen_ai.latency.time_in_queue``);
* a **slow search API** that answers after a fixed delay, like a remote API or a database
  under load: the caller waits, no CPU is used.

Both read the W3C ``traceparent`` header, so their spans join the caller's trace. The model
server runs in its own process (``python local_services.py model-server``), as a real one
would: it finds the trace directory through ``AGENTSCOPE_TRACE_DIR``, which agentscope puts in
the environment of every child process.
"""

from __future__ import annotations

import http.server
import json
import random
import threading
import time
import urllib.parse

from opentelemetry import context as otel_context

import agentscope
# the JSON handler and the clients that pass the current span's traceparent are the scenario
# services' (get_json and post_json are imported from here by agent.py)
from agentscope.scenarios.services import (JSONHandler, extract_context, get_json,  # noqa: F401
                                           post_json)


class ModelServer:
    """A one-slot "LLM" on the CPU. Cost grows with output tokens; waiting grows with load."""

    def __init__(self, hidden: int = 128, slots: int = 1) -> None:
        rng = random.Random(7)
        self.weights = [[rng.uniform(-1, 1) for _ in range(hidden)] for _ in range(hidden)]
        self.slot = threading.Semaphore(slots)
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self.httpd.server_port}/v1/completions"

    def decode(self, prompt_tokens: int, max_tokens: int) -> list[float]:
        state = [((prompt_tokens * 31 + i) % 97) / 97.0 for i in range(len(self.weights))]
        out = []
        for _ in range(max_tokens):
            state = [sum(w * s for w, s in zip(row, state)) / len(row) for row in self.weights]
            state = [x if -1.0 < x < 1.0 else x / (abs(x) + 1.0) for x in state]
            out.append(state[0])
        return out

    def _handler(self):
        server = self

        class Handler(JSONHandler):
            def do_POST(self):  # noqa: N802
                token = otel_context.attach(extract_context(self.headers))
                try:
                    body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                    queued = time.perf_counter()
                    with agentscope.stage("queue", name="model-server.wait-for-slot"):
                        server.slot.acquire()
                    try:
                        waited = time.perf_counter() - queued
                        with agentscope.stage("inference", name="model-server.generate",
                                              model="toy-mlp-128", time_in_queue=waited,
                                              input_tokens=body["prompt_tokens"],
                                              output_tokens=body["max_tokens"]):
                            logits = server.decode(body["prompt_tokens"], body["max_tokens"])
                    finally:
                        server.slot.release()
                finally:
                    otel_context.detach(token)
                self.reply_json({"tokens": len(logits), "queue_s": waited})

        return Handler


class SearchAPI:
    """Answers ``GET /search?q=...`` after ``delay_s``: pure waiting, like a remote API."""

    def __init__(self, delay_s: float = 0.25) -> None:
        self.delay_s = delay_s
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self.httpd.server_port}/search"

    def _handler(self):
        api = self

        class Handler(JSONHandler):
            def do_GET(self):  # noqa: N802
                query = urllib.parse.parse_qs(urllib.parse.urlparse(self.path).query)
                time.sleep(api.delay_s)
                self.reply_json({"q": query.get("q", [""])[0], "hits": 3})

        return Handler


def start(*servers) -> None:
    for s in servers:
        threading.Thread(target=s.httpd.serve_forever, daemon=True, name=type(s).__name__).start()


def stop(*servers) -> None:
    for s in servers:
        s.httpd.shutdown()
        s.httpd.server_close()


class ModelServerProcess:
    """Starts :class:`ModelServer` in a child process and knows its URL."""

    def __init__(self) -> None:
        import subprocess
        import sys

        self.proc = subprocess.Popen([sys.executable, __file__, "model-server"],
                                     stdout=subprocess.PIPE, text=True)
        self.url = self.proc.stdout.readline().strip()
        if not self.url.startswith("http://"):
            raise RuntimeError("the model server did not start")

    def stop(self) -> None:
        self.proc.terminate()  # SIGTERM: the server flushes its spans and exits
        self.proc.wait(10)


def _serve_model() -> None:
    import signal
    import sys

    agentscope.init(service="model-server")
    server = ModelServer()

    def _stop(signum, frame):
        threading.Thread(target=server.httpd.shutdown).start()

    signal.signal(signal.SIGTERM, _stop)
    print(server.url, flush=True)
    server.httpd.serve_forever()
    agentscope.shutdown()
    sys.exit(0)


if __name__ == "__main__":
    import sys

    if sys.argv[1:] == ["model-server"]:
        _serve_model()
