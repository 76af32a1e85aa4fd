"""A user's own SQL over a store (``agentscope query``, :meth:`Analysis.query`): one reading
statement, on a DuckDB connection of its own that can read the store and nothing else.

Checking the statement's kind is not enough: DuckDB reads and writes files from inside a
SELECT (``read_csv('/etc/shadow')``, ``glob('/')``), deletes through a CTE (``WITH d AS
(DELETE ... RETURNING *) SELECT ...``) and runs what ``EXPLAIN ANALYZE`` explains. So the
statement runs on a connection that

* cannot reach anything outside the database: ``enable_external_access = false`` (no file,
  no URL, no ATTACH, no COPY or EXPORT target), no extension loaded or installed on demand
  (``autoload_known_extensions``/``autoinstall_known_extensions``/
  ``allow_community_extensions`` false), no Python variable read as a table
  (``python_enable_replacements = false``), and ``lock_configuration = true``, so that the
  statement cannot SET any of them back;
* cannot change the store: a store in a file is opened read-only; a store in memory is
  copied into a fresh database of the same settings (DuckDB has no read-only database in
  memory), and every statement runs in a transaction that is rolled back, so what a
  statement wrote there is gone before the next;
* takes one statement of a reading kind (SELECT, including DESCRIBE, SHOW and SUMMARIZE;
  EXPLAIN; PRAGMA).

``enable_external_access`` cannot be turned on again on a database, and the store's own
loading reads trace files through DuckDB, so these settings can never be the store's own:
hence the connection of its own. DuckDB opens a file once per process with one set of
settings: the file is opened for the statement only while no other connection of this
process has it open (:meth:`Store.read` steps its own connection aside for it).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import duckdb

from ..errors import QueryError
from .connect import connect

# what a user's connection may not do, and that it may not change them (last: once it is
# set, nothing else can be)
LOCKED_DOWN = {
    "enable_external_access": False,
    "autoload_known_extensions": False,
    "autoinstall_known_extensions": False,
    "allow_community_extensions": False,
    "python_enable_replacements": False,
    "lock_configuration": True,
}

READING = {duckdb.StatementType.SELECT, duckdb.StatementType.EXPLAIN,
           duckdb.StatementType.PRAGMA}


def check_statement(statement: str) -> None:
    """Raise QueryError unless ``statement`` is exactly one statement of a reading kind."""
    if not isinstance(statement, str):
        raise QueryError(f"a SQL statement is text, not {type(statement).__name__}")
    try:
        statements = duckdb.extract_statements(statement)
    except (duckdb.Error, UnicodeDecodeError) as e:  # a message quoting non-UTF-8 input
        raise QueryError(_message(e)) from None
    if len(statements) != 1:
        raise QueryError(f"one statement at a time, not {len(statements)}")
    kind = statements[0].type
    if kind not in READING:
        raise QueryError(f"read-only: {kind.name} statements are not run here (one SELECT, "
                         "DESCRIBE, SHOW, SUMMARIZE, EXPLAIN or PRAGMA)")


class UserSQL:
    """A locked-down connection for a user's statements (see the module's docstring):
    :meth:`on_file` or :meth:`copy_of`, then :meth:`read`; :meth:`close` when done."""

    def __init__(self, con: "duckdb.DuckDBPyConnection") -> None:
        self.con = con

    @classmethod
    def on_file(cls, path: "str | Path", wait_s: Optional[float] = None) -> "UserSQL":
        """The store in the DuckDB file ``path``, opened read-only (waiting up to ``wait_s``
        while another process writes it; StoreError after)."""
        return cls(connect(Path(path), read_only=True, config=dict(LOCKED_DOWN),
                           wait_s=wait_s))

    @classmethod
    def copy_of(cls, con: "duckdb.DuckDBPyConnection") -> "UserSQL":
        """A copy of every table and view of the database of ``con`` (its main schema), in a
        fresh locked-down database in memory. The rows go across as Arrow batches, never as
        Python objects; each table is made with its own DDL, so the types (JSON, ...) and
        constraints stay what they were."""
        dst = duckdb.connect(":memory:", config=dict(LOCKED_DOWN))
        try:
            tables = con.execute(
                "SELECT table_name, sql FROM duckdb_tables() WHERE database_name = "
                "current_database() AND schema_name = 'main' ORDER BY table_name").fetchall()
            for name, ddl in tables:
                dst.execute(ddl)
                rows = con.sql(f"SELECT * FROM {_ident(name)}").to_arrow_reader()
                dst.register("incoming", rows)
                try:
                    dst.execute(f"INSERT INTO {_ident(name)} SELECT * FROM incoming")
                finally:
                    dst.unregister("incoming")
            views = con.execute(
                "SELECT view_name, sql FROM duckdb_views() WHERE NOT internal AND "
                "database_name = current_database() AND schema_name = 'main'").fetchall()
            _create_views(dst, views)
        except BaseException:
            dst.close()
            raise
        return cls(dst)

    def read(self, statement: str, frame: bool = False) -> Any:
        """Run one reading ``statement`` (:func:`check_statement`) in a transaction that is
        rolled back: a pandas DataFrame with ``frame``, else (column names, row tuples).
        Raises QueryError for anything DuckDB refuses, with its reason."""
        check_statement(statement)
        self.con.execute("BEGIN TRANSACTION")
        try:
            cursor = self.con.execute(statement)
            if frame:
                return cursor.fetchdf()
            return [d[0] for d in cursor.description or []], cursor.fetchall()
        except (duckdb.Error, UnicodeDecodeError) as e:  # a message quoting non-UTF-8 input
            raise QueryError(_message(e)) from None
        finally:
            try:
                self.con.execute("ROLLBACK")
            except duckdb.Error:
                pass  # an error already ended the transaction

    def close(self) -> None:
        self.con.close()

    def __enter__(self) -> "UserSQL":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _create_views(dst: "duckdb.DuckDBPyConnection", views: list) -> None:
    """Create ``views`` ((name, DDL)) in ``dst``, a view that reads another after it (views
    come in no useful order): each pass creates those whose names it can resolve."""
    pending = list(views)
    while pending:
        failed = []
        for name, ddl in pending:
            try:
                dst.execute(ddl)
            except duckdb.Error:  # names a view not made yet
                failed.append((name, ddl))
        if len(failed) == len(pending):  # a view of something not copied: left out
            return
        pending = failed


def _ident(name: str) -> str:
    """A quoted SQL identifier."""
    return '"' + name.replace('"', '""') + '"'


def _message(e: BaseException) -> str:
    """DuckDB's reason, said for a user's query: what the locked-down settings refused is
    named as such."""
    try:  # printable whatever it quotes: non-UTF-8 input comes back as lone surrogates
        text = str(e).encode("utf-8", "backslashreplace").decode("utf-8").strip()
    except Exception:  # noqa: BLE001 - a message that cannot be made into text
        text = ""
    text = text or type(e).__name__
    if isinstance(e, duckdb.PermissionException):
        return (f"read-only query: no files, network or extensions from here ({text}); "
                "docs/cli.md#query")
    if "attached in read-only mode" in text:  # a write inside a SELECT or EXPLAIN ANALYZE
        return f"read-only query: it would write to the store ({text})"
    if "configuration has been locked" in text:
        return f"read-only query: settings cannot be changed ({text})"
    return text
