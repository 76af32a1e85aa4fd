"""An analysis made again with ``previous=`` (what ``agentscope serve`` does at each refresh)
re-analyses only the traces that what was loaded since touched, and gives what a fresh
analysis of everything gives: random appends of new traces, spans that join existing
traces, late parents, new counter samples; a rewritten file or samples of another kind send
it back to a whole analysis."""

from __future__ import annotations

import random

import numpy as np

import pytest

import agentscope
from agentscope.analyzers import engine
from agentscope.analyzers.counters import CORES, PSI_CPU, PSI_MEMORY, RUN_QUEUE
from agentscope.formats import samplefile, spanfile
from agentscope.records import SampleRecord, SpanRecord

from .test_batches import _messy_traces, _same

T0 = 1_800_000_000_000_000_000


def _document(analysis):
    doc = analysis.to_dict()
    del doc["summary"]["load"]  # what this load did differs, by design
    return doc


def _check(directory, db, previous, monkeypatch):
    """The analysis with ``previous`` equals a fresh one; returns it and the traces it
    re-analysed (None: all)."""
    redone = []
    real = engine.merged

    def spy(before, fresh, traces):
        redone.append(list(traces))
        return real(before, fresh, traces)

    monkeypatch.setattr(engine, "merged", spy)
    analysed = _engine_runs(monkeypatch)
    again = agentscope.analyze(directory, db=db, previous=previous)
    monkeypatch.undo()
    if not redone and not analysed:  # nothing new: the analysis before is the answer
        redone.append([])
    fresh = agentscope.analyze(directory, db=":memory:")
    a, b = _document(again), _document(fresh)
    if a != b:  # name the first difference
        diff = [(x["trace_id"], k, x[k], y[k]) for x, y in zip(a["tasks"], b["tasks"])
                for k in x if x[k] != y[k]][:1]
        assert a == b, (len(a["tasks"]), len(b["tasks"]), diff)
    _same(_Unloaded(fresh), _Unloaded(again), close=True)
    return again, (redone[0] if redone else None)


def _engine_runs(monkeypatch):
    """A list that gets, for each engine analysis from now until ``monkeypatch.undo()``, the
    tasks it found."""
    made = []
    real = engine.analyze

    def spy(inp, *args, **kwargs):
        fleet = real(inp, *args, **kwargs)
        made.append(len(fleet.tasks))
        return fleet

    monkeypatch.setattr(engine, "analyze", spy)
    return made


class _Unloaded:
    """An analysis seen without what its load did (for _same)."""

    def __init__(self, analysis):
        self._a = analysis

    def __getattr__(self, name):
        return getattr(self._a, name)

    def to_dict(self):
        return _document(self._a)

    @property
    def summary(self):
        import dataclasses
        return dataclasses.replace(self._a.summary, load=None)


def _span(trace, span, parent, start, length, rng, name="late"):
    return SpanRecord(trace, span, parent, name, rng.choice(["tool", "inference", None]),
                      "internal", start, start + length, "unset", None, "svc", "h", 7, 7,
                      rng.randint(0, length), 0, 0, 1, 0, 0, 0, 0, {})


@pytest.mark.parametrize("seed,restored", [(3, False), (4, False), (5, True)])
def test_incremental_analysis_equals_a_fresh_one(tmp_path, monkeypatch, seed, restored):
    """``restored``: each analysis builds on the one the store saved (a new process, as
    `agentscope analyze` is), not on one in memory (serve)."""
    rng = random.Random(seed)
    traces, db, first = _analysed(tmp_path, seed)
    n_tasks = first.summary.tasks
    previous = first
    for round_ in range(4):
        with agentscope.analysis.core.Store(db, read_only=True) as store:
            rows = rng.sample(store.query("SELECT trace_id, span_id, start_ns, end_ns "
                                          "FROM spans ORDER BY span_id").fetchall(), 9)
        new = []
        for trace, span, start, end in rows[:6]:  # children joining existing traces
            new.append(_span(trace, f"{rng.getrandbits(64) | 1:016x}", span, start,
                             max(end - start, 2) // 2, rng))
        for trace, span, start, end in rows[6:9]:  # a late parent: existing roots adopt one
            parent = f"{rng.getrandbits(64) | 1:016x}"
            new.append(_span(trace, parent, None, start - 1_000_000, end - start + 2_000_000,
                             rng, "late-parent"))
            new.append(_span(trace, f"{rng.getrandbits(64) | 1:016x}", parent, start, 10, rng))
        for _ in range(3):  # new traces
            trace = f"{rng.getrandbits(128) | 1:032x}"
            start = T0 + rng.randint(0, 400) * 1_000_000_000
            new.append(_span(trace, f"{rng.getrandbits(64) | 1:016x}", None, start,
                             rng.randint(1, 3) * 1_000_000_000, rng, "new-task"))
        target = traces / ("spans-messy-7-1.jsonl" if round_ % 2 else f"spans-new-{round_}.jsonl")
        with open(target, "a") as f:
            f.write("".join(spanfile.encode(r) for r in new))
        if round_ == 2:  # new counter samples over a window of the traces' time
            at = T0 + rng.randint(0, 300) * 1_000_000_000
            # (between the first samples' times: two samples of a series at one time are
            # read in either order, a store's choice)
            samples = [SampleRecord(at + k * 100_000_000 + 50_000_000, "h", None, "host",
                                    None, m, v)
                       for k in range(50) for m, v in ((PSI_CPU, 0.9), (RUN_QUEUE, 3.0),
                                                       (CORES, 2.0), (PSI_MEMORY, 0.2))]
            (traces / samplefile.file_name("h", 9, 2)).write_text(
                "".join(samplefile.encode(s) for s in samples))
        again, redone = _check(traces, db, None if restored else previous, monkeypatch)
        assert redone is not None and 0 < len(redone) < n_tasks
        previous = again
    assert previous.summary.tasks == n_tasks + 12
    # only the first analysis still holds its spans' figures for its words: each refresh
    # keeps its sections' spans' only (or serve's memory would grow with every refresh); one
    # restored from the store holds none
    assert len(_unsettled(previous.sections.evidence)) == (0 if restored else 1)


def _unsettled(evidence, found=None):
    """The evidence objects below ``evidence`` that still hold a classification (every span's
    figures; a settled one keeps its sections' spans' only)."""
    from agentscope.analyzers.evidence import Classified
    from agentscope.analyzers.results import JoinedEvidence, SlicedEvidence

    found = {} if found is None else found
    if isinstance(evidence, JoinedEvidence):
        for part in evidence._parts:
            _unsettled(part, found)
    elif isinstance(evidence, SlicedEvidence):
        _unsettled(evidence._evidence, found)
    elif isinstance(getattr(evidence, "_classified", None), Classified):  # (Stored...: none)
        found[id(evidence)] = evidence
    return found


def _analysed(tmp_path, seed):
    """(a trace directory of messy traces, its store, their analysis)."""
    traces = tmp_path / "traces"
    traces.mkdir()
    _messy_traces(traces, seed)
    db = tmp_path / "store.duckdb"
    return traces, db, agentscope.analyze(traces, db=db)


def test_nothing_new_redoes_nothing(tmp_path, monkeypatch):
    traces, db, first = _analysed(tmp_path, 5)
    again, redone = _check(traces, db, first, monkeypatch)
    assert redone == []


def test_a_rewritten_file_or_other_samples_mean_a_whole_analysis(tmp_path, monkeypatch):
    traces, db, first = _analysed(tmp_path, 6)
    path = traces / "spans-messy-7-1.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[: len(lines) // 2]))  # rewritten: its spans are taken out
    again, redone = _check(traces, db, first, monkeypatch)
    assert redone is None
    (traces / samplefile.file_name("h", 9, 3)).write_text(samplefile.encode(SampleRecord(
        T0, "h", None, "gpu", "0", "gpu.utilization", 0.5)))
    _, redone = _check(traces, db, again, monkeypatch)
    assert redone is None


def test_only_the_analysis_the_store_saved_last_is_built_on(tmp_path, monkeypatch):
    """An analysis saved since ``previous`` (another process, another refresh) means the
    store's tables are not previous's: a whole analysis, still equal to a fresh one."""
    traces, db, first = _analysed(tmp_path, 8)
    rng = random.Random(8)
    (traces / "spans-more.jsonl").write_text(spanfile.encode(_span(
        "f" * 32, "e" * 16, None, T0 + 5_000_000_000, 1_000_000, rng)))
    agentscope.analyze(traces, db=db)  # saved by someone else meanwhile
    _, redone = _check(traces, db, first, monkeypatch)
    assert redone is None


def test_a_trace_that_loses_its_task_leaves_the_summary_right(tmp_path, monkeypatch):
    """A late span can leave a touched trace with no task (it closes a parent cycle): the
    merge is then one run of the earlier tasks, and its summary is theirs, not the earlier
    analysis' (found by a review)."""
    traces = tmp_path / "traces"
    traces.mkdir()
    rng = random.Random(9)
    path = traces / "spans-x-1-1.jsonl"
    path.write_text("".join(spanfile.encode(r) for r in (
        _span("a" * 32, "1" * 16, None, T0, 10 ** 9, rng, "A"),
        _span("b" * 32, "2" * 16, None, T0, 2 * 10 ** 9, rng, "B"),
        _span("c" * 32, "3" * 16, "9" * 16, T0, 3 * 10 ** 9, rng, "C"))))  # no parent yet
    db = tmp_path / "store.duckdb"
    first = agentscope.analyze(traces, db=db)
    assert first.summary.tasks == 3
    with open(path, "a") as f:  # the parent arrives, and its own parent is C: a cycle
        f.write(spanfile.encode(_span("c" * 32, "9" * 16, "3" * 16, T0, 3 * 10 ** 9, rng)))
    again, redone = _check(traces, db, first, monkeypatch)
    assert redone == ["c" * 32] and again.summary.tasks == len(again.task_results) == 2


def test_a_rewritten_file_is_seen_after_a_checkpoint_renumbers_rows(tmp_path, monkeypatch):
    """A file rewritten with as many spans, other traces: its rows are taken out and as many
    put back. A checkpoint after a large DELETE (DuckDB's automatic one, past 16 MB of WAL)
    renumbers the rows, so row ids alone would show nothing taken out and the earlier
    results would be served as current (found by a review). Forced here with a CHECKPOINT."""
    from agentscope.store import loading
    traces = tmp_path / "traces"
    traces.mkdir()
    rng = random.Random(10)
    path = traces / "spans-a-1-1.jsonl"

    def spans(tag):
        return "".join(spanfile.encode(_span(f"{tag:02x}{k:030x}", f"{k + 1:016x}", None,
                                             T0 + k * 10 ** 9, (tag + 1) * 10 ** 8, rng,
                                             f"task-{tag}")) for k in range(5))

    path.write_text(spans(1))
    db = tmp_path / "store.duckdb"
    first = agentscope.analyze(traces, db=db)
    path.write_text(spans(2))
    real = loading.Loader._forget

    def forget_then_checkpoint(self, file_id, src):
        real(self, file_id, src)
        self._x("CHECKPOINT")

    monkeypatch.setattr(loading.Loader, "_forget", forget_then_checkpoint)
    again = agentscope.analyze(traces, db=db, previous=first)
    monkeypatch.undo()
    assert {t.trace_id[:2] for t in again.task_results} == {"02"}
    _, redone = _check(traces, db, first, monkeypatch)
    assert redone is None


def test_an_unchanged_store_gives_its_saved_analysis_back(tmp_path, monkeypatch):
    """A second analysis of an unchanged directory (a new process: no previous) analyses
    nothing: the saved analysis is restored, and equals a fresh one, evidence in words
    included (made again from the store a window of traces at a time)."""
    from agentscope.analysis import stored

    traces, db, first = _analysed(tmp_path, 11)
    monkeypatch.setattr(stored, "WINDOW_SPANS", 40)  # several windows, read in and out of order
    again, redone = _check(traces, db, None, monkeypatch)
    assert redone == []
    assert isinstance(again.sections.evidence, stored.StoredEvidence)
    fresh = agentscope.analyze(traces, db=":memory:")
    k = np.arange(len(fresh.sections))[::-7]
    assert again.sections.evidence.texts_at(k) == fresh.sections.evidence.texts_at(k)
    assert again.warnings == first.warnings


def _four_traces(tmp_path):
    """(a directory of four traces a.., b.., c.., d.., 1000 s apart, and its store,
    analysed once)."""
    traces = tmp_path / "traces"
    traces.mkdir()
    rng = random.Random(15)
    records = []
    for k, letter in enumerate("abcd"):
        start = T0 + k * 1000 * 10 ** 9
        root = f"{k + 1:016x}"
        records.append(_span(letter * 32, root, None, start, 2 * 10 ** 9, rng, "task"))
        for c in range(3):
            records.append(_span(letter * 32, f"{k + 1:02x}{c + 1:014x}", root,
                                 start + c * 6 * 10 ** 8, 5 * 10 ** 8, rng, f"step-{c}"))
    (traces / "spans-x-1-1.jsonl").write_text("".join(spanfile.encode(r) for r in records))
    db = tmp_path / "store.duckdb"
    agentscope.analyze(traces, db=db)
    return traces, db


def _samples_over(traces, start_ns):
    """Host counter samples over 2 s from ``start_ns``, in a new file (they touch the traces
    within MAX_HOLD_NS of them, and change what their sections' words say)."""
    samples = [SampleRecord(start_ns + k * 100_000_000 + 50_000_000, "h", None, "host", None,
                            m, v)
               for k in range(20) for m, v in ((PSI_CPU, 0.9), (RUN_QUEUE, 3.0), (CORES, 2.0),
                                               (PSI_MEMORY, 0.2))]
    (traces / samplefile.file_name("h", 9, 2)).write_text(
        "".join(samplefile.encode(s) for s in samples))


def test_words_of_a_restored_analysis_refuse_a_store_changed_under_them(tmp_path):
    """The words of a restored analysis are made from the store when read: once the store
    has moved on over a trace (here: counter samples over its time, which change its words
    but not its sections), its words are refused (StoreError), not made from what the store
    holds now; its neighbours, made in the same window, are still read (found by a
    review)."""
    from agentscope.errors import StoreError

    traces, db = _four_traces(tmp_path)
    restored = agentscope.analyze(traces, db=db)
    assert [t.trace_id[0] for t in restored.task_results] == list("abcd")
    _samples_over(traces, T0 + 2000 * 10 ** 9)  # over c's time
    agentscope.analyze(traces, db=db)  # another process loads them
    a, b, c, d = restored.task_results
    assert all(s.evidence for s in a.segments)  # a window of a alone
    assert all(s.evidence for s in b.segments)  # then b, c and d: c is left out
    with pytest.raises(StoreError, match="changed since this analysis"):
        list(c.segments)
    assert all(s.evidence for s in d.segments)
    fresh = agentscope.analyze(traces, db=":memory:")
    assert [s.evidence for s in d.segments] == [s.evidence for s in fresh.task_results[3].segments]


def test_an_analysis_built_on_keeps_refusing_what_it_gave_up(tmp_path):
    """An analysis that a later one built on (``previous=``, what serve does) no longer reads
    the words of the traces the later one analysed again: it refuses them (StoreError),
    never returns None for them (found by a review)."""
    from agentscope.errors import StoreError

    traces, db = _four_traces(tmp_path)
    restored = agentscope.analyze(traces, db=db)
    _samples_over(traces, T0 + 2000 * 10 ** 9)  # over c's time
    later = agentscope.analyze(traces, db=db, previous=restored)
    assert later.traces_analysed == 1
    a, b, c, d = restored.task_results
    assert all(s.evidence for s in a.segments)  # a window of a alone
    assert all(s.evidence for s in b.segments)  # then b, c and d: c is left out
    with pytest.raises(StoreError, match="changed since this analysis"):
        list(c.segments)
    first_of_c = len(a.segments) + len(b.segments)
    with pytest.raises(StoreError, match="changed since this analysis"):
        restored.sections.evidence.texts_at([first_of_c])
    with pytest.raises(StoreError, match="changed since this analysis"):
        restored.to_dict()
    assert later.to_dict()["tasks"][2]["critical_path"]  # the later one reads them all


def test_the_table_of_a_restored_analysis_analyses_nothing(tmp_path, monkeypatch):
    """The table prints no section's words (a task's own evidence is stored with it): a
    restored analysis prints it without analysing any trace again, and prints what a fresh
    analysis prints."""
    import io

    from rich.console import Console

    from agentscope.exporters import table

    traces, db, _ = _analysed(tmp_path, 13)
    restored = agentscope.analyze(traces, db=db)
    made = _engine_runs(monkeypatch)
    out = io.StringIO()
    table.render(restored, Console(file=out, width=120))
    monkeypatch.undo()
    fresh = io.StringIO()
    table.render(agentscope.analyze(traces, db=":memory:"), Console(file=fresh, width=120))
    assert out.getvalue().replace("unchanged", "") == fresh.getvalue().replace("unchanged", "")
    assert made == []


def test_verbose_says_what_was_analysed_again(tmp_path):
    """`analyze -v` says whether the analysis was whole, built on the saved one, or the saved
    one as it was."""
    from click.testing import CliRunner

    from agentscope.cli import main

    traces, db, first = _analysed(tmp_path, 14)
    assert first.traces_analysed == first.summary.tasks
    run = CliRunner().invoke(main, ["-v", "analyze", str(traces), "--db", str(db)])
    assert run.exit_code == 0, run.output
    assert "the store's saved analysis, nothing new" in run.output
    rng = random.Random(14)
    with open(traces / "spans-more.jsonl", "w") as f:
        f.write(spanfile.encode(_span("f" * 32, "e" * 16, None, T0, 10 ** 9, rng)))
    again = agentscope.analyze(traces, db=db)
    assert again.traces_analysed == 1


def test_the_report_of_a_restored_analysis_makes_its_timelines_words_at_once(tmp_path,
                                                                              monkeypatch):
    """The HTML report's timelines read the words of scattered tasks: a restored analysis
    makes them in one analysis of those traces, not one each (100 timelines took longer
    than a fresh analysis), and the report's data are a fresh analysis' (found measuring)."""
    from agentscope.exporters import html_report

    traces, db, _ = _analysed(tmp_path, 16)
    restored = agentscope.analyze(traces, db=db)
    made = _engine_runs(monkeypatch)
    got = html_report.write(tmp_path / "r.html", restored, timelines=12, source="t")
    monkeypatch.undo()
    want = html_report.write(tmp_path / "f.html", agentscope.analyze(traces, db=":memory:"),
                             timelines=12, source="t")
    assert len(got["timelines"]) == 12 and made == [12]
    for data in (got, want):
        data.pop("generated", None)
    assert got == want
