"""Queue-bound scenarios: tasks waiting for a bounded worker pool, online requests behind
batch requests at a one-slot model server."""

from __future__ import annotations

import json
import threading
import time
import urllib.request

import agentscope

from ..services import Service, get_json, post_json
from .ctx import Ctx
from .registry import scenario
from .work import assemble_context


@scenario("queue-pool", "queue", "tasks waiting for a bounded worker pool (one worker per load "
          "level) that another tenant's 0.5 s job holds first")
def queue_pool(ctx: Ctx) -> None:
    pool = threading.Semaphore(ctx.load)
    held = threading.Event()

    def tenant() -> None:  # not traced: someone else's job
        for _ in range(ctx.load):
            pool.acquire()
        held.set()
        time.sleep(0.5)
        for _ in range(ctx.load):
            pool.release()

    with Service("slow-api") as api:
        threading.Thread(target=tenant, daemon=True).start()
        held.wait()

        def one(i: int) -> None:
            with ctx.task("enrich-record") as (_, ledger):
                with ctx.step(ledger, "queue", "queue", "wait-for-worker"):
                    pool.acquire()
                try:
                    with ctx.step(ledger, "io", "tool", "fetch-profile"):
                        get_json(f"{api.url}/wait?s=0.1")
                finally:
                    pool.release()

        ctx.together(one, ctx.tasks * ctx.load, ctx.tasks * ctx.load)


def _model_call(ctx: Ctx, ledger: dict, url: str, tokens: int) -> None:
    """A model call to the scenario's model server: the server's spans (in its process) carry
    their own truth; what it reports (its queue and compute time) goes to the ledger."""
    # the client's own time around the server's span is the HTTP hop: sending, the server's
    # handler reading and replying, waiting for the interpreter lock on either side; the
    # workload does not know how it splits, and says so
    with agentscope.stage("inference", name="chat", model="cpu-mlp-768",
                          **{"server.address": "127.0.0.1"}) as span:
        got = post_json(url, {"prompt_tokens": 300, "max_tokens": tokens})
    ctx.rec.span(span, None)
    ledger["queue"] = ledger.get("queue", 0.0) + got["queue_s"]
    ledger["cpu"] = ledger.get("cpu", 0.0) + got["compute_s"]


@scenario("queue-behind-batch", "queue", "online requests stuck behind batch requests at a "
          "one-slot model server that reports queue time the way vLLM does (its span is "
          "labelled inference; its vLLM metrics are scraped)", model_server=True)
def queue_behind_batch(ctx: Ctx) -> None:
    with Service("model-server", "1", env={"OPENBLAS_NUM_THREADS": "1",
                                           "AGENTSCOPE_SCENARIO": ctx.name}) as server:
        url = f"{server.url}/v1/completions"
        per_token = _token_cost(url)

        def batch(i: int) -> None:
            with ctx.task("nightly-eval", lane="batch") as (_, ledger):
                _model_call(ctx, ledger, url, max(1, int(0.6 / (i + 1) / per_token)))

        def online(i: int) -> None:
            time.sleep(0.05)  # arrive just after the batch requests
            with ctx.task("user-chat") as (_, ledger):
                with ctx.step(ledger, "cpu", "context", "build-prompt"):
                    assemble_context(i, 20)
                _model_call(ctx, ledger, url, max(1, int(0.03 / per_token)))

        def one(i: int) -> None:
            (batch if i < ctx.load else online)(i if i < ctx.load else i - ctx.load)

        n = ctx.load + ctx.tasks * ctx.load
        ctx.together(one, n, n)


def _token_cost(url: str) -> float:
    """Seconds per token of the model server (it measures itself when it starts)."""
    with urllib.request.urlopen(url.rsplit("/v1/", 1)[0] + "/info", timeout=30) as r:
        return max(json.load(r)["per_token_s"], 1e-5)
