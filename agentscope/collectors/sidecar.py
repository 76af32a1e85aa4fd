"""The sampler as a process of its own: beside an agent (``agentscope collect``) or around one
(``agentscope run -- CMD``).

* :func:`collect` samples until SIGINT/SIGTERM/SIGHUP, a duration, the exit of a watched
  process (a zombie counts as exited) or a caller's stop event;
* :func:`run_command` starts a program with tracing configured through its environment
  (``AGENTSCOPE_TRACE_DIR``; ``AGENTSCOPE_COLLECT=gil``: it only probes its own interpreter
  lock, its tree is sampled here), forwards signals to it, samples while it runs and returns
  the exit code to exit with, as a shell would report it.

Nothing here prints: what a user should read goes through the ``say`` callback the caller
passes (the CLI writes it to stderr). Signal handlers are installed only when called from
the main thread (the only one Python lets set them) and restored on return.
"""

from __future__ import annotations

import math
import os
import select
import shutil
import signal
import socket
import subprocess
import threading
import time
import urllib.parse
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .._signals import handle, restore
from .proctree import stat_fields
from .sampler import Sampler, default_sources

Say = Callable[[str], None]

STOPPING = ("SIGINT", "SIGTERM", "SIGHUP")  # what ends collect()
FORWARDED = ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2")  # to run's program


@dataclass(frozen=True, slots=True)
class SamplerOptions:
    """What a sidecar samples, and how often: ``hz`` rounds a second; the vLLM/SGLang
    Prometheus endpoints to scrape; whether to read NVIDIA GPUs and per-core CPU
    utilization; where ``/proc`` is (``/host/proc`` in a container watching its host);
    ``verbose``: also say which sources are absent on this machine (each is recorded as
    ``agentscope.collector.up`` = 0 either way)."""

    hz: float = 10.0
    model_servers: tuple = ()
    gpus: bool = True
    per_core: bool = True
    proc_root: str = "/proc"
    verbose: bool = False

    def __post_init__(self) -> None:
        if not (self.hz > 0 and math.isfinite(self.hz)):
            raise ValueError(f"hz must be a positive number of samples a second, got {self.hz}")
        object.__setattr__(self, "model_servers", tuple(self.model_servers))


def make_sampler(out: str, pid: int | None, options: SamplerOptions, say: Say) -> Sampler:
    """A (not started) sampler of the sources that work here, writing into ``out``; with
    ``pid``, also of that process's tree. With ``options.verbose``, each absent source is
    reported through ``say`` (a machine without a GPU need not be told so on every run)."""
    sources, absent = default_sources(pid, root=options.proc_root, per_core=options.per_core,
                                      gpus=options.gpus, model_servers=options.model_servers)
    for name, reason in absent if options.verbose else ():
        say(f"agentscope: {name} absent: {reason}")
    return Sampler(out, sources, absent, interval_s=1.0 / options.hz)


def collect(out: str, options: SamplerOptions, *, pid: int | None = None,
            duration: float | None = None, say: Say,
            stop: threading.Event | None = None) -> Sampler:
    """Sample into ``out`` until SIGINT/SIGTERM/SIGHUP (handled only when called from the
    main thread), ``duration`` seconds, the exit of ``pid`` (whose tree is sampled too) or
    ``stop`` being set. Returns the stopped sampler (its file flushed and closed)."""
    sampler = make_sampler(out, pid, options, say)
    stop = stop if stop is not None else threading.Event()
    previous = handle(STOPPING, lambda *_: stop.set())
    deadline = None if duration is None else time.monotonic() + duration

    def watch() -> None:
        _watch(stop, pid, deadline, 1.0 / options.hz)

    try:
        threading.Thread(target=watch, name="agentscope-sidecar-watch", daemon=True).start()
        say(f"agentscope: sampling {options.hz:g} times a second into {sampler.path} "
            f"(sources: {', '.join(s.name for s in sampler.sources)})")
        sampler.run(stop)
        sampler.stop()
    finally:
        stop.set()  # the watch thread ends with us
        restore(previous)
    return sampler


def run_command(command: Sequence[str], trace_dir: str, options: SamplerOptions,
                say: Say, error: "Say | None" = None) -> int:
    """Run ``command`` with its spans going to ``trace_dir`` and its counters sampled there,
    until it exits; signals that reach this process are forwarded to it (SIGINT only when
    the terminal did not deliver it to the program already). Returns its exit code, 128 + N
    if signal N killed it, 127 (not found) or 126 (cannot execute) if it could not start.
    The program runs even if sampling cannot (``say`` tells why); ``error`` (``say`` if not
    given) says why it could not start."""
    error = error or say
    command = list(command)
    if not command:
        raise ValueError("no command to run")
    env = dict(os.environ)
    env["AGENTSCOPE_TRACE_DIR"] = os.path.abspath(trace_dir)
    # sampled here, once; an instrumented program only probes its own interpreter lock
    env["AGENTSCOPE_COLLECT"] = "gil"
    # spans of other instrumentation (an OpenTelemetry SDK) join the sampled process tree by
    # their resource's host.name and process.pid: see identity_environment
    env.update(identity_environment(env))
    os.makedirs(trace_dir, exist_ok=True)
    problem = _cannot_execute(command[0], env.get("PATH"))
    if problem is not None:
        error(f"agentscope run: cannot start {command[0]}: {problem[1]}")
        return problem[0]
    try:
        # through `sh -c '... exec "$@"'`: the shell learns its own pid ($$), puts it in
        # OTEL_RESOURCE_ATTRIBUTES and becomes the program (exec keeps the pid)
        child = subprocess.Popen([_SH, "-c", _WITH_PID, "agentscope-run", *command], env=env)
    except OSError as e:
        error(f"agentscope run: cannot start {command[0]}: {e.strerror or e}")
        return 127 if isinstance(e, FileNotFoundError) else 126
    previous = handle(FORWARDED, lambda signum, _frame: _forward(child, signum))
    try:
        sampler = stop = thread = None
        try:
            sampler = make_sampler(trace_dir, child.pid, options, say)
            stop = threading.Event()
            thread = threading.Thread(target=sampler.run, args=(stop,), daemon=True,
                                      name="agentscope-sampler")
            thread.start()
        except Exception as e:  # noqa: BLE001 -- the program runs even if sampling cannot
            say(f"agentscope run: not sampling counters ({e})")
            stop = None
        while True:
            try:
                code = child.wait()
                break
            except KeyboardInterrupt:  # forwarded already; keep waiting for the child
                continue
        if stop is not None:
            stop.set()
            thread.join(5.0)
            sampler.stop()
    finally:
        restore(previous)
    return code if code >= 0 else 128 - code


_SH = "/bin/sh"
# the program's pid, appended to its resource attributes (a later key wins in OpenTelemetry
# SDKs, so a pid the user wrote there is corrected: it would not be the program's)
_WITH_PID = ('OTEL_RESOURCE_ATTRIBUTES="${OTEL_RESOURCE_ATTRIBUTES:+$OTEL_RESOURCE_ATTRIBUTES,}'
             'process.pid=$$"; export OTEL_RESOURCE_ATTRIBUTES; exec "$@"')


def identity_environment(env: dict) -> dict:
    """What ``agentscope run`` adds to its program's environment so that spans an
    OpenTelemetry SDK exports from it can be joined to the counters sampled of its process
    tree (docs/identity.md): ``host.name`` in ``OTEL_RESOURCE_ATTRIBUTES``, as the sampler
    names the host, unless the user set one (the pid is added at start, by the shell that
    becomes the program)."""
    current = env.get("OTEL_RESOURCE_ATTRIBUTES", "")
    keys = {part.split("=", 1)[0].strip() for part in current.split(",") if "=" in part}
    if "host.name" in keys:
        return {}
    host = urllib.parse.quote(socket.gethostname(), safe="")
    return {"OTEL_RESOURCE_ATTRIBUTES": ",".join(p for p in (current.strip(),
                                                            f"host.name={host}") if p)}


def _cannot_execute(program: str, path: "str | None") -> "tuple | None":
    """(exit code, why) where ``program`` cannot be started as a shell would say (127: not
    found, 126: not executable); None where it can."""
    if "/" in program:
        if not os.path.exists(program):
            return 127, "No such file or directory"
        if os.path.isdir(program) or not os.access(program, os.X_OK):
            return 126, "Permission denied"
        return None
    if shutil.which(program, path=path) is None:
        return 127, "No such file or directory (not found on PATH)"
    return None


# how often the watch thread looks at ``stop`` while it waits on a process descriptor
WATCH_CHECK_S = 1.0


def _watch(stop: threading.Event, pid: int | None, deadline: float | None,
           interval_s: float) -> None:
    """Set ``stop`` at ``deadline`` (a time.monotonic) or when ``pid`` exits, whichever is
    first; return once ``stop`` is set. Costs nothing while it waits: on Linux the exit of
    ``pid`` wakes it (a pidfd, polled with a timeout of at most WATCH_CHECK_S to notice
    ``stop``); elsewhere, or where the pidfd cannot be had, ``pid`` is looked at once per
    sampling interval, never more often than the sampler wakes."""
    fd = _pidfd(pid) if pid is not None else None
    try:
        while not stop.is_set():
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                break
            if fd is not None:
                wait = WATCH_CHECK_S if left is None else min(left, WATCH_CHECK_S)
                if select.select([fd], [], [], wait)[0]:
                    break  # the process ended
            elif pid is not None:
                if not _alive(pid):
                    break
                stop.wait(interval_s if left is None else min(left, interval_s))
            else:
                stop.wait(WATCH_CHECK_S if left is None else min(left, WATCH_CHECK_S))
        stop.set()
    finally:
        if fd is not None:
            os.close(fd)


def _pidfd(pid: int) -> int | None:
    """A descriptor that becomes readable when ``pid`` exits (Linux 5.3+), or None."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):  # not Linux, an older kernel, no such process
        return None


def _alive(pid: int) -> bool:
    """Whether ``pid`` is running: it exists and is not a zombie (exited, not yet reaped)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return stat_fields(f.read())[:1] != [b"Z"]
    except OSError:
        return True


def _forward(child: subprocess.Popen, signum: int) -> None:
    if signum == signal.SIGINT and _terminal_sent_it_to_the_group():
        return  # Ctrl-C reached the program already (same foreground process group)
    try:
        child.send_signal(signum)
    except (ProcessLookupError, OSError):
        pass


def _terminal_sent_it_to_the_group() -> bool:
    """Whether this process (and so its child, which shares its process group) is in the
    terminal's foreground group: a Ctrl-C from there is delivered to both, so forwarding it
    would interrupt the program twice."""
    for fd in (0, 1, 2):
        try:
            return os.tcgetpgrp(fd) == os.getpgrp()
        except OSError:
            continue
    return False
