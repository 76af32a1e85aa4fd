"""A local stand-in for a remote model API, for the recipes' examples: agentscope's scripted
OpenAI-compatible endpoint (``agentscope/scenarios/llm_server.py``), started outside the
agent's process tree, as api.openai.com would be.

* ``POST /v1/chat/completions`` answers like the OpenAI API after the wait the model's name
  asks for (``fake-sleep-0.5``: half a second, asleep: no CPU, like a model server far away);
  when tools are offered and none was called yet, the answer calls the first one.
* ``GET /wait?s=1.0`` answers after that long (a slow HTTP API for a tool).

``with openai_endpoint(base_url) as url:`` yields ``base_url`` when one is given (a real
endpoint: nothing is started), else the URL (``.../v1``) of a fake one, stopped when the
block ends. ``anthropic_endpoint(base_url)`` does the same with a fake Anthropic Messages
API (fake_anthropic.py). Each is started through a short-lived intermediate and watched by a
guard process that stops it when the agent's process is gone (killed, crashed): ``agentscope
run`` samples the agent's process tree, and the endpoint's process is not part of it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Iterator, Optional

# runs detached (its own session, adopted once the intermediate exits): starts the endpoint,
# says "<guard pid> <url>", and stops the endpoint when the agent (argv[1]) is gone
_GUARD = """\
import os, signal, subprocess, sys, time
stop = []  # the handler only notes the signal: an exception raised into poll() or wait()
signal.signal(signal.SIGTERM, lambda *_: stop.append(1))  # could leave the server unreaped
agent = int(sys.argv[1])
server = subprocess.Popen([sys.executable, *sys.argv[2:]], stdout=subprocess.PIPE, text=True)
print(os.getpid(), server.stdout.readline().strip(), flush=True)
os.close(1)
def alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
while not stop and server.poll() is None and alive(agent):
    time.sleep(0.2)
server.terminate()
server.wait()
"""

_DETACH = """\
import subprocess, sys
guard = subprocess.Popen([sys.executable, "-c", *sys.argv[1:]],
                         start_new_session=True, stdin=subprocess.DEVNULL,
                         stdout=subprocess.PIPE, text=True)
print(guard.stdout.readline().strip(), flush=True)
"""


@contextlib.contextmanager
def openai_endpoint(base_url: Optional[str] = None) -> Iterator[str]:
    """``base_url`` if given, else a fake OpenAI-compatible endpoint's
    ``http://127.0.0.1:PORT/v1`` for the block (see the module)."""
    if base_url:
        yield base_url
        return
    with _fake(["-m", "agentscope.scenarios.services", "llm-server"]) as url:
        yield f"{url}/v1"


@contextlib.contextmanager
def anthropic_endpoint(base_url: Optional[str] = None) -> Iterator[str]:
    """``base_url`` if given, else a fake Anthropic Messages API's ``http://127.0.0.1:PORT``
    (fake_anthropic.py) for the block."""
    if base_url:
        yield base_url
        return
    with _fake([str(Path(__file__).resolve().parent / "fake_anthropic.py")]) as url:
        yield url


@contextlib.contextmanager
def _fake(server: list) -> Iterator[str]:
    """``python SERVER...`` (its first line: its URL) outside this process's tree, guarded."""
    via = subprocess.Popen([sys.executable, "-c", _DETACH, _GUARD, str(os.getpid()), *server],
                           stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True)
    said = via.communicate(timeout=60)[0].split()
    if len(said) != 2 or not said[0].isdigit():
        raise RuntimeError("the fake model endpoint did not start (its error is above)")
    guard, url = int(said[0]), said[1]
    try:
        yield url
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(guard, signal.SIGTERM)  # it stops the endpoint, then itself
