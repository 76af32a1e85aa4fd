"""A scripted, local OpenAI-compatible model endpoint for the framework scenarios: the real
``openai`` client and the OpenAI Agents SDK talk to it as to api.openai.com, and it answers
the same way every time, after a known wait (a sleep: ~0 CPU, like a remote model server).

``python -m agentscope.scenarios.services llm-server`` runs it in its own process (see
services.Service); its first line of output is its URL.

* ``POST /v1/chat/completions``: the wait comes from the request's ``model`` name: a name
  ending in ``sleep-<seconds>`` (``fake-sleep-0.25``) is answered after that many seconds,
  any other name at once. The answer: when the request offers ``tools`` and the conversation
  holds no tool result yet (no ``role: tool`` message), a call of the first offered tool
  (arguments ``metadata.tool_arguments`` if the request has them, else ``{}``); otherwise a
  final text answer naming the last tool result. ``usage`` counts tokens as about four
  characters each. Streaming is not offered (400).
* ``GET /wait?s=SECONDS``: answers ``{"waited_s": SECONDS}`` after that long: a slow HTTP
  API for the scenarios' tools.

Not instrumented: it is the third party's server, as api.openai.com would be.
"""

from __future__ import annotations

import itertools
import json
import re
import threading
import time
import urllib.parse
from typing import Any

from .services import JSONHandler, _serve

_SLEEP = re.compile(r"sleep-(\d+(?:\.\d+)?)$")
MAX_WAIT_S = 60.0


def latency_of(model: str) -> float:
    """The seconds a request for ``model`` waits before its answer (see the module)."""
    m = _SLEEP.search(model or "")
    return min(float(m.group(1)), MAX_WAIT_S) if m else 0.0


def _tokens(text: str) -> int:
    return max(1, len(text) // 4)


def completion(body: dict, n: int, now: int) -> dict:
    """The ``chat.completion`` answering request ``body`` (the ``n``-th of the server)."""
    messages = body.get("messages") or []
    tools = [t for t in body.get("tools") or [] if t.get("type") == "function"]
    results = [m for m in messages if m.get("role") == "tool"]
    prompt = _tokens(json.dumps(messages)) + (_tokens(json.dumps(tools)) if tools else 0)
    if tools and not results:
        arguments = (body.get("metadata") or {}).get("tool_arguments", "{}")
        message: dict = {"role": "assistant", "content": None, "tool_calls": [{
            "id": f"call_{n:06d}", "type": "function",
            "function": {"name": tools[0]["function"]["name"], "arguments": arguments}}]}
        finish, produced = "tool_calls", _tokens(arguments) + 8
    else:
        last = results[-1].get("content") if results else None
        text = "Done." if last is None else f"Done: {str(last)[:80]}"
        message = {"role": "assistant", "content": text}
        finish, produced = "stop", _tokens(text)
    return {"id": f"chatcmpl-{n:06d}", "object": "chat.completion", "created": now,
            "model": body.get("model", ""), "system_fingerprint": "scripted",
            "choices": [{"index": 0, "message": message, "finish_reason": finish,
                         "logprobs": None}],
            "usage": {"prompt_tokens": prompt, "completion_tokens": produced,
                      "total_tokens": prompt + produced}}


class Handler(JSONHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the clients expect of an API
    counter = itertools.count(1)
    lock = threading.Lock()

    def do_GET(self) -> None:  # noqa: N802
        url = urllib.parse.urlparse(self.path)
        if url.path != "/wait":
            self.reply_error(404, f"no {url.path}")
            return
        q = urllib.parse.parse_qs(url.query)
        try:
            seconds = min(float(q.get("s", ["0.25"])[0]), MAX_WAIT_S)
        except ValueError:
            self.reply_error(400, "s: seconds, a number")
            return
        time.sleep(seconds)
        self.reply_json({"waited_s": seconds})

    def do_POST(self) -> None:  # noqa: N802
        path = urllib.parse.urlparse(self.path).path.rstrip("/")
        try:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
        except ValueError:
            self.reply_error(400, "the body is not JSON")
            return
        if path != "/v1/chat/completions":
            self.reply_error(404, f"no {path} here: only /v1/chat/completions")
            return
        if body.get("stream"):
            self.reply_error(400, "streaming is not offered by this scripted server")
            return
        with self.lock:
            n = next(self.counter)
        time.sleep(latency_of(body.get("model", "")))
        self.reply_json(completion(body, n, int(time.time())))

    def reply_error(self, code: int, message: str) -> None:
        payload: Any = {"error": {"message": message, "type": "invalid_request_error"}}
        data = json.dumps(payload).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def serve() -> None:
    """Serve on a free port of 127.0.0.1 until SIGTERM (prints the URL first)."""
    _serve(Handler)
