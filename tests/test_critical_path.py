"""Critical path: Jaeger's upstream cases, and where we do better for agent traces.

Each golden case draws its expected path as an ASCII timeline: one row per span, ``=`` where
the span runs, ``#`` where it holds the critical path.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentscope.analyzers.critical_path import PathSpan, Section, critical_path, merge_adjacent

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus"
JAEGER = CORPUS / "jaeger_critical_path"

needs_corpus = pytest.mark.skipif(not JAEGER.is_dir(), reason="shared corpus not present")


def _load(path):
    case = json.loads(path.read_text())
    spans = [PathSpan(s["span_id"], s["parent_id"], s["start_us"], s["start_us"] + s["duration_us"],
                      s["span_kind"] or "internal") for s in case["spans"]]
    expected = merge_adjacent([Section(x["span_id"], x["start_us"], x["end_us"])
                               for x in case["expected_critical_path"]])
    return case, spans, expected


def _check_tiling(cp):
    assert cp.sections[0].start == cp.start and cp.sections[-1].end == cp.end
    for a, b in zip(cp.sections, cp.sections[1:]):
        assert a.end == b.start and a.start < a.end


@needs_corpus
@pytest.mark.parametrize("n", range(1, 10))
def test_agrees_with_jaegers_upstream_cases(n):
    case, spans, expected = _load(JAEGER / f"test{n}.json")
    cp = critical_path(spans)
    assert list(cp.sections) == expected, case["description"]
    _check_tiling(cp)


@needs_corpus
@pytest.mark.parametrize("name", ["q3_tie_on_end_time", "q5_zero_duration_child",
                                  "q6_parallel_tools_fanout", "q7_producer_consumer_async",
                                  "q8_grandchild_overflows_clipped_parent"])
def test_agrees_with_jaeger_on_edge_cases_where_jaeger_is_right(name):
    case, spans, expected = _load(JAEGER / "computed_edge_cases" / f"{name}.json")
    assert list(critical_path(spans).sections) == expected, case["description"]


def timeline(spans, path, scale=10):
    """Draw spans (rows) and the path: '=' running, '#' on the critical path."""
    lo = min(s.start for s in spans)
    rows = []
    for s in spans:
        cells = [" "] * ((max(x.end for x in spans) - lo) // scale)
        for i in range((s.start - lo) // scale, (s.end - lo) // scale):
            cells[i] = "="
        for sec in path.sections:
            if sec.span_id == s.span_id:
                for i in range((sec.start - lo) // scale, (sec.end - lo) // scale):
                    cells[i] = "#"
        rows.append(f"{s.span_id:>6} |{''.join(cells).rstrip()}")
    return "\n".join(rows)


def test_abutting_children_are_on_the_path():
    # Jaeger gives A's time to P (q1_abutting_children); A really held the task up.
    spans = [PathSpan("P", None, 100, 200), PathSpan("A", "P", 110, 150),
             PathSpan("B", "P", 150, 190)]
    cp = critical_path(spans)
    assert timeline(spans, cp) == "\n".join([
        "     P |#========#",
        "     A | ####",
        "     B |     ####",
    ])
    assert list(cp.sections) == [Section("P", 100, 110), Section("A", 110, 150),
                                 Section("B", 150, 190), Section("P", 190, 200)]


def test_sequential_llm_tool_llm_with_millisecond_abutting():
    spans = [PathSpan("task", None, 0, 100), PathSpan("llm1", "task", 0, 30),
             PathSpan("tool", "task", 30, 80), PathSpan("llm2", "task", 80, 100)]
    cp = critical_path(spans)
    assert [s.span_id for s in cp.sections] == ["llm1", "tool", "llm2"]


def test_partial_trace_with_missing_root_parent_is_analysed():
    # Jaeger returns an empty path here (q2_orphan_root_parent_missing).
    spans = [PathSpan("R", "MISSING", 100, 200), PathSpan("C", "R", 120, 170)]
    cp = critical_path(spans)
    assert list(cp.sections) == [Section("R", 100, 120), Section("C", 120, 170),
                                 Section("R", 170, 200)]
    assert cp.roots == ("R",)


def test_several_roots_make_one_contiguous_path_with_gaps():
    spans = [PathSpan("R1", None, 100, 150), PathSpan("C1", "R1", 110, 130),
             PathSpan("R2", None, 200, 230)]
    cp = critical_path(spans)
    assert timeline(spans, cp) == "\n".join([
        "    R1 |#==##",
        "    C1 | ##",
        "    R2 |          ###",
    ])
    assert list(cp.sections) == [Section("R1", 100, 110), Section("C1", 110, 130),
                                 Section("R1", 130, 150), Section(None, 150, 200),
                                 Section("R2", 200, 230)]
    _check_tiling(cp)


def test_overlapping_roots_follow_the_last_finishing_one():
    spans = [PathSpan("A", None, 0, 100), PathSpan("B", None, 50, 150)]
    cp = critical_path(spans)
    assert list(cp.sections) == [Section("A", 0, 50), Section("B", 50, 150)]


def test_duplicates_zero_duration_and_cycles():
    spans = [PathSpan("P", None, 0, 100), PathSpan("A", "P", 10, 60),
             PathSpan("A", "P", 10, 60), PathSpan("Z", "P", 60, 60),
             PathSpan("X", "Y", 20, 30), PathSpan("Y", "X", 20, 30)]  # a parent cycle
    cp = critical_path(spans)
    assert cp.duplicates == 1 and cp.off_path == 2
    assert list(cp.sections) == [Section("P", 0, 10), Section("A", 10, 60), Section("P", 60, 100)]


def test_parallel_multi_agent_branches_the_long_branch_decides():
    spans = [PathSpan("task", None, 0, 1000),
             PathSpan("agent-a", "task", 10, 400), PathSpan("tool-a", "agent-a", 50, 390),
             PathSpan("agent-b", "task", 10, 900), PathSpan("llm-b", "agent-b", 20, 500),
             PathSpan("tool-b", "agent-b", 500, 880),
             PathSpan("merge", "task", 900, 990)]
    cp = critical_path(spans)
    assert [s.span_id for s in cp.sections] == ["task", "agent-b", "llm-b", "tool-b", "agent-b",
                                                "merge", "task"]
    assert "tool-a" not in {s.span_id for s in cp.sections}
    _check_tiling(cp)


def test_fire_and_forget_child_outside_the_parent_is_off_the_path():
    spans = [PathSpan("task", None, 0, 100), PathSpan("work", "task", 0, 90),
             PathSpan("telemetry-upload", "task", 95, 400)]  # outlives the task
    cp = critical_path(spans)
    assert cp.end == 100
    assert list(cp.sections) == [Section("work", 0, 90), Section("task", 90, 95),
                                 Section("telemetry-upload", 95, 100)]


def test_root_can_be_chosen():
    spans = [PathSpan("outer", None, 0, 100), PathSpan("task", "outer", 10, 90),
             PathSpan("tool", "task", 20, 80)]
    cp = critical_path(spans, root_id="task")
    assert list(cp.sections) == [Section("task", 10, 20), Section("tool", 20, 80),
                                 Section("task", 80, 90)]


def test_empty_and_single_span():
    assert critical_path([]).sections == ()
    assert list(critical_path([PathSpan("a", None, 5, 5)]).sections) == []
    assert list(critical_path([PathSpan("a", None, 5, 9)]).sections) == [Section("a", 5, 9)]
