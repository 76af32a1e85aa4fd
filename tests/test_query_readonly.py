"""A user's SQL (``Analysis.query``, ``agentscope query``) reads the store and nothing else:
one statement of a reading kind, on a connection with external access off, no extension
loaded or installed, settings locked and nothing written (store/user_sql.py). And ``query``
reads the saved analysis when the store is current instead of analysing again
(``open_store``)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

import agentscope
from agentscope.analysis import core
from agentscope.analysis.core import open_store
from agentscope.cli import main
from agentscope.errors import QueryError
from agentscope.store.duckdb_store import Store

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "sample_traces" / "example"
MORE = REPO / "sample_traces" / "io" / "io-db"
SECRET = "agentscope-test-secret-4f1c2a"


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns(".agentscope", "*.duckdb"))
    return dst


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    """The example traces analysed into a store in a file and into one in memory."""
    d = _copy(EXAMPLE, tmp_path_factory.mktemp("ro") / "traces")
    in_file = agentscope.analyze(d)
    in_memory = agentscope.analyze(d, db=":memory:")
    yield {"file": in_file, "memory": in_memory}
    in_memory.close()


@pytest.fixture(params=["file", "memory"])
def analysis(request, stores):
    return stores[request.param]


@pytest.fixture
def bait(tmp_path):
    """A file the queries must not read (its content is a secret), and where they must not
    write."""
    secret = tmp_path / "secret.csv"
    secret.write_text(f"password\n{SECRET}\n")
    return tmp_path


def _extensions() -> set:
    """Every file under DuckDB's extension directory (an install would add one)."""
    root = Path.home() / ".duckdb"
    return {str(p) for p in root.rglob("*")} if root.exists() else set()


def _written(where: Path) -> set:
    return {p.name for p in where.iterdir()} - {"secret.csv"}


ATTACKS = [
    # (statement, what the error must say)
    ("COPY (SELECT * FROM spans) TO '{d}/out.csv'", "read-only: COPY"),
    ("COPY spans TO '{d}/out.parquet' (FORMAT parquet)", "read-only: COPY"),
    ("EXPORT DATABASE '{d}/export'", "read-only: EXPORT"),
    ("SELECT * FROM read_csv('{d}/secret.csv')", "no files, network or extensions"),
    ("SELECT * FROM read_text('{d}/secret.csv')", "no files, network or extensions"),
    ("SELECT * FROM read_blob('{d}/secret.csv')", "no files, network or extensions"),
    ("SELECT * FROM read_json_auto('{d}/secret.csv')", "no files, network or extensions"),
    ("SELECT * FROM glob('{d}/*')", "no files, network or extensions"),
    ("SELECT * FROM '{d}/secret.csv'", "secret.csv"),
    ("SELECT * FROM read_csv('https://example.invalid/x.csv')",
     "no files, network or extensions"),
    ("SELECT 1; COPY (SELECT 1) TO '{d}/out.csv'", "one statement at a time, not 2"),
    ("SELECT 1; SELECT 2", "one statement at a time, not 2"),
    ("", "one statement at a time, not 0"),
    ("ATTACH '{d}/x.sqlite' AS x (TYPE sqlite)", "read-only: ATTACH"),
    ("ATTACH '{d}/x.duckdb' AS x", "read-only: ATTACH"),
    ("SELECT * FROM sqlite_scan('{d}/x.sqlite', 't')", "sqlite"),
    ("INSTALL sqlite", "read-only: LOAD"),
    ("LOAD sqlite", "read-only: LOAD"),
    ("SET enable_external_access = true", "read-only: SET"),
    ("RESET lock_configuration", "read-only: SET"),
    ("PRAGMA enable_profiling", "settings cannot be changed"),
    ("PRAGMA profiling_output = '{d}/profile.txt'", "read-only: SET"),
    ("PRAGMA import_database('{d}')", "no files, network or extensions"),
    ("CREATE TABLE stolen AS SELECT * FROM spans", "read-only: CREATE"),
    ("DELETE FROM spans", "read-only: DELETE"),
    ("CHECKPOINT", "read-only: CALL"),
    ("BEGIN TRANSACTION", "read-only: TRANSACTION"),
]


@pytest.mark.parametrize("statement,why", ATTACKS, ids=[a[0][:40] for a in ATTACKS])
def test_each_attack_fails_with_a_reason_and_touches_nothing(analysis, bait, statement, why):
    before = _extensions()
    with pytest.raises(QueryError) as e:
        analysis.query_rows(statement.format(d=bait))
    assert why in str(e.value)
    assert SECRET not in str(e.value)
    assert _written(bait) == set()
    assert _extensions() == before
    assert analysis.query_rows("SELECT count(*) FROM spans")[1] == [(116,)]


def test_a_python_variable_is_not_a_table(analysis):
    """DuckDB's Python client reads a DataFrame in the caller's frame as a table of that name
    (a "replacement scan"): not here."""
    leaked = pd.DataFrame({"password": [SECRET]})  # noqa: F841 (what the scan would find)
    with pytest.raises(QueryError, match="leaked"):
        analysis.query_rows("SELECT * FROM leaked")


@pytest.mark.parametrize("statement", [
    "WITH gone AS (DELETE FROM spans RETURNING *) SELECT count(*) FROM gone",
    "EXPLAIN ANALYZE DELETE FROM spans",
    "EXPLAIN ANALYZE CREATE TABLE stolen AS SELECT * FROM spans",
])
def test_a_write_hidden_in_a_reading_statement_changes_nothing(stores, statement):
    """Writes DuckDB lets through a SELECT or an EXPLAIN: a store in a file refuses them
    (read-only); the copy of a store in memory takes them in a transaction that is rolled
    back."""
    with pytest.raises(QueryError, match="it would write to the store"):
        stores["file"].query_rows(statement)
    stores["memory"].query_rows(statement)
    for a in stores.values():
        assert a.query_rows("SELECT count(*) FROM spans")[1] == [(116,)]
        assert "stolen" not in {t for (t,) in a.query_rows("SHOW TABLES")[1]}


def test_the_settings_are_locked_down(analysis):
    got = dict(analysis.query_rows(
        "SELECT name, value FROM duckdb_settings() WHERE name IN ('enable_external_access', "
        "'autoload_known_extensions', 'autoinstall_known_extensions', "
        "'allow_community_extensions', 'lock_configuration', 'python_enable_replacements')")[1])
    assert got == {"enable_external_access": "false", "autoload_known_extensions": "false",
                   "autoinstall_known_extensions": "false",
                   "allow_community_extensions": "false", "lock_configuration": "true",
                   "python_enable_replacements": "false"}


@pytest.mark.parametrize("statement,check", [
    ("SELECT count(*) AS n FROM tasks", lambda c, r: c == ["n"] and r == [(8,)]),
    ("SELECT count(*) FROM critical_path WHERE class IS NOT NULL",
     lambda c, r: r[0][0] > 0),
    ("FROM samples SELECT count(*)", lambda c, r: r[0][0] > 0),
    ("DESCRIBE tasks", lambda c, r: "bottleneck" in {x[0] for x in r}),
    ("SHOW TABLES", lambda c, r: {"spans", "samples", "tasks", "critical_path"}
     <= {x[0] for x in r}),
    ("SUMMARIZE spans", lambda c, r: "trace_id" in {x[0] for x in r}),
    ("EXPLAIN SELECT * FROM tasks", lambda c, r: len(r) == 1),
    ("PRAGMA table_info('spans')", lambda c, r: "span_id" in {x[1] for x in r}),
    ("SELECT name, value FROM duckdb_settings() LIMIT 1", lambda c, r: len(r) == 1),
    ("SELECT 1;", lambda c, r: r == [(1,)]),
    ("-- a comment\nSELECT 2 /* another */", lambda c, r: r == [(2,)]),
])
def test_reading_statements_still_work(analysis, statement, check):
    columns, rows = analysis.query_rows(statement)
    assert check(columns, rows), (columns, rows)


README_QUERIES = [
    "SELECT bottleneck, count(*), avg(duration_s) FROM tasks GROUP BY ALL",
    "SELECT name, class, start_s, end_s, share_cpu FROM critical_path\n"
    "    WHERE trace_id = (SELECT trace_id FROM tasks ORDER BY duration_s DESC LIMIT 1) "
    "ORDER BY seq",
]


def test_the_readme_queries_are_in_the_readme():
    readme = (REPO / "README.md").read_text()
    for q in README_QUERIES:
        assert " ".join(q.split()) in " ".join(readme.split())


@pytest.mark.parametrize("statement", README_QUERIES)
def test_the_readme_queries_run(analysis, statement):
    df = analysis.query(statement)
    assert isinstance(df, pd.DataFrame) and len(df) > 0


@pytest.mark.parametrize("statement", README_QUERIES)
def test_the_readme_queries_run_from_the_command_line(tmp_path, statement):
    d = _copy(EXAMPLE, tmp_path / "traces")
    got = CliRunner().invoke(main, ["query", str(d), statement, "--format", "csv"])
    assert got.exit_code == 0, got.output
    assert len(got.stdout.strip().splitlines()) > 1


def test_store_read_on_a_store_in_a_file_keeps_the_store_usable(tmp_path, bait):
    """Store.read steps the store's own connection aside for the statement's, and takes it
    back after (DuckDB opens a file once per process with one set of settings)."""
    d = _copy(EXAMPLE, tmp_path / "traces")
    with Store(tmp_path / "s.duckdb") as store:
        store.load(d)
        assert store.read("SELECT count(*) FROM spans") == (["count_star()"], [(116,)])
        with pytest.raises(QueryError, match="no files"):
            store.read(f"SELECT * FROM read_csv('{bait}/secret.csv')")
        with pytest.raises(QueryError, match="it would write to the store"):
            store.read("WITH g AS (DELETE FROM spans RETURNING *) SELECT count(*) FROM g")
        assert store.query("SELECT count(*) FROM spans").fetchone() == (116,)
        store.load(_copy(MORE, tmp_path / "more"))  # still writable
        assert store.read("SELECT count(*) FROM spans", frame=True).iloc[0, 0] == 122


def test_a_store_in_memory_is_copied_again_after_it_changed(tmp_path):
    with Store() as store:
        store.load(_copy(EXAMPLE, tmp_path / "a"))
        assert store.read("SELECT count(*) FROM spans")[1] == [(116,)]
        store.load(_copy(MORE, tmp_path / "b"))
        assert store.read("SELECT count(*) FROM spans")[1] == [(122,)]


# ---- the saved analysis, reused --------------------------------------------------------------
@pytest.fixture
def counted(monkeypatch):
    """How many times the analysis ran."""
    calls = []
    real = core._analyse

    def analyse(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(core, "_analyse", analyse)
    return calls


def test_a_second_query_reads_the_saved_analysis(tmp_path, counted):
    d = _copy(EXAMPLE, tmp_path / "traces")
    first = open_store(d)
    assert first.analysed and len(counted) == 1 and first.tasks_saved == 8
    second = open_store(d)
    assert not second.analysed and len(counted) == 1
    assert second.query_rows("SELECT count(*) FROM tasks")[1] == [(8,)]
    assert second.query("SELECT * FROM critical_path").equals(first.query(
        "SELECT * FROM critical_path"))
    assert second.load.files_loaded == 0 and second.load.files_unchanged > 0


def test_a_new_or_grown_file_makes_it_analyse_again(tmp_path, counted):
    d = _copy(EXAMPLE, tmp_path / "traces")
    agentscope.analyze(d)
    assert len(counted) == 1
    assert not open_store(d).analysed and len(counted) == 1  # analyze() saved it
    (more,) = MORE.glob("spans-*.jsonl")
    lines = more.read_text().splitlines(keepends=True)
    grown = d / more.name
    grown.write_text("".join(lines[:-1]))  # a writer still appending: its last span later
    again = open_store(d)
    assert again.analysed and len(counted) == 2
    spans = again.query_rows("SELECT count(*) FROM spans")[1][0][0]
    assert not open_store(d).analysed and len(counted) == 2
    with grown.open("a") as f:
        f.write(lines[-1])
    again = open_store(d)
    assert again.analysed and len(counted) == 3 and again.tasks_saved == 10
    assert again.query_rows("SELECT count(*) FROM spans")[1] == [(spans + 1,)]
    assert again.query_rows("SELECT count(*) FROM tasks")[1] == [(10,)]
    assert not open_store(d).analysed and len(counted) == 3


def test_another_version_of_agentscope_analyses_again(tmp_path, counted, monkeypatch):
    d = _copy(EXAMPLE, tmp_path / "traces")
    agentscope.analyze(d)
    monkeypatch.setattr("agentscope.store.duckdb_store.__version__", "999.0")
    assert open_store(d).analysed and len(counted) == 2


def test_a_store_in_memory_is_always_analysed(tmp_path, counted):
    d = _copy(EXAMPLE, tmp_path / "traces")
    with open_store(d, db=":memory:") as s:
        assert s.analysed and s.query_rows("SELECT count(*) FROM tasks")[1] == [(8,)]
    with open_store(d, db=":memory:") as s:
        assert s.analysed and len(counted) == 2


def test_open_store_says_what_analyze_says(tmp_path):
    d = _copy(EXAMPLE, tmp_path / "traces")
    (d / "notes.bin").write_bytes(b"\x00\x01 not a trace")
    a = agentscope.analyze(d)
    s = open_store(d)
    assert not s.analysed and s.warnings == a.warnings
    assert [str(p) for p in s.problems] == [str(p) for p in a.problems]
    with pytest.raises(FileNotFoundError):
        open_store(tmp_path / "nowhere")


def test_a_save_cut_short_leaves_no_current_analysis(tmp_path, counted):
    d = _copy(EXAMPLE, tmp_path / "traces")
    agentscope.analyze(d)
    path = d / ".agentscope" / "agentscope.duckdb"
    with Store(path) as store:
        assert store.saved_analysis()["tasks"] == 8
        with pytest.raises(KeyError):  # task columns missing: the save stops half-way
            store.save_analysis({"trace_id": ["0" * 32]}, {})
        assert store.saved_analysis() is None
    assert open_store(d).analysed and len(counted) == 2
