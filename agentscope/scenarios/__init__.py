"""Labelled scenarios: agents whose bottleneck is known, to measure agentscope's verdicts.

``agentscope scenarios list`` names them; ``agentscope scenarios run NAME --out DIR`` records
one (its agent under ``agentscope run``, counters sampled; a scenario about traces without
counters runs its agent alone), with the ground truth beside the trace (``truth-*.jsonl``,
see truth.py) and what was run in ``scenario.json``; ``agentscope scenarios score DIR``
analyses a recording and scores the verdicts against the truth.
``benchmarks/attribution_accuracy.py`` runs them all at two load levels.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Callable, Optional

from ..formats import naming
from .truth import Score, score

__all__ = ["GPU_MISSING", "ScenarioFailed", "Score", "catalogue", "describe", "record", "run",
           "score"]

GPU_MISSING = ("gpu: no scenario records GPU-bound tasks without a GPU: they are recorded on a "
               "GPU machine (benchmarks/gpu_device_check.py), never simulated")

UNAVAILABLE = 3  # the agent's exit code when this machine cannot produce the scenario


def catalogue() -> dict:
    """{name: Scenario} of every scenario, in the order they are listed."""
    from .workloads import SCENARIOS

    return dict(SCENARIOS)


def machine() -> dict:
    """Where a recording was made."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:
        cpus = os.cpu_count() or 0
    mem = None
    try:
        with open("/proc/meminfo") as f:
            mem = int(f.readline().split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return {"host": platform.node(), "system": f"{platform.system()} {platform.release()}",
            "python": platform.python_version(), "cpus": cpus, "memory_bytes": mem}


class ScenarioFailed(RuntimeError):
    """A scenario's agent failed; the message is its last line of error output."""


def run(name: str, out: "str | os.PathLike[str]", tasks: int = 4, load: int = 1,
        hz: float = 10.0, quiet: bool = False) -> int:
    """Record scenario ``name`` into ``out`` (its agent run under ``agentscope run``, so the
    host and process-tree counters are sampled at ``hz``, and a scenario made with
    ``model_server=True`` has its model server's vLLM metrics scraped too; a scenario made
    with ``collect=False`` runs alone, its spans the whole recording); returns the agent's
    exit code (0, or :data:`UNAVAILABLE` when this machine cannot produce it). Raises
    :class:`ScenarioFailed` (its last line of error output) when the agent failed, having
    removed the files that run wrote."""
    from .._version import __version__

    if name not in catalogue():
        raise ValueError(f"no scenario {name!r}; known: {', '.join(catalogue())}")
    chosen = catalogue()[name]
    given = out
    out = Path(out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    before = {p.name for p in out.iterdir()}
    command = [sys.executable, "-m", "agentscope.scenarios.workloads", name,
               "--tasks", str(tasks), "--load", str(load)]
    started = datetime.datetime.now(datetime.timezone.utc)
    scraped = _model_server_scrape() if chosen.collect and chosen.model_server else None
    # the children start in the trace directory: `python -m` puts the current directory
    # first on the path, and a folder there named like the package (a checkout's parent
    # folder) would shadow the installed one
    if chosen.collect:
        argv = [sys.executable, "-m", "agentscope.cli", "run", "--trace-dir", str(out),
                "--hz", str(hz), "--no-per-core",
                *(() if scraped is None else ("--model-server", scraped[1])), "--", *command]
        env = None if scraped is None else {**os.environ, **scraped[0]}
    else:  # the trace directory as `agentscope run` gives it, and no sampler anywhere
        argv = command
        env = {k: v for k, v in os.environ.items() if k != "AGENTSCOPE_COLLECT"}
        env["AGENTSCOPE_TRACE_DIR"] = str(out)
    done = subprocess.run(argv, env=env, cwd=out, stderr=subprocess.PIPE, text=True,
                          errors="replace", stdout=subprocess.DEVNULL if quiet else None)
    code = done.returncode
    if code in (0, UNAVAILABLE):  # what it said (a scenario says why it is unavailable)
        sys.stderr.write(done.stderr)
    else:  # a failed recording: one line, and nothing of it left behind
        last = next((ln for ln in reversed(done.stderr.splitlines()) if ln.strip()),
                    f"exit code {code}")
        for p in out.iterdir():
            if p.name not in before and p.is_file():
                p.unlink()
        raise ScenarioFailed(f"scenario {name} failed (exit code {code}): {last.strip()}")
    meta = {"scenario": name, "expect": chosen.expect, "about": chosen.about,
            "tasks": tasks, "load": load, "hz": hz if chosen.collect else None,
            "collect": chosen.collect,
            **({} if scraped is None else {"model_server": scraped[1]}),
            "started": started.isoformat(timespec="seconds"),
            "seconds": round((datetime.datetime.now(datetime.timezone.utc) - started)
                             .total_seconds(), 2),
            "exit_code": code, "agentscope": __version__, "machine": machine(),
            "command": f"agentscope scenarios run {name} --out {given} --tasks {tasks} "
                       f"--load {load}"}
    runs = out / naming.SCENARIO_FILE
    previous: list = []
    if runs.exists():
        try:
            previous = json.loads(runs.read_text()).get("runs", [])
        except (ValueError, AttributeError):
            previous = []
    runs.write_text(json.dumps({"runs": previous + [meta]}, indent=2) + "\n")
    return code


def _model_server_scrape() -> tuple:
    """(environment, metrics URL) for a scenario's model server: a port free now on
    127.0.0.1, which the server (started later, by the agent) is told to listen on, so that
    ``agentscope run --model-server`` knows what to scrape before anything listens there (its
    first scrapes fail, and it goes on). Another process could take the port in between; on
    a development machine that is a rare, visible failure (the server does not start)."""
    import socket

    from .services import PORT_VARIABLE

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return {PORT_VARIABLE: str(port)}, f"http://127.0.0.1:{port}/metrics"


def record(name: str, out: "str | os.PathLike[str]", tasks: int = 4, load: int = 1,
           hz: float = 10.0, say: Optional[Callable[[str], None]] = None) -> list:
    """Record scenario ``name``, or every scenario (``"all"``, one folder each below ``out``);
    returns the names of those that failed. A scenario this machine cannot produce is
    skipped, with the reason (on the agent's stderr) and a line through ``say``. Raises
    ValueError for an unknown name."""
    names = list(catalogue()) if name == "all" else [name]
    unknown = [n for n in names if n not in catalogue()]
    if unknown:
        raise ValueError(f"no scenario {unknown[0]!r}; see `agentscope scenarios list`")
    failed = []
    for n in names:
        where = os.path.join(out, n) if name == "all" else str(out)
        if say:
            say(f"scenario {n} -> {where}")
        try:
            code = run(n, where, tasks=tasks, load=load, hz=hz)
        except ScenarioFailed as e:
            if say:
                say(str(e))
            failed.append(n)
            continue
        if code == UNAVAILABLE:
            if say:
                say(f"scenario {n}: not produced on this machine (see above)")
        elif code:
            failed.append(n)
    return failed


def _seconds(by_class: dict) -> str:
    """{class: seconds} in words, most first: "cpu 1.143 s, io 0.327 s"."""
    return ", ".join(f"{c} {v:.3f} s" for c, v in sorted(by_class.items(), key=lambda x: -x[1])
                     if v >= 0.0005) or "nothing"


def describe(score_: Score) -> str:
    """The score in words: accuracy, recall per class, the confusion matrix, per scenario,
    and every task named wrong."""
    from ..analyzers.evidence import CLASSES

    lines = []
    n = len(score_.tasks)
    right = sum(t.ok for t in score_.tasks)
    lines.append(f"tasks named right: {right}/{n + score_.missing} "
                 f"({score_.task_accuracy:.1%})" +
                 (f"; {score_.missing} recorded but not analysed" if score_.missing else ""))
    lines.append(f"critical-path time attributed right: {score_.time_accuracy:.1%} of "
                 f"{score_.path_s:.1f} s" + (
                     f" ({score_.path_unknown_s:.2f} s more with no truth: gaps, steps the "
                     "workloads could not time)" if score_.path_unknown_s >= 0.005 else ""))
    recall = score_.recall()
    lines.append("recall: " + ", ".join(f"{c} {recall[c]:.0%}" for c in CLASSES
                                         if c in recall))
    lines.append("")
    lines.append("confusion (rows: truth, columns: verdict)")
    lines.append(f"{'':>8}" + "".join(f"{c:>9}" for c in CLASSES))
    for t, row in score_.confusion().items():
        if sum(row.values()):
            lines.append(f"{t:>8}" + "".join(f"{row[c]:>9}" for c in CLASSES))
    lines.append("")
    lines.append(f"{'scenario':<22}{'tasks right':>12}{'time right':>12}")
    for s, (r, k, ta) in score_.by_scenario().items():
        lines.append(f"{s:<22}{f'{r}/{k}':>12}{ta:>12.1%}")
    lost = [x for x in score_.lost_time() if x[2] >= 0.001]
    if lost:
        lines.append("")
        lines.append("critical-path time attributed wrong, by span:")
        for s, n, wrong_s, total in lost:
            said, given = score_.classes_by_span.get((s, n), ({}, {}))
            lines.append(f"  {s}/{n}: {wrong_s:.3f} s of {total:.3f} s (truth: "
                         f"{_seconds(said)}; analysis: {_seconds(given)})")
    wrong = [t for t in score_.tasks if not t.ok]
    if wrong:
        lines.append("")
        lines.append("named wrong:")
        for t in wrong:
            shares = ", ".join(f"{c} {v:.0%}" for c, v in sorted(
                t.shares.items(), key=lambda kv: -kv[1]) if v >= 0.01)
            ledger = ", ".join(f"{c} {v:.2f}s" for c, v in t.ledger.items())
            tie = f" (a near tie with {t.near_tie})" if t.near_tie else ""
            lines.append(f"  {t.scenario}/{t.name} {t.trace_id[:8]}: truth {t.truth} "
                         f"({ledger}){tie}, verdict {t.verdict} ({shares})")
    return "\n".join(lines) + "\n"
