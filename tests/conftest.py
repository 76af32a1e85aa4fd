"""Shared fixtures: tracing into a temporary directory, and reading back what was written."""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import time
from pathlib import Path

import pytest

import agentscope
from agentscope.store.tracedir import scan

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO / "tests" / "corpus"  # vendored copies with their notices (corpus/README.md)
# screenshots the browser tests save for a person to look at (never in git: the folder carries
# its own .gitignore); the run's are listed at its end
SCREENSHOTS = REPO / ".pytest-artifacts" / "screenshots"
# recordings that a test about verdicts under real load keeps when it fails (keep_on_failure)
RECORDINGS = REPO / ".pytest-artifacts" / "recordings"
_STARTED = time.time()


@contextlib.contextmanager
def keep_on_failure(name: str, *folders: Path):
    """Where the block fails, copy ``folders`` (a test's recordings) under
    .pytest-artifacts/recordings/NAME-TIME/ and name the copy in the failure: a verdict that
    went wrong under the machine's load of the moment can then be read, not guessed."""
    try:
        yield
    except AssertionError as e:
        kept = RECORDINGS / f"{name}-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}"
        for folder in folders:
            shutil.copytree(folder, kept / folder.name, dirs_exist_ok=True)
        raise AssertionError(f"{e}\n(its recordings are kept in {kept})") from e


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """The paths of the screenshots and kept recordings this run saved, printed even
    under -q."""
    for title, found in (("screenshots", SCREENSHOTS.glob("*.png")),
                         ("recordings kept by failed tests", RECORDINGS.glob("*"))):
        new = sorted(p for p in found if p.stat().st_mtime >= _STARTED - 1)
        if new:
            terminalreporter.write_sep("-", title)
            for p in new:
                terminalreporter.write_line(str(p))


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    """Tests must not inherit tracing settings from the environment that runs them."""
    for name in ("AGENTSCOPE_TRACE_DIR", "AGENTSCOPE_SERVICE", "AGENTSCOPE_DISABLED",
                 "AGENTSCOPE_FLUSH_INTERVAL", "AGENTSCOPE_MAX_QUEUE", "TRACEPARENT",
                 "TRACESTATE", "OTEL_SDK_DISABLED", "OTEL_SERVICE_NAME"):
        monkeypatch.delenv(name, raising=False)
    yield
    agentscope.shutdown()


@pytest.fixture
def trace_dir(tmp_path):
    """An initialised agentscope writing to a fresh directory; shut down after the test."""
    d = tmp_path / "traces"
    rt = agentscope.init(d, service="test-agent", flush_interval_s=0.1)
    assert rt is not None
    yield d
    agentscope.shutdown()


def read_spans(directory):
    """Flush, then every span in ``directory`` keyed by name (names are unique in tests)."""
    agentscope.flush()
    result = scan(directory)
    assert not result.problems, [str(p) for p in result.problems]
    return result.spans


def by_name(spans):
    out = {}
    for s in spans:
        assert s.name not in out, f"duplicate span name {s.name} in test"
        out[s.name] = s
    return out


def child_env(**extra):
    """Environment for a Python child process that imports this checkout's agentscope."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env.update(extra)
    return env


PYTHON = sys.executable
