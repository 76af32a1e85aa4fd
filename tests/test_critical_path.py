"""Critical path: Jaeger's upstream cases, and where we do better for agent traces.

Each golden case draws its expected path as an ASCII timeline: one row per span, ``=`` where
the span runs, ``#`` where it holds the critical path.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentscope.analyzers.critical_path import PathSpan, Section, critical_path, merge_adjacent

CORPUS = Path(__file__).resolve().parent / "corpus"  # vendored: see corpus/README.md
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


# Jaeger's upstream cases whose children overlap (where our rule differs on purpose)
OVERLAPPING = {2}


@needs_corpus
@pytest.mark.parametrize("n", sorted(set(range(1, 10)) - OVERLAPPING))
def test_agrees_with_jaegers_upstream_cases(n):
    case, spans, expected = _load(JAEGER / f"test{n}.json")
    assert not _overlapping_siblings(spans)
    cp = critical_path(spans)
    assert list(cp.sections) == expected, case["description"]
    _check_tiling(cp)


def _overlapping_siblings(spans):
    kids = {}
    for s in spans:
        kids.setdefault(s.parent_id, []).append(s)
    return any(a.start < b.start < a.end < b.end for ks in kids.values() for a in ks for b in ks)


@needs_corpus
def test_overlapping_children_keep_their_time_where_jaeger_gives_it_to_the_parent():
    # upstream test2: C finishes last; A overlaps C's start. Jaeger: X 1-20, C 20-60, X 60-101
    # (A's 10-20 goes to X as self time). A was running until C took over: A holds 10-20.
    case, spans, jaeger = _load(JAEGER / "test2.json")
    assert _overlapping_siblings(spans)
    cp = critical_path(spans)
    _check_tiling(cp)
    assert jaeger == [Section("span-X", 1, 20), Section("span-C", 20, 60),
                      Section("span-X", 60, 101)]
    assert list(cp.sections) == [Section("span-X", 1, 10), Section("span-A", 10, 20),
                                 Section("span-C", 20, 60), Section("span-X", 60, 101)]
    assert timeline(spans, cp) == "\n".join([
        "span-X |=====#####",  # steps of 10 from 1: X's 1-10 is under one cell
        "span-A |#===",
        "span-C | ####",
    ])


def test_an_llm_call_overlapped_by_a_tool_holds_the_path_until_the_tool_starts():
    # the case: agent 0-12 s, LLM 0-10 s, tool 9-12 s (started from streamed output)
    spans = [PathSpan("agent", None, 0, 120), PathSpan("llm", "agent", 0, 100),
             PathSpan("tool", "agent", 90, 120)]
    cp = critical_path(spans)
    assert list(cp.sections) == [Section("llm", 0, 90), Section("tool", 90, 120)]
    assert timeline(spans, cp) == "\n".join([
        " agent |============",
        "   llm |#########=",
        "  tool |         ###",
    ])
    # a sibling that started after the tool did (ran inside the tool's time) stays off it
    spans.append(PathSpan("side", "agent", 95, 110))
    assert list(critical_path(spans).sections) == [Section("llm", 0, 90),
                                                   Section("tool", 90, 120)]


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


def test_of_roots_running_at_once_the_one_that_ends_last_holds_the_path():
    """Roots are taken as children are (critical_path.sql walks them as the children of one
    span): at 30, A and B both run; B ends later, so it holds the path back to its start,
    and A before it (by row order alone A would have held all of 0-30)."""
    spans = [PathSpan("A", None, 0, 140), PathSpan("B", None, 10, 200),
             PathSpan("C", None, 30, 250)]
    cp = critical_path(spans)
    assert list(cp.sections) == [Section("A", 0, 10), Section("B", 10, 30),
                                 Section("C", 30, 250)]
    _check_tiling(cp)


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


AGENT_TRACES = CORPUS / "agent_traces" / "normalized"
# Real agent traces where we differ from Jaeger, and why (checked by hand; see the docstring
# of agentscope.analyzers.critical_path):
DIFFERS_FROM_JAEGER = {
    # e9aac170 ends exactly when 2cc13e77 starts: Jaeger gives its 3.2 s to the parent
    "langfuse__claude-agent-2025-12-22.json": "abutting",
    # 6a077001 (2.8 s) and 6021df46 (1.9 s) each end exactly when the next child starts
    "langfuse__koog-2025-08-26.json": "abutting",
    # the top span's parent is not in the export: Jaeger returns an empty path
    "langfuse__csharp-agent-with-gemini-2026-03-09.json": "orphan root",
    # children overlap: the overlapped child keeps the time Jaeger gives the parent
    "langfuse__beeai-2025-08-01.json": "overlap",
}


def _agent_trace(path):
    case = json.loads(path.read_text())
    spans = [PathSpan(s["span_id"], None if s["parent_id"] in (None, "None") else s["parent_id"],
                      int(s["start_us"]), int(s["start_us"]) + int(s["duration_us"]))
             for s in case["spans"]]
    jaeger = merge_adjacent([Section(x["span_id"], x["start_us"], x["end_us"])
                             for x in case["jaeger_ui_critical_path"]["sections"]])
    return spans, jaeger


@pytest.mark.skipif(not AGENT_TRACES.is_dir(), reason="shared corpus not present")
def test_real_agent_traces_agree_with_jaeger_except_where_documented():
    files = sorted(AGENT_TRACES.glob("*.json"))
    assert len(files) >= 30
    for path in files:
        spans, jaeger = _agent_trace(path)
        cp = critical_path(spans)
        _check_tiling(cp)
        if path.name in DIFFERS_FROM_JAEGER:
            assert list(cp.sections) != jaeger, path.name
            if DIFFERS_FROM_JAEGER[path.name] == "orphan root":
                assert jaeger == [] and cp.sections
            else:  # abutting/overlap: a child where Jaeger put the parent, never the reverse
                jaeger_owner = {s.span_id for s in jaeger}
                ours_only = {s.span_id for s in cp.sections} - jaeger_owner
                assert ours_only, path.name
                parents = {s.span_id: s.parent_id for s in spans}
                for x in ours_only:  # under a span Jaeger's path went through
                    chain = [x]
                    while parents.get(chain[-1]) is not None:
                        chain.append(parents[chain[-1]])
                    assert set(chain) & jaeger_owner, (path.name, x)
        else:
            assert list(cp.sections) == jaeger, path.name


def test_invariants_on_random_traces():
    """On 500 random trees: sections tile [start, end], and each section lies inside its
    span's interval and inside every ancestor's (the clipping)."""
    import random

    rng = random.Random(7)
    for _ in range(500):
        n = rng.randint(1, 30)
        spans = []
        for i in range(n):
            parent = None if i == 0 or rng.random() < 0.05 else f"s{rng.randrange(i)}"
            start = rng.randint(0, 100)
            spans.append(PathSpan(f"s{i}", parent, start, start + rng.choice([0, 1, 5, 20, 60])))
        cp = critical_path(spans)
        if not cp.sections:
            continue
        _check_tiling(cp)
        by_id = {s.span_id: s for s in spans}
        for sec in cp.sections:
            if sec.span_id is None:
                continue
            s = by_id[sec.span_id]
            assert s.start <= sec.start and sec.end <= s.end
            p = s.parent_id
            while p is not None and p in by_id and p not in cp.roots:
                assert by_id[p].start <= sec.start and sec.end <= by_id[p].end
                p = by_id[p].parent_id


@pytest.mark.parametrize("lockstep_min", [0, 5, 10**9])
def test_walk_many_equals_walk_on_every_trace(lockstep_min):
    """The vectorized walk gives the reference walk's sections, trace by trace, whether the
    descent runs in lockstep to the end (0), hands the last walks to Python (5) or runs
    entirely in Python (10**9)."""
    import random

    from agentscope.analyzers.critical_path import walk_many
    from agentscope.analyzers.reference import Buffers, walk_arrays

    rng = random.Random(11)
    parent, starts, ends, kinds, bounds = [], [], [], [], []
    for _ in range(400):
        lo = len(parent)
        n = rng.randint(1, 25)
        for i in range(n):
            if i == 0 or rng.random() < 0.06:
                parent.append(-1)
            elif rng.random() < 0.03:
                parent.append(lo + rng.randrange(n))  # may point forward: cycles happen
            else:
                parent.append(lo + rng.randrange(i))
            s = rng.randint(0, 100)
            starts.append(s)
            ends.append(s + rng.choice([0, 1, 5, 20, 60, -3]))
            kinds.append(rng.choice(["internal"] * 6 + ["producer", "consumer"]))
        bounds.append((lo, lo + n))
    many = walk_many(parent, starts, ends, kinds, bounds, lockstep_min=lockstep_min)
    span, start, end = many.span.tolist(), many.start.tolist(), many.end.tolist()
    for t, (lo, hi) in enumerate(bounds):
        ref = walk_arrays(parent, starts, ends, kinds, lo, hi,
                          buf=None if lo == 0 else Buffers(hi))
        a, b = many.first[t], many.first[t + 1] if t + 1 < len(bounds) else len(many.span)
        got = list(zip(span[a:b], start[a:b], end[a:b]))
        assert got == ref.sections, (t, parent[lo:hi], starts[lo:hi], ends[lo:hi])
        assert (many.starts[t], many.ends[t]) == (ref.start, ref.end)
        assert sorted(many.roots[t]) == sorted(ref.roots)
        assert many.off_path[t] == ref.off_path
