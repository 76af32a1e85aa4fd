"""Large analyses run in batches of whole traces (analysis/core.py, BATCH_SPANS): the results
equal one analysis of all the traces, wherever no trace's analysis reads another's spans;
where one does (event-loop spans, other threads' CPU, process trees), all at once."""

from __future__ import annotations

import dataclasses
import random
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest

import agentscope
from agentscope.analysis import core
from agentscope.analyzers.counters import CORES, PSI_CPU, PSI_MEMORY, RUN_QUEUE
from agentscope.formats import samplefile, spanfile
from agentscope.records import SampleRecord, SpanRecord
from agentscope.store.duckdb_store import Store

REPO = Path(__file__).resolve().parents[1]


def _analyses(directory, batch_spans, monkeypatch):
    """The analysis of ``directory`` at once and in batches of ``batch_spans`` spans, and how
    many batches the second ran."""
    whole = agentscope.analyze(directory, db=":memory:")
    monkeypatch.setattr(core, "BATCH_SPANS", batch_spans)
    calls = _asked_traces(monkeypatch)
    batched = agentscope.analyze(directory, db=":memory:")
    monkeypatch.undo()
    return whole, batched, len(calls)


def _asked_traces(monkeypatch) -> list:
    """The ``traces`` of every Store.analysis_input call from now on (until undone)."""
    calls = []
    real = Store.analysis_input

    def counted(self, *args, **kwargs):
        calls.append(kwargs.get("traces"))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Store, "analysis_input", counted)
    return calls


def _same(whole, batched, close=False):
    """Every result equal; ``close``: float shares and confidences of sections within 1e-9
    (an incremental analysis: the counters' running integrals are sums over a whole series,
    so samples added anywhere move their last digits), all else exactly."""
    assert batched.to_dict() == whole.to_dict()
    assert batched.summary == whole.summary
    for frame in ("tasks", "critical_path"):
        a, b = getattr(batched, frame), getattr(whole, frame)
        assert list(a.columns) == list(b.columns) and len(a) == len(b)
        for column in a.columns:
            if close and a[column].dtype == np.float64:
                assert np.allclose(a[column], b[column], rtol=0, atol=1e-9,
                                   equal_nan=True), (frame, column)
            else:
                assert a[column].equals(b[column]), (frame, column)
    for name in ("task", "seq", "start_ns", "end_ns", "cls", "confidence", "shares", "basis",
                 "assumed", "assumed_cls"):
        a, b = getattr(whole.sections, name), getattr(batched.sections, name)
        if a is None or b is None:
            assert a is None and b is None, name
        elif close and a.dtype == np.float64:
            assert np.allclose(a, b, rtol=0, atol=1e-9), name
        else:
            assert np.array_equal(a, b), name
    segments = [[s._replace(shares=None, confidence=None) if close else s for s in t.segments]
                for t in batched.task_results]
    assert segments == [[s._replace(shares=None, confidence=None) if close else s
                         for s in t.segments] for t in whole.task_results]
    if not close:
        assert batched.breakdown("stage") == whole.breakdown("stage")
    tables = "SELECT * FROM tasks ORDER BY trace_id", \
        "SELECT * FROM critical_path ORDER BY trace_id, seq"
    for sql in tables:
        a, b = batched.query(sql), whole.query(sql)
        if close:
            for column in a.columns:
                if a[column].dtype == np.float64:
                    assert np.allclose(a[column], b[column], rtol=0, atol=1e-9,
                                       equal_nan=True), column
                else:
                    assert a[column].equals(b[column]), column
        else:
            assert a.equals(b)


def _messy_traces(directory: Path, seed: int) -> None:
    """Generated agent traces and, in the same files, traces with what the walk and the
    classifier treat apart: orphans, gaps between roots, children outside their parent,
    zero-length spans, a span without accounting, errors; and 10 Hz host counters."""
    import sys

    sys.path.insert(0, str(REPO / "benchmarks"))
    from gen_traces import write_spanfiles

    write_spanfiles(directory, 40, spans_per_task=30, branches=3, seed=seed)
    rng = random.Random(seed)
    t0 = 1_800_000_000_000_000_000
    records = []
    for n in range(30):
        trace = f"{rng.getrandbits(128) | 1:032x}"
        start = t0 + rng.randint(0, 400) * 1_000_000_000
        spans = [(f"{rng.getrandbits(64) | 1:016x}", None, start, start + 2_000_000_000)]
        for _ in range(rng.randint(0, 12)):
            parent = rng.choice([s[0] for s in spans] + [f"{rng.getrandbits(64) | 1:016x}"])
            a = start + rng.randint(-200, 2500) * 1_000_000
            spans.append((f"{rng.getrandbits(64) | 1:016x}", parent, a,
                          a + rng.choice([0, 1, rng.randint(1, 900) * 1_000_000])))
        if rng.random() < 0.3:  # a second root after a gap
            a = start + 3_000_000_000
            spans.append((f"{rng.getrandbits(64) | 1:016x}", None, a, a + 500_000_000))
        for k, (span, parent, a, b) in enumerate(spans):
            measured = rng.random() < 0.7
            records.append(SpanRecord(
                trace, span, parent, f"op-{k % 4}", rng.choice(["tool", "inference", None]),
                "internal", a, b, rng.choice(["unset", "unset", "error"]), None, "svc",
                "h", 7, 7, rng.randint(0, max(b - a, 0)) if measured else None, 0, 0,
                1 if measured else None, 0, 0, 0, 0, {}))
    (directory / "spans-messy-7-1.jsonl").write_text("".join(spanfile.encode(r)
                                                             for r in records))
    samples = []
    for k in range(4500):
        ts = t0 + k * 100_000_000
        for metric, value in ((PSI_CPU, rng.random()), (RUN_QUEUE, rng.random() * 4),
                              (CORES, 2.0), (PSI_MEMORY, rng.random() * 0.1)):
            samples.append(SampleRecord(ts, "h", None, "host", None, metric, value))
    (directory / samplefile.file_name("h", 9, 1)).write_text(
        "".join(samplefile.encode(s) for s in samples))


@pytest.mark.parametrize("seed", [1, 2])
def test_batched_analysis_equals_one_analysis(tmp_path, monkeypatch, seed):
    _messy_traces(tmp_path, seed)
    whole, batched, batches = _analyses(tmp_path, 300, monkeypatch)
    assert batches >= 5 and whole.summary.tasks >= 65
    assert any(t.orphans for t in whole.task_results)
    assert whole.summary.measured_share < 1  # counters and labels both at work
    _same(whole, batched)


def test_batched_analysis_of_foreign_traces(tmp_path, monkeypatch):
    for sub in ("langfuse_framework_traces", "any_agent", "jaeger_ui_genai"):
        shutil.copytree(REPO / "tests" / "corpus" / "agent_traces" / sub, tmp_path / sub)
    whole, batched, batches = _analyses(tmp_path, 40, monkeypatch)
    assert batches > 3
    _same(whole, batched)


def test_coupled_traces_are_analysed_at_once(monkeypatch):
    """sample_traces/ has event-loop spans and process trees: one batch, whatever the
    batch size."""
    whole, batched, batches = _analyses(REPO / "sample_traces", 50, monkeypatch)
    assert batches == 1
    _same(whole, batched)


def test_trace_batches_never_split_a_trace(tmp_path):
    def spans(trace, n):
        return [SpanRecord(trace, f"{k + 1:016x}", None, "s", None, "internal",
                           10 ** 18 + k, 10 ** 18 + k + 5, "unset", None, "svc", "h", 1, 1,
                           None, 0, 0, None, None, None, None, 0, {}) for k in range(n)]
    records = spans("a" * 32, 3) + spans("b" * 32, 10) + spans("c" * 32, 2) + \
        spans("d" * 32, 2)
    (tmp_path / "spans-x-1-1.jsonl").write_text("".join(spanfile.encode(r) for r in records))
    with Store(None) as store:
        store.load(tmp_path)
        assert store.trace_batches(100) == [(None, None)]
        # a batch is the traces that start (in spans before them) within one multiple of
        # the size: at most the size plus its last trace, less one
        assert store.trace_batches(4) == [(None, "c" * 32), ("c" * 32, None)]
        assert store.trace_batches(2) == [(None, "b" * 32), ("b" * 32, "c" * 32),
                                          ("c" * 32, "d" * 32), ("d" * 32, None)]
        for lo, hi in store.trace_batches(4):
            inp = store.analysis_input(traces=(lo, hi))
            assert inp.trace_no[0] == 1 and inp.parent_idx.max() < len(inp.trace_no)


def test_settled_evidence_says_the_same_words():
    """A settled batch keeps only the figures its sections' own spans' words are made of
    (Classified.gathered), not every span's: the words are the same, those of the event-loop,
    child-process and interpreter-lock rules included (sample_traces has each), in any order
    they are read."""
    from agentscope.analyzers.evidence import Classified, Gathered

    words = agentscope.analyze(REPO / "sample_traces", db=":memory:").sections.evidence.texts()
    for said in ("blocked by `embed`", "child processes were runnable", "interpreter lock"):
        assert any(said in w for w in words), said
    evidence = agentscope.analyze(REPO / "sample_traces", db=":memory:").sections.evidence
    assert isinstance(evidence._classified, Classified)
    evidence.settle()
    assert isinstance(evidence._classified, Gathered)
    last = len(words) - 1
    assert evidence.texts_at([last, 0, last]) == [words[last], words[0], words[last]]
    assert evidence.texts(3, 9) == words[3:9]
    assert evidence.texts() == words
    # a span asked for twice says the same both times (its blocker named each time)
    classified = agentscope.analyze(REPO / "sample_traces", db=":memory:").sections.evidence
    rows = [r for r in classified._span_row.tolist() if r >= 0]
    twice = classified._classified.reasons(rows + rows)
    assert twice[:len(rows)] == twice[len(rows):]
    assert any("blocked by `embed`" in w for w in twice[len(rows):])


def test_batched_results_hold_each_section_once(tmp_path, monkeypatch):
    """What a large analysis keeps of its batches: the tasks read the joined sections (not
    each batch's own, which would then be held beside them), equal names and stages are one
    object each (a row read from the store is an object of its own), and the sections are
    saved a chunk at a time with the same rows as at once."""
    import gc
    import weakref

    from agentscope.analyzers import engine

    _messy_traces(tmp_path, 3)
    parts = []
    real = engine.analyze

    def kept(*args, **kwargs):
        fleet = real(*args, **kwargs)
        parts.append(weakref.ref(fleet.sections))
        return fleet

    monkeypatch.setattr(core, "BATCH_SPANS", 300)
    monkeypatch.setattr(engine, "analyze", kept)
    monkeypatch.setattr(core, "SAVE_SECTIONS", 7)
    batched = agentscope.analyze(tmp_path, db=":memory:")
    monkeypatch.undo()
    gc.collect()
    assert len(parts) >= 5 and not any(ref() is not None for ref in parts)
    sections = batched.sections
    assert all(t.segments._sections is sections for t in batched.task_results)
    for column in (sections.name, sections.stage):
        texts = [x for x in column.tolist() if x is not None]
        # (one object per distinct text in each batch)
        assert len({id(x) for x in texts}) <= len(set(texts)) * len(parts) < len(texts) / 2
    whole = agentscope.analyze(tmp_path, db=":memory:")
    _same(whole, batched)
    # segments already made are carried over to the joined sections, not left on a part's
    fleet = engine.Fleet(batched.task_results, sections, batched.summary)
    made = list(fleet.tasks[1].segments)
    n = len(fleet.tasks)
    rejoined = engine.joined([engine.part(fleet, 0, 2, False), engine.part(fleet, 2, n, False)])
    assert rejoined.tasks[1].segments._items is fleet.tasks[1].segments._items
    assert list(rejoined.tasks[1].segments) == made
    assert all(t.segments._sections is rejoined.sections for t in rejoined.tasks)
    assert [list(t.segments) for t in rejoined.tasks] == [list(t.segments) for t in fleet.tasks]


def test_the_store_cache_goes_once_the_batches_are_read(tmp_path, monkeypatch):
    """An analysis in batches of a store in a file lets DuckDB's cache of the file go once
    every batch is read (before the results are joined and saved), keeps DuckDB's memory
    limit as it was, and reads the store as before after it."""
    traces = tmp_path / "traces"
    traces.mkdir()
    _messy_traces(traces, 4)
    released = []
    real = Store.release_cache

    def counted(self):
        before = self.con.execute("SELECT current_setting('memory_limit')").fetchone()
        released.append(real(self))
        assert self.con.execute("SELECT current_setting('memory_limit')").fetchone() == before

    monkeypatch.setattr(core, "BATCH_SPANS", 300)
    monkeypatch.setattr(Store, "release_cache", counted)
    batched = agentscope.analyze(traces, db=tmp_path / "store.duckdb")
    assert len(released) == 1
    monkeypatch.undo()
    whole = agentscope.analyze(traces, db=":memory:")
    _same(whole, batched)
    memory = Store()  # (a store in memory: its data is its cache, nothing to let go)
    memory.con.execute("SET memory_limit = '1GB'")
    memory.release_cache()
    assert memory.con.execute("SELECT current_setting('memory_limit')").fetchone()[0] in (
        "1.0 GiB", "953.6 MiB")


def test_batches_of_a_store_in_a_file_make_their_words_again_from_it(tmp_path, monkeypatch):
    """An analysis in batches of a store in a file keeps no batch's classification (every
    span's figures): each batch's evidence in words is made again from the store when read,
    a window of its own traces at a time (never past the batch's last trace), and says the
    same words as one analysis of everything, in any order they are read."""
    import gc
    import weakref

    from agentscope.analysis.stored import StoredEvidence
    from agentscope.analyzers import engine
    from agentscope.analyzers.results import JoinedEvidence

    traces = tmp_path / "traces"
    traces.mkdir()
    _messy_traces(traces, 5)
    classified = []
    real = engine.analyze

    def kept(*args, **kwargs):
        fleet = real(*args, **kwargs)
        classified.append(weakref.ref(fleet.sections.evidence._classified))
        return fleet

    monkeypatch.setattr(core, "SPILLED_BATCH_SPANS", 300)
    monkeypatch.setattr(core, "STORED_WORDS_SPANS", 1000)
    monkeypatch.setattr(engine, "analyze", kept)
    batched = agentscope.analyze(traces, db=tmp_path / "store.duckdb")
    monkeypatch.undo()
    gc.collect()
    batches = len(classified)
    assert batches >= 5 and not any(ref() is not None for ref in classified)
    evidence = batched.sections.evidence
    assert isinstance(evidence, JoinedEvidence) and len(evidence._parts) == batches
    assert all(isinstance(p, StoredEvidence) for p in evidence._parts)
    whole = agentscope.analyze(traces, db=":memory:")
    words = whole.sections.evidence.texts()
    # each window reads traces of its own batch only: the first batch's last task's words
    # from an analysis that ends where the second batch starts
    asked = _asked_traces(monkeypatch)
    first = evidence._parts[0]
    second_starts = evidence._parts[1]._trace_ids[0]
    last = len(first) - 1
    assert first.texts_at([last]) == [words[last]]
    assert asked == [(first._trace_ids[-1], second_starts)]
    monkeypatch.undo()
    n = len(words)
    order = [n - 1, 0, n // 2, 1, n - 2]
    assert batched.sections.evidence.texts_at(order) == [words[k] for k in order]
    assert batched.sections.evidence.texts() == words
    _same(whole, batched)


def test_a_large_batched_analysis_keeps_its_sections_in_files(tmp_path, monkeypatch):
    """Above STORED_WORDS_SPANS, a store in a file analysed in batches writes each batch's
    section arrays to files as it goes and maps them (analysis/spilled.py): the same results,
    saved and restored the same, nothing left beside the store, and the pages read (the
    summary's, the save's) given back without changing a value."""
    from agentscope.analysis.spilled import let_go

    traces = tmp_path / "traces"
    traces.mkdir()
    _messy_traces(traces, 11)
    store = tmp_path / "store" / "store.duckdb"
    store.parent.mkdir()
    # (its batches are SPILLED_BATCH_SPANS, not BATCH_SPANS; the tasks saved a few at a time)
    monkeypatch.setattr(core, "BATCH_SPANS", 10**9)
    monkeypatch.setattr(core, "SPILLED_BATCH_SPANS", 300)
    monkeypatch.setattr(core, "STORED_WORDS_SPANS", 1000)
    monkeypatch.setattr(core, "SAVE_TASKS", 3)
    released = []
    monkeypatch.setattr(Store, "release_cache", lambda self: released.append(1))
    batched = agentscope.analyze(traces, db=store)
    monkeypatch.undo()
    assert len(batched.tasks) > 3 * 3
    sec = batched.sections
    assert len(released) > 5  # (before each batch: what the batches before read)
    for name in ("task", "seq", "start_ns", "end_ns", "cls", "confidence", "basis"):
        assert isinstance(getattr(sec, name), np.memmap), name
    assert isinstance(sec.span_id._v, np.memmap) and isinstance(sec.shares.val, np.memmap)
    assert sorted(p.name for p in store.parent.iterdir()) == ["store.duckdb"]
    whole = agentscope.analyze(traces, db=":memory:")
    _same(whole, batched)
    let_go(sec)
    let_go(sec, 3, 7)
    _same(whole, batched)
    # the analysis saved: restored as it was (nothing new since)
    again = agentscope.analyze(traces, db=store)
    assert again.traces_analysed == 0
    a, b = again.to_dict(), whole.to_dict()
    assert {k: v for k, v in a.items() if k != "summary"} == \
        {k: v for k, v in b.items() if k != "summary"}
    assert dataclasses.replace(again.summary, load=None) == \
        dataclasses.replace(whole.summary, load=None)


def test_sections_in_files_hold_what_joining_them_holds():
    """SpilledSections of batches that differ (span ids of other lengths or not bytes, one
    that assumed something and one that did not, an empty one) gives what engine.joined
    gives; ids that are not all of one width stay in memory."""
    from agentscope.analysis.spilled import SpilledSections
    from agentscope.analyzers.results import (CODE, JoinedEvidence, SectionEvidence, Sections,
                                              Shares)

    rng = np.random.default_rng(5)

    def part(n, tasks, ids, assumed):
        task = np.sort(rng.integers(0, tasks, n)) if n else np.zeros(0, dtype=np.int64)
        shares = rng.random((n, 6)) * (rng.random((n, 6)) < 0.4)
        return Sections(task, np.arange(n), ids, np.asarray(["a", "b"] * n, dtype=object)[:n],
                        np.asarray([None, "llm"] * n, dtype=object)[:n],
                        np.arange(n) * 10, np.arange(n) * 10 + 5,
                        rng.integers(0, 6, n).astype(CODE), rng.random(n), shares,
                        SectionEvidence(None, np.full(n, -1), None),
                        rng.integers(0, 3, n).astype(CODE),
                        *((rng.random(n), rng.integers(0, 6, n).astype(np.int8)) if assumed
                          else (None, None)))

    cases = [
        [part(5, 2, [f"{k:016x}" for k in range(5)], False),
         part(0, 0, [], False),
         part(4, 3, [f"{k:016x}" for k in range(4)], True)],
        [part(3, 1, ["a" * 16, None, "b" * 16], True),
         part(2, 2, ["c" * 32, "d" * 32], False),
         part(2, 1, ["é", ""], False)],
        [part(0, 0, [], False)],
    ]
    for k, parts in enumerate(cases):
        spill = SpilledSections(tempfile.gettempdir())
        for p in parts:
            spill.add(p, int(p.task.max()) + 1 if len(p) else 0)
        got = spill.sections()
        assert not spill._names and not spill._stages  # (each batch's let go once joined)
        offsets = np.cumsum([0] + [int(p.task.max()) + 1 if len(p) else 0 for p in parts])
        want = {"task": np.concatenate([p.task + o for p, o in zip(parts, offsets)])}
        for name in ("seq", "name", "stage", "start_ns", "end_ns", "cls", "confidence",
                     "basis"):
            want[name] = np.concatenate([getattr(p, name) for p in parts])
        assumed = any(p.assumed is not None for p in parts)
        for name in ("assumed", "assumed_cls"):
            want[name] = np.concatenate([np.zeros(len(p)) if getattr(p, name) is None
                                         else getattr(p, name) for p in parts]) \
                if assumed else None
        assert len(got) == sum(len(p) for p in parts)
        for name, b in want.items():
            a = getattr(got, name)
            assert (a is None and b is None) or np.array_equal(a, b), name
        assert got.span_id.tolist() == [i for p in parts for i in p.span_id.tolist()]
        assert np.array_equal(np.asarray(got.shares),
                              np.concatenate([np.asarray(p.shares) for p in parts]))
        assert isinstance(got.shares, Shares) and isinstance(got.evidence, JoinedEvidence)
        assert isinstance(got.span_id._v, np.memmap) == (k == 0)  # (else: in memory)


def test_a_smaller_store_keeps_what_its_words_are_made_of(tmp_path, monkeypatch):
    """At or below STORED_WORDS_SPANS spans the batches keep their sections' spans' figures
    (settled): reading every word makes no analysis again."""
    from agentscope.analyzers.evidence import Gathered
    from agentscope.analyzers.results import JoinedEvidence, SectionEvidence

    traces = tmp_path / "traces"
    traces.mkdir()
    _messy_traces(traces, 7)
    monkeypatch.setattr(core, "BATCH_SPANS", 300)
    batched = agentscope.analyze(traces, db=tmp_path / "store.duckdb")
    assert batched.summary.spans <= core.STORED_WORDS_SPANS
    evidence = batched.sections.evidence
    assert isinstance(evidence, JoinedEvidence) and len(evidence._parts) >= 5
    assert all(isinstance(p, SectionEvidence) and isinstance(p._classified, Gathered)
               for p in evidence._parts)
    asked = _asked_traces(monkeypatch)
    words = evidence.texts()
    assert not asked
    monkeypatch.undo()
    assert words == agentscope.analyze(traces, db=":memory:").sections.evidence.texts()


def test_an_analysis_in_batches_tells_its_progress(tmp_path, monkeypatch):
    """``analysis_progress(done, batches)`` is called as each batch is analysed (so that the
    command line shows an "analysing traces" bar after the load's), once a batch, up to
    (batches, batches); an analysis in one go calls it not at all."""
    traces = tmp_path / "traces"
    traces.mkdir()
    _messy_traces(traces, 4)
    monkeypatch.setattr(core, "BATCH_SPANS", 300)
    calls = _asked_traces(monkeypatch)
    seen: list = []
    with agentscope.analyze(traces, db=":memory:", analysis_progress=lambda *a: seen.append(a)):
        pass
    assert len(calls) > 1 and seen == [(k, len(calls)) for k in range(1, len(calls) + 1)]
    monkeypatch.undo()
    seen.clear()
    with agentscope.analyze(traces, db=":memory:", analysis_progress=lambda *a: seen.append(a)):
        pass
    assert seen == []


def test_the_command_line_bars_follow_the_phases(monkeypatch):
    """The CLI's bars: "loading traces" for a load of more than 32 MB, then "analysing
    traces" for an analysis in batches; the first ends when the second starts, none on a
    stderr that is not a terminal."""
    import io

    import click

    from agentscope import cli

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    err = Terminal()
    monkeypatch.setattr(cli.sys, "stderr", err)
    made = []
    real = click.progressbar

    def progressbar(**kwargs):
        made.append(kwargs["label"])
        return real(**kwargs)

    monkeypatch.setattr(cli.click, "progressbar", progressbar)
    bar = cli._ProgressBar()
    bar(10, 100)  # (a small load: no bar)
    for k in range(1, 4):
        bar.analysing(k, 3)
    assert made == ["analysing traces"] and bar.bar.pos == 3
    bar.close()
    bar = cli._ProgressBar()
    bar(1 << 20, 64 << 20)
    bar(64 << 20, 64 << 20)
    first = bar.bar
    bar.analysing(1, 2)
    assert made[1:] == ["loading traces", "analysing traces"] and first is not bar.bar
    bar.close()
    assert bar.bar is None and "analysing traces" in err.getvalue()
    # a ClickHouse source: a line before its window is read (no count to show), ending a bar
    bar = cli._ProgressBar()
    bar.analysing(1, 2)
    bar.reading("chdb:///data?table=otel_traces\x1b[2J")
    assert bar.bar is None
    assert "reading chdb:///data?table=otel_traces" in err.getvalue()
    assert "\x1b[2J" not in err.getvalue()  # (inert)
    made.clear()
    monkeypatch.setattr(cli.sys, "stderr", io.StringIO())  # not a terminal
    quiet = cli._ProgressBar()
    quiet(64 << 20, 64 << 20)
    quiet.analysing(1, 2)
    quiet.reading("chdb:///data?table=otel_traces")
    assert made == [] and quiet.bar is None and not cli.sys.stderr.getvalue()
