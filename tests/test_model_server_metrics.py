"""The scenarios' model server (scenarios/services.py) speaks vLLM's Prometheus metrics, as
collectors/modelserver.py reads them, and its ``inference`` spans name the requests that held
its slot while they queued. A real server process, two real requests, the collector's own
parsing."""

from __future__ import annotations

import json
import socket
import threading
import time
import urllib.request

import pytest

from agentscope import metric_names as mn
from agentscope.collectors.modelserver import PrometheusEndpoint, parse_text
from agentscope.scenarios import catalogue
from agentscope.scenarios.services import (MODEL_NAME, PORT_VARIABLE, QUEUE_HELD_BY,
                                           QUEUE_RESOURCE, Request, Service, Slots)
from agentscope.store.tracedir import scan

FIRST = "4bf92f3577b34da6a3ce929d0e0e4736"  # the trace ids the two requests carry
SECOND = "0af7651916cd43dd8448eb211c80319c"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _scrape(url: str) -> tuple:
    """(the exposition's text, {metric name: value} of its samples labelled with our model)."""
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as r:
        assert r.headers["Content-Type"].startswith("text/plain")
        text = r.read().decode()
    values = {}
    for name, labels, value in parse_text(text):
        if labels.get("model_name") == MODEL_NAME and "le" not in labels:
            values[name] = value
    return text, values


def _until(url: str, ready, timeout: float = 30) -> dict:
    end = time.monotonic() + timeout
    while True:
        values = _scrape(url)[1]
        if ready(values):
            return values
        assert time.monotonic() < end, values
        time.sleep(0.005)


def _post(url: str, trace_id: str, tokens: int, got: dict) -> None:
    req = urllib.request.Request(
        f"{url}/v1/completions", json.dumps({"prompt_tokens": 300, "max_tokens": tokens}).encode(),
        {"Content-Type": "application/json", "traceparent": f"00-{trace_id}-{'1' * 16}-01"})
    with urllib.request.urlopen(req, timeout=60) as r:
        got[trace_id] = json.load(r)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """A one-slot model server on a port chosen for it; a long request, then a short one that
    queues behind it. The URL, port, replies, scrapes (before, while the second waited,
    after), the trace directory (written when the server stopped) and its /info."""
    d = tmp_path_factory.mktemp("model-server")
    port = _free_port()
    got: dict = {}
    with Service("model-server", "1", env={PORT_VARIABLE: str(port), "OPENBLAS_NUM_THREADS": "1",
                                           "AGENTSCOPE_TRACE_DIR": str(d)}) as server:
        url = server.url
        with urllib.request.urlopen(f"{url}/info", timeout=10) as r:
            info = json.load(r)
        per_token = max(info["per_token_s"], 1e-5)
        before = _scrape(url)
        first = threading.Thread(target=_post, args=(url, FIRST, int(0.8 / per_token), got))
        first.start()
        _until(url, lambda v: v["vllm:num_requests_running"] == 1)
        second = threading.Thread(target=_post, args=(url, SECOND, 50, got))
        second.start()
        during = _until(url, lambda v: v["vllm:num_requests_waiting"] == 1)
        first.join()
        second.join()
        after = _scrape(url)
    return url, port, got, before, during, after, d, info


def test_it_listens_where_it_is_told_and_still_answers_info(served):
    url, port, *_, info = served
    assert url == f"http://127.0.0.1:{port}"
    assert info["slots"] == 1 and info["per_token_s"] > 0


def test_the_gauges_count_the_requests_and_their_tokens(served):
    _, _, _, before, during, after, *_ = served
    assert before[1]["vllm:num_requests_running"] == before[1]["vllm:num_requests_waiting"] == 0
    assert during["vllm:num_requests_running"] == 1
    assert during["vllm:num_requests_waiting"] == 1
    assert 0 < during["vllm:kv_cache_usage_perc"] <= 1  # the first one's prompt and tokens
    assert after[1]["vllm:num_requests_running"] == after[1]["vllm:num_requests_waiting"] == 0
    assert after[1]["vllm:kv_cache_usage_perc"] == 0
    assert after[1]["vllm:num_preemptions_total"] == 0


def test_the_histograms_hold_both_requests(served):
    _, _, got, _, _, (text, values), *_ = served
    queued = [got[FIRST]["queue_s"], got[SECOND]["queue_s"]]
    assert values["vllm:request_queue_time_seconds_count"] == 2
    assert values["vllm:request_queue_time_seconds_sum"] == pytest.approx(sum(queued))
    assert values["vllm:time_to_first_token_seconds_count"] == 2
    # from arrival: the second one's first token came after its wait for the slot
    assert values["vllm:time_to_first_token_seconds_sum"] > got[SECOND]["queue_s"] > 0.1
    for name in ("vllm:request_queue_time_seconds", "vllm:time_to_first_token_seconds"):
        buckets = [(labels["le"], v) for n, labels, v in parse_text(text)
                   if n == f"{name}_bucket"]
        counts = [v for _, v in buckets]
        assert counts == sorted(counts) and buckets[-1] == ("+Inf", 2)


def test_the_collector_reads_it_as_a_vllm(served):
    url, port, got, before, _, (text, _), *_ = served
    endpoint = PrometheusEndpoint(url)
    assert endpoint.readings(before[0], 1_000_000_000) != []
    readings = {r.metric: r for r in endpoint.readings(text, 3_000_000_000)}
    assert {r.device for r in readings.values()} == {f"127.0.0.1:{port}"}
    assert readings[mn.MODEL_SERVER_REQUESTS_RUNNING].value == 0
    assert readings[mn.MODEL_SERVER_REQUESTS_WAITING].value == 0
    assert readings[mn.MODEL_SERVER_KV_CACHE_USAGE].value == 0
    assert readings[mn.MODEL_SERVER_PREEMPTIONS].value == 0
    # means over the interval between the two scrapes: both requests
    mean_queue = (got[FIRST]["queue_s"] + got[SECOND]["queue_s"]) / 2
    assert readings[mn.MODEL_SERVER_QUEUE_TIME].value == pytest.approx(mean_queue)
    assert readings[mn.MODEL_SERVER_TIME_TO_FIRST_TOKEN].value > 0


def test_the_span_names_who_held_the_slot(served):
    *_, d, _ = served
    spans = {s.trace_id: s for s in scan(d).spans if s.name == "llm_request"}
    assert set(spans) == {FIRST, SECOND}
    first, second = spans[FIRST], spans[SECOND]
    assert first.attrs[QUEUE_RESOURCE] == second.attrs[QUEUE_RESOURCE] == "model-server"
    assert QUEUE_HELD_BY not in first.attrs  # the slot was free: it did not wait
    assert list(second.attrs[QUEUE_HELD_BY]) == [FIRST]
    assert second.attrs["gen_ai.latency.time_in_queue"] > 0.1


def test_slots_remember_every_holder_of_a_wait_in_arrival_order():
    """Two slots; a and b hold them, c and d wait: c gets a's slot; d, behind c, saw a, b
    and c hold one."""
    slots = Slots(2)
    a, b, c, d = (Request(t * 32, 10) for t in "abcd")
    assert slots.acquire(a) == [] and slots.acquire(b) == []
    got: dict = {}
    waiters = [threading.Thread(target=lambda r=r: got.setdefault(r.trace_id, slots.acquire(r)))
               for r in (c, d)]
    waiters[0].start()
    while slots.snapshot()[1] < 1:
        time.sleep(0.001)
    waiters[1].start()
    while slots.snapshot()[1] < 2:
        time.sleep(0.001)
    assert slots.snapshot() == (2, 2, 20)
    slots.release(a)
    waiters[0].join(10)
    assert got == {c.trace_id: [a.trace_id, b.trace_id]}  # first come, first served
    slots.release(b)
    waiters[1].join(10)
    assert got[d.trace_id] == [a.trace_id, b.trace_id, c.trace_id]
    d.generated = 5
    assert slots.snapshot() == (2, 0, 25)


def test_queue_behind_batch_records_its_model_servers_metrics():
    assert catalogue()["queue-behind-batch"].model_server
    assert not catalogue()["queue-pool"].model_server
