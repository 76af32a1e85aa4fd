"""An example agent, instrumented with agentscope, whose stages really do what they claim.

Each task is a chain of stages (plan -> model call -> tool call -> model again):

* ``context``   reads source files and ranks chunks against the question (CPU, in-process);
* ``inference`` calls a local one-slot model server (a separate process) over HTTP; its own
                spans show the queue and the decode, which is real arithmetic on the CPU;
* ``tool``      compiles a C program with the system compiler and runs its self-test (a real
                subprocess), or queries a slow local search API (waiting, no CPU), or runs a
                Python checker in a subprocess;
* ``agent``     one branch of a multi-agent fan-out, run on a thread pool, and an asyncio
                ``gather`` of agents.

Run it:  python examples/agent.py --trace-dir traces
Then:    agentscope check traces
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import agentscope  # noqa: E402
from local_services import (ModelServerProcess, SearchAPI, get_json, post_json, start,  # noqa: E402
                            stop)

WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]+")

C_PROGRAM = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
/* the "project under test": count primes below N with a sieve, then check known values */
static long count_primes(long n) {
    char *sieve = malloc(n); long count = 0;
    memset(sieve, 1, n);
    for (long i = 2; i < n; i++) if (sieve[i]) { count++; for (long j = i * i; j < n; j += i) sieve[j] = 0; }
    free(sieve); return count;
}
int main(int argc, char **argv) {
    long rounds = argc > 1 ? atol(argv[1]) : 10, total = 0;
    for (long r = 0; r < rounds; r++) total += count_primes(2000000);
    if (count_primes(100) != 25) { puts("FAIL"); return 1; }
    printf("ok %ld\n", total); return 0;
}
"""

PY_CHECKER = r"""
import ast, sys
tree_count = 0
for path in sys.argv[1:]:
    src = open(path, encoding="utf-8").read()
    for _ in range(3):
        tree_count += sum(1 for _ in ast.walk(ast.parse(src)))
print("nodes", tree_count)
"""


class Workspace:
    """Where tools write their files; also the corpus the context stage reads."""

    def __init__(self, scale: float) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="agentscope-example-"))
        self.scale = scale
        root = HERE.parent / "agentscope"
        self.sources = sorted(root.rglob("*.py")) or sorted(HERE.glob("*.py"))
        self.cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")


@agentscope.stage("context", name="build-prompt")
def build_prompt(ws: Workspace, question: str, budget_tokens: int = 1500) -> tuple[str, int]:
    """Retrieve the source chunks that share most words with the question, then assemble."""
    wanted = {w.lower() for w in WORD.findall(question)}
    scored = []
    rounds = max(1, int(3 * ws.scale))
    for _ in range(rounds):  # re-rank as a real retriever would over several query rewrites
        scored.clear()
        for path in ws.sources:
            lines = path.read_text(encoding="utf-8").splitlines()
            for first in range(0, len(lines), 20):
                chunk = "\n".join(lines[first:first + 20])
                words = [w.lower() for w in WORD.findall(chunk)]
                score = sum(1 for w in words if w in wanted) / (1 + len(words) ** 0.5)
                scored.append((score, path.name, first, chunk))
        scored.sort(reverse=True)
    prompt, tokens = [question], len(question.split())
    for _score, name, first, chunk in scored:
        n = len(chunk.split())
        if tokens + n > budget_tokens:
            break
        prompt.append(f"# {name}:{first}\n{chunk}")
        tokens += n
    agentscope.annotate(input_tokens=tokens, chunks=len(prompt) - 1)
    return "\n\n".join(prompt), tokens


def call_model(model: ModelServerProcess, name: str, prompt_tokens: int, max_tokens: int) -> dict:
    with agentscope.stage("inference", name=name, model="toy-mlp-128",
                          server_address="127.0.0.1", input_tokens=prompt_tokens,
                          max_tokens=max_tokens):
        reply = post_json(model.url, {"prompt_tokens": prompt_tokens, "max_tokens": max_tokens})
        agentscope.annotate(output_tokens=reply["tokens"])
        return reply


@agentscope.stage("tool", name="compile-and-test", tool="cc")
def compile_and_test(ws: Workspace) -> str:
    """Compile a C program and run its self-test: CPU in child processes."""
    rounds = str(max(1, int(12 * ws.scale)))
    if ws.cc is None:  # no compiler here: run an equivalent CPU-bound test in Python
        code = "n=300000\ns=bytearray([1])*n\nfor i in range(2,n):\n if s[i]:\n  s[i*i::i]=bytes(len(range(i*i,n,i)))\nprint('ok')"
        return subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                              text=True).stdout.strip()
    src, exe = ws.dir / "sieve.c", ws.dir / "sieve"
    src.write_text(C_PROGRAM)
    subprocess.run([ws.cc, "-O1", "-o", str(exe), str(src)], check=True)
    return subprocess.run([str(exe), rounds], check=True, capture_output=True,
                          text=True).stdout.strip()


@agentscope.stage("tool", name="python-checker", tool="ast-check")
def python_checker(ws: Workspace) -> str:
    files = [str(p) for p in ws.sources[: max(2, int(12 * ws.scale))]]
    return subprocess.run([sys.executable, "-c", PY_CHECKER, *files], check=True,
                          capture_output=True, text=True).stdout.strip()


@agentscope.stage("tool", name="web-search", tool="search")
def web_search(api: SearchAPI, query: str) -> dict:
    """Waits on a slow HTTP API: off-CPU."""
    return get_json(f"{api.url}?q={query.replace(' ', '+')}")


@agentscope.task(name="fix-bug", lane="online")
def fix_bug(ws: Workspace, model: ModelServerProcess) -> str:
    _, tokens = build_prompt(ws, "why does the span writer drop spans when the queue is full")
    call_model(model, "plan-fix", tokens, 48)
    result = compile_and_test(ws)
    call_model(model, "summarize-fix", 200, 24)
    return result


@agentscope.task(name="research", lane="online")
def research(ws: Workspace, model: ModelServerProcess, api: SearchAPI) -> int:
    _, tokens = build_prompt(ws, "trace context propagation across threads")
    call_model(model, "plan-search", tokens, 16)
    hits = sum(web_search(api, q)["hits"] for q in ("w3c traceparent", "contextvars threads"))
    call_model(model, "answer", 400, 48)
    return hits


def review_agent(ws: Workspace, model: ModelServerProcess, api: SearchAPI, role: str) -> str:
    with agentscope.stage("agent", name=f"reviewer-{role}", agent=role):
        _, tokens = build_prompt(ws, f"review the {role} of the capture layer", 600)
        call_model(model, f"review-{role}", tokens, 32)
        if role == "build":
            return compile_and_test(ws)
        if role == "style":
            return python_checker(ws)
        return str(web_search(api, f"{role} best practices")["hits"])


@agentscope.task(name="multi-agent-review", lane="batch")
def multi_agent_review(ws: Workspace, model: ModelServerProcess, api: SearchAPI) -> list[str]:
    """Three reviewers in parallel on a thread pool; the slowest branch decides."""
    roles = ["build", "style", "docs"]
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(roles)) as pool:
        results = list(pool.map(lambda r: review_agent(ws, model, api, r), roles))
    call_model(model, "merge-reviews", 300, 8)
    return results


@agentscope.task(name="async-triage", lane="online")
async def async_triage(ws: Workspace, model: ModelServerProcess, api: SearchAPI) -> int:
    """Agents as coroutines, gathered; blocking calls go to threads (context follows them)."""

    @agentscope.stage("agent")
    async def triager(i: int) -> int:
        hit = await asyncio.to_thread(web_search, api, f"issue {i}")
        await asyncio.to_thread(call_model, model, f"triage-{i}", 120, 24)
        return hit["hits"]

    with agentscope.stage("context", name="load-issues"):
        issues = [f"issue {i}" for i in range(3)]
    return sum(await asyncio.gather(*(triager(i) for i, _ in enumerate(issues))))


@agentscope.task(name="chat", lane="online")
def chat(ws: Workspace, model: ModelServerProcess) -> int:
    """One long answer from the model: with many users at once, they queue for its slot."""
    _, tokens = build_prompt(ws, "explain the critical path", 300)
    return call_model(model, "answer-user", tokens, 96)["tokens"]


TASKS = {
    "fix-bug": lambda ws, model, api: fix_bug(ws, model),
    "research": lambda ws, model, api: research(ws, model, api),
    "multi-agent-review": lambda ws, model, api: multi_agent_review(ws, model, api),
    "async-triage": lambda ws, model, api: asyncio.run(async_triage(ws, model, api)),
    "chat": lambda ws, model, api: chat(ws, model),
}
DEFAULT_MIX = ["fix-bug", "research", "multi-agent-review", "async-triage"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace-dir", default="traces", help="where to write traces (default: traces)")
    ap.add_argument("--rounds", type=int, default=1, help="how many times to run the task mix")
    ap.add_argument("--scale", type=float, default=1.0,
                    help="work per stage (0.2 for a quick run, 1 for the default)")
    ap.add_argument("--tasks", default=",".join(DEFAULT_MIX),
                    help=f"comma-separated task mix, from: {', '.join(TASKS)} "
                         f"(default: {','.join(DEFAULT_MIX)})")
    ap.add_argument("--concurrency", type=int, default=1,
                    help="run this many copies of the mix at once, on threads (default: 1)")
    args = ap.parse_args(argv)
    mix = [t.strip() for t in args.tasks.split(",") if t.strip()]
    unknown = [t for t in mix if t not in TASKS]
    if unknown:
        ap.error(f"unknown task(s): {', '.join(unknown)}")

    rt = agentscope.init(trace_dir=args.trace_dir, service="example-agent")
    ws = Workspace(args.scale)
    model = ModelServerProcess()  # a separate process, like a real model server
    api = SearchAPI(delay_s=0.25 * max(args.scale, 0.2))
    start(api)
    t0 = time.perf_counter()
    def run_mix() -> None:
        for _ in range(args.rounds):
            for name in mix:
                TASKS[name](ws, model, api)

    try:
        with concurrent.futures.ThreadPoolExecutor(args.concurrency) as pool:
            for f in [pool.submit(run_mix) for _ in range(args.concurrency)]:
                f.result()
    finally:
        stop(api)
        model.stop()
        shutil.rmtree(ws.dir, ignore_errors=True)
        agentscope.shutdown()
    where = rt.trace_dir if rt is not None else "(tracing disabled)"
    print(f"ran {len(mix) * args.rounds * args.concurrency} tasks in {time.perf_counter() - t0:.1f} s; traces in {where}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
