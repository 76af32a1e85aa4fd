"""The fleet engine (numpy, columnar) gives the same results as the per-trace reference
(analyzers/reference.py): the same rules, organised trace by trace."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from agentscope.analyzers.engine import analyze
from agentscope.analyzers.evidence import SpanFacts
from agentscope.analyzers.reference import analyze_trace
from agentscope.analyzers.threads import ThreadFacts, thread_facts
from agentscope.store.duckdb_store import Store

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

# SpanFacts fields from the AnalysisInput columns of the same meaning (parent: from parent_idx)
FIELDS = ("span_id", "parent", "name", "stage", "kind", "start_ns", "end_ns", "own_cpu",
          "own_wall", "own_faults", "child_cpu_ns", "queue_s", "model_s", "server_local", "loop",
          "sys_cpu", "ivcsw", "vcsw", "child_ivcsw", "child_vcsw", "other_cpu",
          "child_run_delay", "endpoint")


def _reference(inp):
    """Per-trace reference analysis over the same input rows."""
    out, n, lo = [], len(inp), 0
    threads = thread_facts(inp)  # across traces: an input of the per-trace reference
    while lo < n:
        hi = lo + 1
        while hi < n and inp.trace_no[hi] == inp.trace_no[lo]:
            hi += 1

        def value(f, i):
            if f == "parent":  # not fetched: from the parent's row
                p = inp.parent_idx[i]
                return inp.span_id[p] if p >= 0 else None
            v = getattr(inp, f)[i]
            return v.item() if hasattr(v, "item") else v

        facts = [SpanFacts._make([value(f, i) for f in FIELDS]) for i in range(lo, hi)]
        roots = [i for i in range(lo, hi) if inp.trace_id[i] is not None]
        lanes = {inp.span_id[i]: inp.lane[i] for i in roots if inp.lane[i]}
        services = {inp.span_id[i]: inp.service[i] for i in roots if inp.service[i]}
        trace_id = next((inp.trace_id[i] for i in roots), "")
        mine = ThreadFacts(threads.blocked_ns[lo:hi], threads.blocked_cpu[lo:hi],
                           threads.blocker[lo:hi], threads.unowned_cpu[lo:hi],
                           {i - lo: v for i, v in threads.blocker_label.items() if lo <= i < hi})
        out.append(analyze_trace(trace_id, facts, lanes, services, mine))
        lo = hi
    return out


def _compare(directory):
    with Store(None) as store:
        store.load(directory)
        inp = store.analysis_input()
    fast = analyze(inp).tasks
    ref = _reference(inp)
    assert len(fast) == len(ref) > 0
    for a, b in zip(fast, ref):
        assert (a.trace_id, a.name, a.lane, a.service) == (b.trace_id, b.name, b.lane, b.service)
        assert (a.start_ns, a.duration_ns, a.bottleneck) == (b.start_ns, b.duration_ns,
                                                             b.bottleneck), a.name
        assert a.confidence == b.confidence
        for c in a.shares:
            assert a.shares[c] == pytest.approx(b.shares[c], abs=1e-9)
        assert a.evidence == b.evidence
        assert a.orchestration_ns == b.orchestration_ns
        assert a.measured_share == b.measured_share
        assert set(a.assumed) == set(b.assumed) == set(a.shares)
        for c in a.assumed:
            assert a.assumed[c] == pytest.approx(b.assumed[c], abs=1e-9)
            assert a.assumed[c] <= a.shares[c] + 1e-12
        assert [(s.span_id, s.start_ns, s.end_ns, s.cls, s.evidence, s.basis)
                for s in a.segments] == \
               [(s.span_id, s.start_ns, s.end_ns, s.cls, s.evidence, s.basis)
                for s in b.segments]
        for x, y in zip(a.segments, b.segments):
            assert set(x.assumed or {}) == set(y.assumed or {})
            for c in x.assumed or {}:
                assert x.assumed[c] == pytest.approx(y.assumed[c], abs=1e-12)
    return fast


def test_engine_matches_reference_on_sample_traces():
    _compare(REPO / "sample_traces")


def test_engine_matches_reference_on_foreign_traces_with_orphans_and_untraced_time(tmp_path):
    import shutil

    for sub in ("langfuse_framework_traces", "any_agent", "jaeger_ui_genai"):
        shutil.copytree(REPO / "tests" / "corpus" / "agent_traces" / sub, tmp_path / sub)
    tasks = _compare(tmp_path)
    bases = {s.basis for t in tasks for s in t.segments}
    assert bases == {"label", "untraced"}  # nothing measured in them; both kinds present
    assert any(t.bottleneck == "untraced" for t in tasks)


def test_engine_matches_reference_on_generated_traces(tmp_path):
    from gen_traces import write_spanfiles

    write_spanfiles(tmp_path, 150, spans_per_task=40, branches=3)
    _compare(tmp_path)


def test_stage_codes_in_the_analysis_input_follow_stage_order():
    """analysis_input.sql sends stages as positions in a list that must be Stage's order
    (the engine and the classifier decode them with it)."""
    import re

    from agentscope.store.schema import sql
    from agentscope.vocab import Stage

    listed = re.search(r"list_position\(\[([^\]]*)\]", sql("analysis_input.sql")).group(1)
    assert re.findall(r"'(\w+)'", listed) == [s.value for s in Stage]


def test_section_span_ids_are_held_as_bytes_and_read_back_as_text():
    import numpy as np

    from agentscope.analyzers.results import SpanIds

    ids = ["00f067aa0ba902b7", None, "b7ad6b7169203331", None]
    held = SpanIds.of(ids)
    assert held.nbytes == 4 * 16  # 16 bytes an id, not a Python string each
    assert held.tolist() == ids and list(held) == ids
    assert held[0] == "00f067aa0ba902b7" and held[1] is None and len(held) == 4
    assert held[1:3].tolist() == ids[1:3]
    assert held[np.array([True, False, True, False])].tolist() == ids[::2]
    assert held[np.array([2, 0])].tolist() == [ids[2], ids[0]]
    assert held.is_none().tolist() == [False, True, False, True]
    as_array = np.asarray(held, dtype=object)
    assert as_array.dtype == object and as_array.tolist() == ids
    assert SpanIds.joined([held[:2], SpanIds.of(["x" * 20])]).tolist() == ids[:2] + ["x" * 20]
    # what bytes cannot hold exactly stays text: not ASCII, a NUL at the end, ""
    for odd in (["é1", None], ["ab\x00", "cd"], ["", None]):
        kept = SpanIds.of(odd)
        assert kept.tolist() == odd and kept.is_none().tolist() == [v is None for v in odd]
        assert SpanIds.joined([held, kept]).tolist() == ids + odd
    assert SpanIds.of([]).tolist() == [] and SpanIds.joined([]).tolist() == []


def test_an_analysis_holds_its_section_span_ids_as_bytes():
    from agentscope import analyze as front_door
    from agentscope.analyzers.results import SpanIds

    with front_door(REPO / "sample_traces") as analysis:
        sec = analysis.sections
        assert isinstance(sec.span_id, SpanIds) and sec.span_id._v.dtype == "S16"
        ids = sec.span_id.tolist()
        gaps = [s.span_id for t in analysis.task_results for s in t.segments]
        assert ids == gaps and len(ids) == len(sec)


def test_section_shares_are_held_packed_and_read_back_exactly():
    import numpy as np

    from agentscope.analyzers.results import Shares

    rng = np.random.default_rng(7)
    rows = np.zeros((500, 6))
    for i in range(len(rows)):  # 0 to 6 classes a row, at random places
        k = rng.integers(0, 7)
        rows[i, rng.choice(6, k, replace=False)] = rng.random(k)
    rows[3] = [0, 1, 0, 0, 0, 0]
    packed = Shares.of(rows)
    assert len(packed) == 500 and packed.shape == (500, 6)
    more = int(((rows != 0).sum(axis=1) > 2).sum())
    assert 0 < more < 500 and packed.nbytes == 500 * 18 + more * (8 + 48)
    assert np.array_equal(packed.dense(), rows) and np.array_equal(np.asarray(packed), rows)
    assert np.array_equal(packed.dense(100, 250), rows[100:250])
    for k in range(6):
        assert np.array_equal(packed.column(k), rows[:, k])
        assert np.array_equal(packed[40:90].column(k), rows[40:90, k])
    mask = rng.random(500) < 0.3
    assert np.array_equal(packed[mask].dense(), rows[mask])
    picked = np.array([499, 0, 17, 17, 250])
    assert np.array_equal(packed[picked].dense(), rows[picked])
    assert np.array_equal(packed[::7].dense(), rows[::7])
    joined = Shares.joined([packed[:123], packed[123:400], rows[400:]])
    assert np.array_equal(joined.dense(), rows)
    assert np.array_equal(Shares.joined([]).dense(), np.zeros((0, 6)))
    assert np.array_equal(packed[250:250].dense(), np.zeros((0, 6)))


def test_an_analysis_holds_its_section_shares_packed():
    import numpy as np

    from agentscope import analyze as front_door
    from agentscope.analyzers.evidence import CLASSES
    from agentscope.analyzers.results import Shares

    with front_door(REPO / "sample_traces") as analysis:
        sec = analysis.sections
        assert isinstance(sec.shares, Shares) and sec.shares.nbytes < 48 * len(sec)
        rows = [[s.shares.get(c, 0.0) for c in CLASSES]
                for t in analysis.task_results for s in t.segments]
        assert np.array_equal(np.asarray(rows), sec.shares.dense())


def test_packed_section_columns_behave_as_the_arrays_they_stand_for():
    import numpy as np

    from agentscope.analyzers.results import Shares, SpanIds

    rows = np.array([[0, 1, 0, 0, 0, 0], [0.2, 0.3, 0.5, 0, 0, 0], [0, 0, 0, 0, 0.4, 0.6]])
    packed = Shares.of(rows)
    for i in (0, 1, 2, -1, -3, np.int64(1)):  # one row, as numpy gives it
        assert np.array_equal(packed[i], rows[i])
    for bad in (3, -4):
        with pytest.raises(IndexError):
            packed[bad]
    with pytest.raises(IndexError):
        packed[:, 1]  # (the old two-axis form: .column(k))
    # packed a chunk at a time, the same rows
    assert np.array_equal(Shares.of(rows, chunk=2).dense(), rows)
    assert np.array_equal(Shares.of(np.repeat(rows, 5, axis=0), chunk=4).dense(),
                          np.repeat(rows, 5, axis=0))
    ids = SpanIds.of(["00f067aa0ba902b7", None])
    assert (ids == None).tolist() == [False, True]  # noqa: E711 - elementwise, as numpy
    assert (ids != None).tolist() == [True, False]  # noqa: E711
    # what is not text is kept as it is, not turned into text
    for odd in ([1, 2], ["ab", float("nan")], [b"ab", None]):
        kept = SpanIds.of(odd)
        assert kept._v.dtype == object and kept.tolist()[0] == odd[0]
