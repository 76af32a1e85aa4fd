"""An analysis made again with ``previous=`` (what ``agentscope serve`` does at each refresh)
re-analyses only the traces that what was loaded since touched, and gives what a fresh
analysis of everything gives: random appends of new traces, spans that join existing
traces, late parents, new counter samples; a rewritten file or samples of another kind send
it back to a whole analysis."""

from __future__ import annotations

import random

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
    again = agentscope.analyze(directory, db=db, previous=previous)
    monkeypatch.undo()
    fresh = agentscope.analyze(directory, db=":memory:")
    a, b = _document(again), _document(fresh)
    if a != b:  # name the first difference
        diff = [(x["trace_id"], k, x[k], y[k]) for x, y in zip(a["tasks"], b["tasks"])
                for k in x if x[k] != y[k]][:1]
        assert a == b, (len(a["tasks"]), len(b["tasks"]), diff)
    _same(_Unloaded(fresh), _Unloaded(again), close=True)
    return again, (redone[0] if redone else None)


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


@pytest.mark.parametrize("seed", [3, 4])
def test_incremental_analysis_equals_a_fresh_one(tmp_path, monkeypatch, seed):
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
        again, redone = _check(traces, db, previous, monkeypatch)
        assert redone is not None and 0 < len(redone) < n_tasks
        previous = again
    assert previous.summary.tasks == n_tasks + 12
    # only the first analysis still holds its spans' figures for its words: each refresh's
    # are put in words at once (or serve's memory would grow with every refresh)
    assert len(_unsettled(previous.sections.evidence)) == 1


def _unsettled(evidence, found=None):
    """The evidence objects below ``evidence`` that still hold a classification."""
    from agentscope.analyzers.results import JoinedEvidence, SlicedEvidence

    found = {} if found is None else found
    if isinstance(evidence, JoinedEvidence):
        for part in evidence._parts:
            _unsettled(part, found)
    elif isinstance(evidence, SlicedEvidence):
        _unsettled(evidence._evidence, found)
    elif evidence._classified is not None:
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
