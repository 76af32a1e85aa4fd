"""I/O-bound scenarios: tools waiting on a slow HTTP API, on a database lock another process
holds, on a command-line client that waits on the network."""

from __future__ import annotations

import subprocess
import sys
import time

import agentscope

from ..services import Service, get_json
from .ctx import Ctx
from .registry import scenario
from .work import assemble_context


@scenario("io-http", "io", "tools waiting on a slow HTTP API (a local server that answers "
          "after 0.3 s)")
def io_http(ctx: Ctx) -> None:
    with Service("slow-api") as api:
        def one(i: int) -> None:
            with ctx.task("research") as (_, ledger):
                with ctx.step(ledger, "cpu", "context", "plan"):
                    assemble_context(i, 20)
                for q in range(2):
                    with ctx.step(ledger, "io", "tool", "web-search",
                                  **{"server.address": "127.0.0.1"}):
                        get_json(f"{api.url}/wait?s=0.3&q={q}")

        ctx.together(one, ctx.tasks, 2 * ctx.load)


@scenario("io-db", "io", "a database query blocked by a lock another process holds "
          "(SQLite, exclusive transaction held for 0.5 s)")
def io_db(ctx: Ctx) -> None:
    import sqlite3

    path = ctx.work / "app.db"
    with sqlite3.connect(path) as con:
        con.execute("CREATE TABLE IF NOT EXISTS kv (k TEXT PRIMARY KEY, v INTEGER)")
        con.execute("INSERT OR REPLACE INTO kv VALUES ('migrations', 0), ('users', 42)")

    def one(i: int) -> None:
        locker = subprocess.Popen([sys.executable, "-m", "agentscope.scenarios.services",
                                   "lock-db", str(path), "0.5"], stdout=subprocess.PIPE,
                                  text=True)
        try:
            if (locker.stdout.readline() if locker.stdout else "").strip() != "locked":
                raise RuntimeError("the lock holder did not take the lock")
            with ctx.task("account-lookup") as (_, ledger):
                with ctx.step(ledger, "cpu", "context", "plan"):
                    assemble_context(i, 20)
                with ctx.step(ledger, "io", "tool", "db.query", **{
                        "db.system": "sqlite", "db.operation.name": "SELECT"}):
                    db = sqlite3.connect(path, timeout=30)
                    db.execute("SELECT v FROM kv WHERE k = 'users'").fetchall()
                    db.close()
        finally:
            locker.wait(30)

    ctx.together(one, ctx.tasks, ctx.load)


FETCH = ("import sys, time, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=60)"
         ".read(); print(time.process_time())")


@scenario("io-subprocess", "io", "a tool that runs a command-line client (think git fetch) "
          "which waits 0.6 s on the network stand-in")
def io_subprocess(ctx: Ctx) -> None:
    with Service("slow-api") as api:
        def one(i: int) -> None:
            with ctx.task("sync-repo") as (root, ledger):
                # the client starts (an interpreter: CPU), then waits on the network; it
                # says how much CPU it used (its own stopwatch), for the truth
                with agentscope.stage("tool", name="git-fetch") as span:
                    t0 = time.perf_counter()
                    got = subprocess.run([sys.executable, "-c", FETCH, f"{api.url}/wait?s=0.6"],
                                         check=True, stdout=subprocess.PIPE, text=True)
                    wall, cpu = time.perf_counter() - t0, float(got.stdout.split()[-1])
                ctx.rec.span(span, {"cpu": cpu, "io": max(wall - cpu, 0.0)})
                ledger["cpu"] = ledger.get("cpu", 0.0) + cpu
                ledger["io"] = ledger.get("io", 0.0) + max(wall - cpu, 0.0)
                with ctx.step(ledger, "cpu", "context", "read-changes"):
                    assemble_context(i, 20)

        ctx.together(one, ctx.tasks, 2 * ctx.load)
