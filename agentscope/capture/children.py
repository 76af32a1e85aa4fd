"""Child processes of instrumented code.

Two hooks, installed once by ``agentscope.init`` and inert while tracing is off:

* ``subprocess.Popen.__init__``: before the child starts, its environment gets the current
  span as ``TRACEPARENT`` (W3C trace context) and the trace directory as
  ``AGENTSCOPE_TRACE_DIR``, so ``agentscope.init()`` in the child continues the trace; after it
  started, its pid is remembered together with the span that started it.
* ``os.waitpid`` (what ``subprocess`` and asyncio's child watchers call to reap a child) is
  served by ``os.wait4``, which also returns the child's resource usage. The child's CPU time
  (its own plus that of the descendants it waited for), its major faults and a count are
  credited to the span that started it and to that span's open ancestors.

So a span's ``child_cpu_ns`` is exact per span even when several threads run subprocesses at
once, which a process-wide ``getrusage(RUSAGE_CHILDREN)`` delta cannot be. Children reaped
outside Python's ``os.waitpid`` (``os.system``, C extensions) are not seen; see docs.
"""

from __future__ import annotations

import functools
import os
import subprocess
import threading
from typing import Any, Callable, Optional

from .._log import log_once

_MAX_OWNERS = 4096

# set by the runtime: () -> the accounting node of the current span, or None
current_node: Callable[[], Any] = lambda: None  # noqa: E731
# set by the runtime: (env: dict) -> None, adds TRACEPARENT etc. for the current span
fill_env: Optional[Callable[[dict], None]] = None
enabled = False

_owners: dict = {}
_lock = threading.Lock()
_installed = False
_orig_waitpid = os.waitpid
_orig_popen_init = subprocess.Popen.__init__
_ENV_POSITION = 10  # Popen(args, bufsize, executable, stdin, stdout, stderr, preexec_fn,
#                           close_fds, shell, cwd, env, ...): env is the 11th positional


def credit(node: Any, ru: Any, run_delay_ns: int = 0, own_cpu_ns: int = 0) -> None:
    """Add a reaped child's usage (and, from schedstat, the time it spent runnable, waiting
    for a CPU, and its own CPU without its descendants') to ``node`` and its open
    ancestors."""
    cpu = round((ru.ru_utime + ru.ru_stime) * 1e6) * 1000
    majflt, ivcsw, vcsw = ru.ru_majflt, ru.ru_nivcsw, ru.ru_nvcsw
    while node is not None:
        if not node.end_ns:
            node.child_run_delay_ns += run_delay_ns
            node.child_own_cpu_ns += own_cpu_ns
            node.child_cpu_ns += cpu
            node.children += 1
            node.child_majflt += majflt
            node.child_ivcsw += ivcsw
            node.child_vcsw += vcsw
        node = node.local_parent


def credit_workers(node: Any, cpu_ns: int) -> None:
    """Add the CPU time of a job that ``node``'s span handed to another thread (a pool job, a
    thread it started) to it and its open ancestors."""
    with _lock:
        while node is not None:
            if not node.end_ns:
                node.workers_cpu_ns += cpu_ns
            node = node.local_parent


def _on_reaped(pid: int, ru: Any, sched: tuple = (0, 0)) -> None:
    with _lock:
        node = _owners.pop(pid, None)
    if node is None:
        node = current_node()
    if node is not None:
        with _lock:
            credit(node, ru, *sched)


def _sched_of_exited(pid: int, options: int) -> tuple:
    """(pid, (ns it waited runnable for a CPU, ns it ran)) over the life of the child ``pid``
    (> 0) once it has exited, read from the kernel's schedstat while it is a zombie, before it
    is reaped: wait4 gives the CPU (its descendants' included) and the context switches, not
    that time. (0, (0, 0)) when not known."""
    if pid <= 0:
        return 0, (0, 0)
    try:
        info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT | (options & os.WNOHANG))
        if info is None:
            return 0, (0, 0)
        with open(f"/proc/{pid}/schedstat", "rb") as f:
            ran, waited = f.read().split()[:2]
        return pid, (int(waited), int(ran))
    except (OSError, ValueError, IndexError, AttributeError):
        return 0, (0, 0)


def _waitpid(pid: int, options: int, /):
    if not enabled:
        return _orig_waitpid(pid, options)
    timed, sched = _sched_of_exited(pid, options)
    rpid, status, ru = os.wait4(pid, options)
    if rpid > 0:
        try:
            _on_reaped(rpid, ru, sched if rpid == timed else (0, 0))
        except Exception as e:  # never break the caller's wait
            log_once("reap", "agentscope: child-process accounting failed (%r)", e)
    return rpid, status


@functools.wraps(_orig_popen_init)
def _popen_init(self, *args, **kwargs):
    if enabled and fill_env is not None:
        try:
            if len(args) > _ENV_POSITION:
                args = list(args)
                args[_ENV_POSITION] = _with_trace_env(args[_ENV_POSITION])
            else:
                kwargs["env"] = _with_trace_env(kwargs.get("env"))
        except Exception as e:
            log_once("popen-env", "agentscope: could not pass trace context to a child (%r)", e)
    _orig_popen_init(self, *args, **kwargs)
    if enabled:
        try:
            node = current_node()
            if node is not None:
                with _lock:
                    if len(_owners) >= _MAX_OWNERS:
                        _owners.pop(next(iter(_owners)))
                    _owners[self.pid] = node
        except Exception as e:
            log_once("popen-pid", "agentscope: could not track a child process (%r)", e)


def _with_trace_env(env: Any) -> Any:
    base = os.environ if env is None else env
    new = dict(base)
    fill_env(new)  # type: ignore[misc]
    if new == dict(base):
        return env
    return new


def install() -> None:
    """Install both hooks (once per process). Safe to call repeatedly."""
    global _installed
    if _installed or not hasattr(os, "wait4"):
        return
    _installed = True
    os.waitpid = _waitpid
    subprocess.Popen.__init__ = _popen_init
    # Popen.poll() reaps through a default argument bound at import time; point it at the hook.
    poll = getattr(subprocess.Popen, "_internal_poll", None)
    defaults = getattr(poll, "__defaults__", None)
    code = getattr(poll, "__code__", None)
    if defaults and code is not None and "_waitpid" in code.co_varnames:
        names = code.co_varnames[code.co_argcount - len(defaults):code.co_argcount]
        poll.__defaults__ = tuple(_waitpid if n == "_waitpid" and d is _orig_waitpid else d
                                  for n, d in zip(names, defaults))
