"""A store another process holds: opening it waits a little, says so once, then fails with one
line naming the store, the holder's pid and what to do (store/connect.py) — never DuckDB's
traceback."""

from __future__ import annotations

import logging
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from click.testing import CliRunner

import agentscope
from agentscope.analysis.core import open_store
from agentscope.cli import main
from agentscope.errors import StoreError, StoreLockedError
from agentscope.store import connect
from agentscope.store.duckdb_store import Store

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "sample_traces" / "example"

# holds the DuckDB file argv[1] (read-only with argv[2] == "ro") until its stdin closes
HOLDER = """
import sys, duckdb
con = duckdb.connect(sys.argv[1], read_only=sys.argv[2] == "ro")
print("held", flush=True)
sys.stdin.read()
con.close()
"""


class Holder:
    """Another process holding a store's file, until :meth:`release`."""

    def __init__(self, path: Path, read_only: bool = False) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(path),
                                      "ro" if read_only else "rw"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout.readline().strip() == "held"
        self.pid = self.proc.pid

    def release(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait(timeout=60)


@pytest.fixture
def traces(tmp_path):
    d = tmp_path / "traces"
    shutil.copytree(EXAMPLE, d)
    agentscope.analyze(d)  # its store: traces/.agentscope/agentscope.duckdb
    return d


@pytest.fixture
def held(traces):
    holder = Holder(traces / ".agentscope" / "agentscope.duckdb")
    yield holder
    holder.release()


@pytest.fixture
def short_wait(monkeypatch):
    monkeypatch.setattr(connect, "LOCK_WAIT_S", 0.5)


def _one_line(e: BaseException, path: Path, pid: int) -> None:
    text = str(e)
    assert "\n" not in text
    assert str(path) in text and f"pid {pid}" in text
    assert "--db :memory:" in text and "wait" in text


def test_a_held_store_fails_with_one_line_after_waiting(traces, held, short_wait, caplog):
    path = (traces / ".agentscope" / "agentscope.duckdb").resolve()
    with caplog.at_level(logging.WARNING, logger="agentscope"):
        with pytest.raises(StoreLockedError) as e:
            Store(path)
    assert isinstance(e.value, StoreError) and e.value.pid == held.pid
    _one_line(e.value, path, held.pid)
    waits = [r.getMessage() for r in caplog.records if "waiting for the store" in r.getMessage()]
    assert len(waits) == 1 and str(path) in waits[0] and f"pid {held.pid}" in waits[0]


def test_analyze_open_store_and_query_fail_the_same_way(traces, short_wait):
    a = agentscope.analyze(traces)
    path = (traces / ".agentscope" / "agentscope.duckdb").resolve()
    holder = Holder(path)
    try:
        for call in (lambda: agentscope.analyze(traces), lambda: open_store(traces),
                     lambda: a.query_rows("SELECT count(*) FROM spans")):
            with pytest.raises(StoreLockedError) as e:
                call()
            _one_line(e.value, path, holder.pid)
    finally:
        holder.release()
    assert a.query_rows("SELECT count(*) FROM spans")[1] == [(116,)]  # free again


def test_readers_share_the_store_and_a_writer_waits_for_them(traces, short_wait):
    a = agentscope.analyze(traces)
    path = traces / ".agentscope" / "agentscope.duckdb"
    holder = Holder(path, read_only=True)
    try:
        assert a.query_rows("SELECT count(*) FROM tasks")[1] == [(8,)]  # a reader: fine
        Store(path, read_only=True).close()
        with pytest.raises(StoreLockedError):
            Store(path)
        with pytest.raises(StoreLockedError):
            open_store(traces)  # it loads what is new: a writer
    finally:
        holder.release()


def test_the_wait_ends_when_the_holder_lets_go(traces, monkeypatch, caplog):
    monkeypatch.setattr(connect, "LOCK_WAIT_S", 120.0)
    holder = Holder(traces / ".agentscope" / "agentscope.duckdb")
    timer = threading.Timer(1.0, holder.release)
    timer.start()
    try:
        with caplog.at_level(logging.WARNING, logger="agentscope"):
            s = open_store(traces)
    finally:
        timer.cancel()
        holder.release()
    assert s.query_rows("SELECT count(*) FROM tasks")[1] == [(8,)]
    assert sum("waiting for the store" in r.getMessage() for r in caplog.records) == 1


def test_the_command_line_says_one_line_and_exits_1(traces, held, short_wait):
    got = CliRunner().invoke(main, ["query", str(traces), "SELECT 1"])
    assert got.exit_code == 1, got.output
    assert "Traceback" not in got.output and isinstance(got.exception, SystemExit)
    assert f"pid {held.pid}" in got.output and "--db :memory:" in got.output


def test_a_file_that_is_not_a_database_is_a_store_error(tmp_path):
    bad = tmp_path / "not.duckdb"
    bad.write_text("not a database")
    with pytest.raises(StoreError, match="cannot open the store") as e:
        Store(bad)
    assert not isinstance(e.value, StoreLockedError)
