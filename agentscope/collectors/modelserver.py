"""A model server's Prometheus endpoint (vLLM, SGLang), scraped over HTTP.

Readings (``device`` = the endpoint's ``host:port``, so several servers can share a directory):

* ``model_server.requests.running`` / ``model_server.requests.waiting``: requests being
  served / queued (vLLM ``vllm:num_requests_running`` / ``vllm:num_requests_waiting``, SGLang
  ``sglang:num_running_reqs`` / ``sglang:num_queue_reqs``);
* ``model_server.kv_cache.usage`` (0..1; vLLM ``vllm:kv_cache_usage_perc``, older
  ``vllm:gpu_cache_usage_perc``, SGLang ``sglang:token_usage``);
* ``model_server.preemptions``: requests preempted per second (vLLM
  ``vllm:num_preemptions_total``): the KV cache ran out;
* ``model_server.time_to_first_token`` and ``model_server.queue_time``: mean seconds over
  the interval, from the histograms' ``_sum``/``_count`` (``vllm:time_to_first_token_seconds``,
  ``vllm:request_queue_time_seconds``, ``sglang:time_to_first_token_seconds``).

Series with several label sets (one per model) are summed, except the KV-cache usage, of
which the highest is kept. A scrape that fails raises (the sampler counts it and goes on: the
server may come up later). Scrapes run on their own thread (``background``), every
``min_interval_s`` (default 0.25 s), so an unreachable server never delays the other sources.
"""

from __future__ import annotations

import math
import urllib.request
from typing import Iterator, Optional
from urllib.parse import urlparse

from ..metric_names import (
    MODEL_SERVER_KV_CACHE_USAGE,
    MODEL_SERVER_PREEMPTIONS,
    MODEL_SERVER_QUEUE_TIME,
    MODEL_SERVER_REQUESTS_RUNNING,
    MODEL_SERVER_REQUESTS_WAITING,
    MODEL_SERVER_TIME_TO_FIRST_TOKEN,
    SOURCE_MODEL_SERVER,
)
from .base import Deltas, Reading

GAUGES = {
    "vllm:num_requests_running": MODEL_SERVER_REQUESTS_RUNNING,
    "vllm:num_requests_waiting": MODEL_SERVER_REQUESTS_WAITING,
    "sglang:num_running_reqs": MODEL_SERVER_REQUESTS_RUNNING,
    "sglang:num_queue_reqs": MODEL_SERVER_REQUESTS_WAITING,
}
KV_USAGE = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "sglang:token_usage")
COUNTERS = {"vllm:num_preemptions_total": MODEL_SERVER_PREEMPTIONS,
            "vllm:num_preemptions": MODEL_SERVER_PREEMPTIONS}
HISTOGRAMS = {
    "vllm:time_to_first_token_seconds": MODEL_SERVER_TIME_TO_FIRST_TOKEN,
    "sglang:time_to_first_token_seconds": MODEL_SERVER_TIME_TO_FIRST_TOKEN,
    "vllm:request_queue_time_seconds": MODEL_SERVER_QUEUE_TIME,
}


def parse_text(text: str) -> Iterator[tuple]:
    """(name, labels dict, value) of each sample of a Prometheus text exposition."""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        brace = line.find("{")
        space = line.find(" ")
        labels: dict = {}
        if brace != -1 and (space == -1 or brace < space):
            name = line[:brace]
            end, labels = _labels(line, brace + 1)
            rest = line[end + 1:].split()
        else:
            name, _, tail = line.partition(" ")
            rest = tail.split()
        if not rest:
            continue
        try:
            value = float(rest[0])
        except ValueError:
            continue
        yield name, labels, value


def _labels(line: str, i: int) -> tuple:
    labels = {}
    n = len(line)
    while i < n:
        while i < n and line[i] in " ,":
            i += 1
        if i < n and line[i] == "}":
            return i, labels
        eq = line.find("=", i)
        if eq == -1:
            break
        key = line[i:eq].strip()
        i = eq + 1
        if i < n and line[i] == '"':
            i += 1
            buf = []
            while i < n and line[i] != '"':
                if line[i] == "\\" and i + 1 < n:
                    i += 1
                    buf.append({"n": "\n"}.get(line[i], line[i]))
                else:
                    buf.append(line[i])
                i += 1
            labels[key] = "".join(buf)
            i += 1
    return line.find("}", i) if line.find("}", i) != -1 else n, labels


class PrometheusEndpoint:
    """Scrape ``url`` (e.g. ``http://127.0.0.1:8000/metrics``)."""

    name = SOURCE_MODEL_SERVER
    background = True  # an HTTP scrape may block: the sampler gives it its own thread

    def __init__(self, url: str, timeout_s: float = 0.5, min_interval_s: float = 0.25) -> None:
        self.url = url if "://" in url else f"http://{url}"
        if not urlparse(self.url).path or urlparse(self.url).path == "/":
            self.url = self.url.rstrip("/") + "/metrics"
        self.device = urlparse(self.url).netloc
        self.timeout_s = timeout_s
        self.min_interval_s = min_interval_s
        self.deltas = Deltas()

    def scrape(self) -> str:
        with urllib.request.urlopen(self.url, timeout=self.timeout_s) as r:  # noqa: S310
            return r.read().decode("utf-8", "replace")

    def sample(self, now_ns: int) -> list:
        return self.readings(self.scrape(), now_ns)

    def readings(self, text: str, now_ns: int) -> list:
        gauges: dict = {}
        kv: Optional[float] = None
        counters: dict = {}
        hist: dict = {}
        for name, _labels, value in parse_text(text):
            if math.isnan(value):
                continue
            if name in GAUGES:
                gauges[GAUGES[name]] = gauges.get(GAUGES[name], 0.0) + value
            elif name in KV_USAGE:
                kv = value if kv is None else max(kv, value)
            elif name in COUNTERS:
                counters[COUNTERS[name]] = counters.get(COUNTERS[name], 0.0) + value
            else:
                base, _, part = name.rpartition("_")
                if part in ("sum", "count") and base in HISTOGRAMS:
                    key = (HISTOGRAMS[base], part)
                    hist[key] = hist.get(key, 0.0) + value
        dev = self.device
        out = [Reading(m, v, dev) for m, v in gauges.items()]
        if kv is not None:
            out.append(Reading(MODEL_SERVER_KV_CACHE_USAGE, kv, dev))
        for metric, total in counters.items():
            rate = self.deltas.rate(metric, total, now_ns)
            if rate is not None:
                out.append(Reading(metric, rate, dev))
        for metric in {m for m, _ in hist}:
            s, c = hist.get((metric, "sum")), hist.get((metric, "count"))
            if s is None or c is None:
                continue
            ds = self.deltas.delta((metric, "sum"), s, now_ns)
            dc = self.deltas.delta((metric, "count"), c, now_ns)
            if ds is not None and dc is not None and dc[0] > 0:
                out.append(Reading(metric, ds[0] / dc[0], dev))
        return out
