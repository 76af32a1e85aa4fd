"""A scripted, local stand-in for the Anthropic Messages API (``POST /v1/messages``), for the
anthropic-sdk recipe: the ``anthropic`` client talks to it as to api.anthropic.com.

The wait comes from the model's name, as in agentscope's fake OpenAI endpoint: a name ending
in ``sleep-<seconds>`` (``fake-sleep-0.5``) is answered after that many seconds, asleep (no
CPU, like a remote model server). The answer: when the request offers ``tools`` and the
conversation holds no ``tool_result`` yet, a ``tool_use`` block calling the first tool (input
``{}``); otherwise a text answer naming the last tool result. Streaming is not offered (400).

``python examples/recipes/fake_anthropic.py`` serves on a free port of 127.0.0.1 until
SIGTERM; its first line of output is its URL (what fake_llm.py's guard reads).
"""

from __future__ import annotations

import http.server
import itertools
import json
import signal
import threading
import time

from agentscope.scenarios.llm_server import latency_of
from agentscope.scenarios.services import JSONHandler


def _tokens(text: str) -> int:
    return max(1, len(text) // 4)


def _tool_results(messages: list) -> list:
    return [block for m in messages if m.get("role") == "user"
            and isinstance(m.get("content"), list)
            for block in m["content"] if block.get("type") == "tool_result"]


def message(body: dict, n: int) -> dict:
    """The ``message`` answering request ``body`` (the ``n``-th of the server)."""
    messages = body.get("messages") or []
    tools = body.get("tools") or []
    results = _tool_results(messages)
    if tools and not results:
        content: list = [{"type": "tool_use", "id": f"toolu_{n:06d}",
                          "name": tools[0]["name"], "input": {}}]
        stop = "tool_use"
    else:
        last = results[-1].get("content") if results else None
        if isinstance(last, list):  # content blocks
            last = " ".join(b.get("text", "") for b in last if isinstance(b, dict))
        content = [{"type": "text",
                    "text": "Done." if last is None else f"Done: {str(last)[:80]}"}]
        stop = "end_turn"
    return {"id": f"msg_{n:06d}", "type": "message", "role": "assistant",
            "model": body.get("model", ""), "content": content, "stop_reason": stop,
            "stop_sequence": None,
            "usage": {"input_tokens": _tokens(json.dumps(messages) + json.dumps(tools)),
                      "output_tokens": _tokens(json.dumps(content))}}


class Handler(JSONHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the client expects of an API
    counter = itertools.count(1)
    lock = threading.Lock()

    def do_POST(self) -> None:  # noqa: N802
        path = self.path.split("?")[0].rstrip("/")
        try:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
        except ValueError:
            return self.error(400, "the body is not JSON")
        if path != "/v1/messages":
            return self.error(404, f"no {path} here: only /v1/messages")
        if body.get("stream"):
            return self.error(400, "streaming is not offered by this scripted server")
        with self.lock:
            n = next(self.counter)
        time.sleep(latency_of(body.get("model", "")))
        self.reply_json(message(body, n))

    def error(self, code: int, text: str) -> None:
        data = json.dumps({"type": "error", "error": {"type": "invalid_request_error",
                                                      "message": text}}).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def serve() -> None:
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=httpd.shutdown).start())
    print(f"http://127.0.0.1:{httpd.server_port}", flush=True)
    httpd.serve_forever()


if __name__ == "__main__":
    serve()
