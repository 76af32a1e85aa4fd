"""Span and sample rows as Parquet columns (``Source.parquet``): what a ClickHouse window is
read into (store/clickhouse.py ``read_into``). They load as the same rows as lines do, a bad
row is named by its number and the rest loads, a file DuckDB cannot read is quarantined, and
a rewritten file replaces what it gave. (The ClickHouse side: tests/test_clickhouse.py.)"""

from __future__ import annotations

import json
from pathlib import Path

import duckdb

from agentscope.formats import samplefile, spanfile
from agentscope.records import SampleRecord, SpanEvent, SpanRecord
from agentscope.store.duckdb_store import Store
from agentscope.store.inputs import Source
from agentscope.store.schema import SAMPLE_COLUMNS, SPAN_COLUMNS

T0 = 1_800_000_000_000_000_000
TRACE = "c0ffee00c0ffee00c0ffee00c0ffee00"


def span_line(n: int, **change) -> str:
    record = SpanRecord(TRACE, f"{n:016x}", None if n == 1 else f"{1:016x}", f"step {n}",
                        "tool" if n > 1 else "task", "internal", T0 + n, T0 + 10**9 - n,
                        "unset", None, "svc", "h", 7, 7, 5000 * n, None, None, 1, 0, 3, 0,
                        None, {"gen_ai.request.model": "m", "tries": n,
                               "nested": {"a": [1, 2.5]}},
                        (SpanEvent("retry", T0 + n + 5, {"n": n, "why": "é/\"q\""}),))
    obj = json.loads(spanfile.encode(record))
    obj.update(change)
    return json.dumps(obj)


def sample_line(n: int) -> str:
    return samplefile.encode(SampleRecord(T0 + n * 10**8, "h", 7, "host", None,
                                          "cpu.util", 0.25 * n)).rstrip("\n")


def as_parquet(lines: list, path: Path, columns: dict, **types: str) -> Path:
    """``lines`` (our JSON lines) as a Parquet file of their fields, JSON values as text:
    as ClickHouse writes one (``types``: a column's type other than the store's)."""
    src = path.with_suffix(".jsonl")
    src.write_text("".join(x + "\n" for x in lines))
    struct = "{" + ", ".join(f"'{k}': '{types.get(k, v)}'" for k, v in columns.items()) + "}"
    with duckdb.connect() as con:
        con.execute(f"COPY (SELECT * FROM read_json({quoted(src)}, format = "
                    f"'newline_delimited', columns = {struct})) TO {quoted(path)} "
                    "(FORMAT parquet)")
    src.unlink()
    return path


def quoted(path: Path) -> str:
    return "'" + str(path).replace("'", "''") + "'"


def load(store: Store, *files: Path):
    found = [Source(p, p.name, "spans" if p.name.startswith("spans") else "samples",
                    parquet=True) for p in files]
    return store.load(files[0].parent, found=(found, []))


def rows(store: Store, table: str) -> list:
    columns = SPAN_COLUMNS if table == "spans" else SAMPLE_COLUMNS
    return sorted(store._x(f"SELECT {', '.join(columns)} FROM {table}"), key=repr)


def test_parquet_rows_load_as_their_lines_do(tmp_path):
    spans, samples = [span_line(n) for n in range(1, 6)], [sample_line(n) for n in range(4)]
    lines_dir, parquet_dir = tmp_path / "lines", tmp_path / "parquet"
    lines_dir.mkdir(), parquet_dir.mkdir()
    (lines_dir / "spans-x-1-1.jsonl").write_text("".join(x + "\n" for x in spans))
    (lines_dir / "samples-x-1-1.jsonl").write_text("".join(x + "\n" for x in samples))
    want = Store(":memory:")
    want.load(lines_dir)
    got = Store(":memory:")
    report = load(got, as_parquet(spans, parquet_dir / "spans-p.parquet", SPAN_COLUMNS),
                  as_parquet(samples, parquet_dir / "samples-p.parquet", SAMPLE_COLUMNS))
    assert not report.problems
    assert (report.spans_added, report.samples_added) == (5, 4)
    assert rows(got, "spans") == rows(want, "spans")
    assert rows(got, "samples") == rows(want, "samples")
    # the attributes' and events' JSON text too, not only their values
    assert got._x("SELECT attrs FROM spans WHERE span_id = '0000000000000002'")[0][0] == \
        want._x("SELECT attrs FROM spans WHERE span_id = '0000000000000002'")[0][0]


def test_a_bad_row_is_named_by_its_number_and_the_rest_loads(tmp_path):
    spans = [span_line(1), span_line(2), span_line(3, span_id="not-hex!"), span_line(4)]
    store = Store(":memory:")
    report = load(store, as_parquet(spans, tmp_path / "spans-p.parquet", SPAN_COLUMNS))
    assert [(p.line, "span_id" in p.reason) for p in report.problems] == [(3, True)]
    assert report.problems[0].path == str(tmp_path / "spans-p.parquet")
    assert report.spans_added == 3
    assert [r[1] for r in sorted(rows(store, "spans"))] == [f"{n:016x}" for n in (1, 2, 4)]
    assert [(p.path, p.line) for p in store.problems()] == [(str(tmp_path / "spans-p.parquet"),
                                                             3)]


def test_a_file_that_is_not_parquet_is_quarantined_and_the_rest_loads(tmp_path):
    bad = tmp_path / "spans-p.parquet"
    bad.write_bytes(b"PAR1 this is not a Parquet file")
    samples = as_parquet([sample_line(1)], tmp_path / "samples-p.parquet", SAMPLE_COLUMNS)
    store = Store(":memory:")
    report = load(store, bad, samples)
    assert [p.path for p in report.problems] == [str(bad)]
    assert "not loaded" in report.problems[0].reason
    assert (report.spans_added, report.samples_added) == (0, 1)


def test_a_rewritten_file_replaces_what_it_gave(tmp_path):
    path = tmp_path / "spans-p.parquet"
    store = Store(":memory:")
    as_parquet([span_line(n) for n in (1, 2, 3)], path, SPAN_COLUMNS)
    assert load(store, path).spans_added == 3
    again = load(store, path)  # unchanged: nothing read
    assert (again.files_unchanged, again.spans_added) == (1, 0)
    as_parquet([span_line(n) for n in (1, 5)], path, SPAN_COLUMNS)
    assert load(store, path).spans_added == 2
    assert [r[1] for r in sorted(rows(store, "spans"))] == [f"{n:016x}" for n in (1, 5)]


def test_a_number_out_of_its_column_or_text_that_is_not_json_is_a_named_row(tmp_path):
    """What the store's types cannot take (a pid past INTEGER; attributes that are not JSON)
    fails the fast path's read; the rows are then checked one by one and named, and the
    others load, rather than the file being refused whole."""
    spans = [span_line(1), span_line(2, pid=2**40), span_line(3, attrs="{not json"),
             span_line(4)]
    store = Store(":memory:")
    report = load(store, as_parquet(spans, tmp_path / "spans-p.parquet", SPAN_COLUMNS,
                                    pid="BIGINT"))
    assert [p.line for p in report.problems] == [2, 3]
    assert "pid" in report.problems[0].reason and "attrs" in report.problems[1].reason
    assert report.spans_added == 2


def test_a_good_file_takes_the_fast_path_and_keeps_a_repeated_ids_first_row(tmp_path,
                                                                            monkeypatch):
    """A file whose rows all pass is read by the fast path (the view over the Parquet), not
    row by row; of a (trace, span) id on two rows, the first is kept (by its row number)."""
    from agentscope.store import loading

    def per_file(*_):
        raise AssertionError("the per-file path read a good file")

    monkeypatch.setattr(loading.Loader, "_parquet_lines", per_file)
    spans = [span_line(1, name="first"), span_line(2), span_line(3),
             span_line(1, name="again")]
    store = Store(":memory:")
    report = load(store, as_parquet(spans, tmp_path / "spans-p.parquet", SPAN_COLUMNS))
    assert not report.problems and (report.spans_added, report.duplicates) == (3, 1)
    assert store._x("SELECT name FROM spans WHERE span_id = '0000000000000001'") == \
        [("first",)]


def test_a_value_the_store_cannot_hold_fails_the_insert_and_is_named(tmp_path):
    """A pid past INTEGER passes the checks and fails only as it is inserted: the insert is
    rolled back, the file read row by row, that row named, the others loaded."""
    spans = [span_line(1), span_line(2, pid=2**40), span_line(3)]
    store = Store(":memory:")
    report = load(store, as_parquet(spans, tmp_path / "spans-p.parquet", SPAN_COLUMNS,
                                    pid="BIGINT"))
    assert [(p.line, "pid" in p.reason) for p in report.problems] == [(2, True)]
    assert report.spans_added == 2
    assert store._x("SELECT loaded_lines, records FROM loaded_files") == [(3, 2)]


def test_rows_are_checked_as_they_are_inserted_a_repeated_id_and_a_bad_row_too(tmp_path):
    """The fast path checks each row as it inserts it (no read of the file before): a bad
    row after a repeated id (the insert that keeps a repeat's first row) and a bad sample row
    each roll their insert back, and the per-file path names them; nothing else is lost."""
    spans = [span_line(1), span_line(2), span_line(1, name="again"),
             span_line(4, end_ns=T0 - 1)]
    bad_sample = json.loads(sample_line(2))
    bad_sample["metric"] = ""  # (a sample of no metric)
    samples = [sample_line(0), json.dumps(bad_sample), sample_line(3)]
    store = Store(":memory:")
    report = load(store, as_parquet(spans, tmp_path / "spans-p.parquet", SPAN_COLUMNS),
                  as_parquet(samples, tmp_path / "samples-p.parquet", SAMPLE_COLUMNS))
    assert sorted((Path(p.path).name, p.line) for p in report.problems) == [
        ("samples-p.parquet", 2), ("spans-p.parquet", 4)]
    assert (report.spans_added, report.duplicates, report.samples_added) == (2, 1, 2)
    assert store._x("SELECT name FROM spans WHERE span_id = '0000000000000001'") == \
        [("step 1",)]
    assert [r[0] for r in rows(store, "samples")] == [T0, T0 + 3 * 10**8]
