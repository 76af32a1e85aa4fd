"""The sidecar library (agentscope.collectors.sidecar) called directly, with real processes:
run_command's exit codes and signal forwarding, collect's stop conditions, the options."""

from __future__ import annotations

import concurrent.futures
import json
import math
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from agentscope.collectors.proctree import stat_fields
from agentscope.collectors.sidecar import SamplerOptions, collect, make_sampler, run_command

FAST = SamplerOptions(hz=20, gpus=False)  # no NVML probe: the tests need the host and tree only
PATIENCE_S = 30  # a watchdog, far above what any of these takes


def _rows(directory: Path) -> list:
    return [json.loads(line) for f in directory.glob("samples-*-collector.jsonl")
            for line in f.read_text().splitlines()]


def _wait_for(path: Path) -> None:
    deadline = time.monotonic() + PATIENCE_S
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.02)


@pytest.fixture
def watchdog():
    """A stop event set after PATIENCE_S, so a collect() that misses its stop condition
    fails the test instead of hanging it; ``fired`` says whether it had to."""
    stop, fired = threading.Event(), threading.Event()
    timer = threading.Timer(PATIENCE_S, lambda: (fired.set(), stop.set()))
    timer.start()
    yield stop, fired
    timer.cancel()


# ---- options ---------------------------------------------------------------------------------
@pytest.mark.parametrize("hz", [0, -1.0, math.nan, math.inf])
def test_options_refuse_a_rate_that_is_not_a_positive_number(hz):
    with pytest.raises(ValueError, match="hz"):
        SamplerOptions(hz=hz)


def test_options_hold_the_model_servers_as_a_tuple():
    assert SamplerOptions(model_servers=["http://a/metrics"]).model_servers == ("http://a/metrics",)


def test_make_sampler_reports_absent_sources_when_verbose(tmp_path):
    said = []
    sampler = make_sampler(str(tmp_path), None, SamplerOptions(proc_root=str(tmp_path / "none"),
                                                               gpus=False, verbose=True),
                           said.append)
    assert sampler.interval_s == pytest.approx(0.1)
    assert said and all(m.startswith("agentscope: ") and " absent: " in m for m in said)
    quiet: list = []
    make_sampler(str(tmp_path), None, SamplerOptions(proc_root=str(tmp_path / "none"),
                                                     gpus=False), quiet.append)
    assert quiet == []


# ---- run_command -----------------------------------------------------------------------------
def test_run_command_returns_the_exit_code_and_configures_the_program(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code = ("import os, sys, pathlib; pathlib.Path(os.environ['AGENTSCOPE_TRACE_DIR'], 'seen')"
            ".write_text(os.environ['AGENTSCOPE_TRACE_DIR'] + ' ' + os.environ['AGENTSCOPE_COLLECT'])"
            "; sys.exit(7)")
    before = signal.getsignal(signal.SIGTERM)
    assert run_command([sys.executable, "-c", code], "traces", FAST, lambda m: None) == 7
    assert signal.getsignal(signal.SIGTERM) is before  # the caller's handlers are back
    traces = tmp_path / "traces"
    assert (traces / "seen").read_text() == f"{traces} gil"  # an absolute path
    (samples,) = traces.glob("samples-*-collector.jsonl")
    assert samples.read_text().endswith("\n")  # flushed, whole lines


def test_run_command_reports_death_by_signal_as_128_plus_n(tmp_path):
    code = "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"
    got = run_command([sys.executable, "-c", code], str(tmp_path), FAST, lambda m: None)
    assert got == 128 + int(signal.SIGKILL)


def test_run_command_forwards_a_signal_it_receives(tmp_path):
    ready = tmp_path / "ready"
    code = textwrap.dedent(f"""
        import pathlib, time
        pathlib.Path({str(ready)!r}).write_text("1")
        time.sleep({PATIENCE_S})
    """)
    received = []

    def mine(signum, _frame) -> None:
        received.append(signum)

    previous = signal.signal(signal.SIGTERM, mine)
    try:
        def send() -> None:
            _wait_for(ready)
            # to the process (Linux hands it to the main thread, blocked in run_command's
            # wait), which forwards it
            os.kill(os.getpid(), signal.SIGTERM)

        sender = threading.Thread(target=send, daemon=True)
        sender.start()
        got = run_command([sys.executable, "-c", code], str(tmp_path), FAST, lambda m: None)
        sender.join(PATIENCE_S)
        assert got == 128 + int(signal.SIGTERM)  # the program died of the forwarded SIGTERM
        assert received == []  # handled by run_command, not by the caller's handler
        assert signal.getsignal(signal.SIGTERM) is mine  # restored
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_run_command_cannot_start_a_missing_or_unexecutable_program(tmp_path):
    said = []
    assert run_command(["no-such-program-xyz"], str(tmp_path), FAST, said.append) == 127
    assert said == [said[0]] and "cannot start no-such-program-xyz" in said[0]
    script = tmp_path / "not-executable"
    script.write_text("#!/bin/sh\nexit 0\n")
    script.chmod(0o644)
    assert run_command([str(script)], str(tmp_path), FAST, said.append) == 126
    assert "cannot start" in said[-1]


def test_run_command_needs_a_command(tmp_path):
    with pytest.raises(ValueError):
        run_command([], str(tmp_path), FAST, lambda m: None)


# ---- collect ---------------------------------------------------------------------------------
def test_collect_stops_when_the_watched_process_exits(tmp_path, watchdog):
    """The child is ours and not reaped while collect runs: once it exits it is a zombie,
    which must count as exited (it still answers kill(pid, 0))."""
    stop, fired = watchdog
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.5)"])
    try:
        said = []
        sampler = collect(str(tmp_path), FAST, pid=child.pid, say=said.append, stop=stop)
        with open(f"/proc/{child.pid}/stat", "rb") as f:
            assert stat_fields(f.read())[:1] == [b"Z"]  # exited, not yet reaped
    finally:
        child.kill()
        child.wait()
    assert not fired.is_set(), "collect did not stop when the process exited"
    assert any(m.startswith("agentscope: sampling 20 times a second into ") for m in said)
    assert sampler.rounds > 0 and sampler.path.parent == tmp_path
    rows = _rows(tmp_path)
    assert any(r["metric"] == "agentscope.tree.processes" and r["pid"] == child.pid
               for r in rows)
    assert any(r["metric"] == "agentscope.collector.cpu" for r in rows)  # the last round


@pytest.mark.parametrize("pidfd", [True, False], ids=["pidfd", "polled"])
def test_the_watch_waits_for_the_exit_without_polling_where_it_can(monkeypatch, pidfd):
    """With a process descriptor the watch never looks at /proc (the exit wakes it); without
    one it looks once per sampling interval, not more often."""
    from agentscope.collectors import sidecar

    looks = []
    real_alive = sidecar._alive
    monkeypatch.setattr(sidecar, "_alive", lambda pid: looks.append(pid) or real_alive(pid))
    if not pidfd:
        monkeypatch.setattr(sidecar, "_pidfd", lambda pid: None)
    elif sidecar._pidfd(os.getpid()) is None:
        pytest.fail("no pidfd_open on this Linux: the watch would poll")
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.6)"])
    stop = threading.Event()
    try:
        t0 = time.monotonic()
        sidecar._watch(stop, child.pid, time.monotonic() + PATIENCE_S, 0.1)
        waited = time.monotonic() - t0
    finally:
        child.kill()
        child.wait()
    assert stop.is_set() and waited < PATIENCE_S / 2
    if pidfd:
        assert looks == []
    else:  # at most one look per 0.1 s interval over the wait, and one at the end
        assert 1 <= len(looks) <= waited / 0.1 + 2


def test_the_watch_ends_when_stopped_from_outside(monkeypatch):
    from agentscope.collectors import sidecar

    monkeypatch.setattr(sidecar, "WATCH_CHECK_S", 0.05)
    stop = threading.Event()
    t = threading.Thread(target=sidecar._watch, args=(stop, os.getpid(), None, 0.1))
    t.start()
    stop.set()
    t.join(PATIENCE_S)
    assert not t.is_alive()


def test_collect_stops_after_its_duration_and_restores_signal_handlers(tmp_path, watchdog):
    stop, fired = watchdog
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    sampler = collect(str(tmp_path), FAST, duration=0.3, say=lambda m: None, stop=stop)
    assert not fired.is_set()
    assert sampler.rounds > 0 and sampler.path.exists()
    assert {s: signal.getsignal(s) for s in before} == before


def test_collect_off_the_main_thread_stops_on_its_event(tmp_path):
    """No signal handlers there (Python refuses them); the caller's event stops it."""
    stop = threading.Event()
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        running = pool.submit(collect, str(tmp_path), FAST, say=lambda m: None, stop=stop)
        time.sleep(0.2)
        stop.set()
        sampler = running.result(PATIENCE_S)  # raises what collect raised there
    assert sampler.path.exists()


def test_absent_sources_are_said_only_when_asked(tmp_path):
    """`agentscope run` does not tell a machine without a GPU so on every run; -v does (the
    absent sources are recorded as such either way)."""
    import subprocess
    import sys

    from .conftest import child_env

    base = [sys.executable, "-m", "agentscope.cli", "run", "--no-per-core"]
    prog = ["--", sys.executable, "-c", "pass"]
    quiet = subprocess.run(base + ["--trace-dir", str(tmp_path / "a")] + prog, env=child_env(),
                           capture_output=True, text=True, timeout=120, check=True)
    loud = subprocess.run(base + ["-v", "--trace-dir", str(tmp_path / "b")] + prog,
                          env=child_env(), capture_output=True, text=True, timeout=120,
                          check=True)
    assert " absent: " not in quiet.stderr
    import agentscope.collectors.sampler as sampler_mod

    _, absent = sampler_mod.default_sources(None)
    if absent:  # this machine lacks something (a GPU, here): -v names it
        assert f"{absent[0][0]} absent: " in loud.stderr
