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
