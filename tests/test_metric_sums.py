"""The fleet sums in numpy (serve's per-task metrics, the summary) equal the loops they
replaced, to the last bit: each sum adds the same values in the same order (a metric that
moved in its last digit would make Prometheus' counters go backwards between a refresh and
a restart). The reference loops below are the ones the exporter and the summary used
before (60ae8c9)."""

from __future__ import annotations

from pathlib import Path

import pytest

import agentscope
from agentscope.analyzers.evidence import CLASSES
from agentscope.exporters.prometheus import (MAX_SERVICES, MAX_TASK_NAMES, NONE, OTHER,
                                             _commonest, analysis_metrics)

from .test_batches import _messy_traces

REPO = Path(__file__).resolve().parents[1]


def _reference(tasks):
    """The per-task metrics as the loops computed them: {(family, labels): value}."""
    names = _commonest([t.name for t in tasks], MAX_TASK_NAMES)
    services = _commonest([t.service or NONE for t in tasks], MAX_SERVICES)
    where = [(services.get(t.service or NONE, OTHER), t.lane or NONE) for t in tasks]
    groups, seconds, assumed_s, orch_s = {}, {}, {}, {}
    for t, (service, lane) in zip(tasks, where):
        key = (t.bottleneck, service, lane, names.get(t.name, OTHER))
        groups.setdefault(key, []).append(t.duration_ns / 1e9)
        for c in CLASSES:
            k = (c,) + key[1:]
            seconds[k] = seconds.get(k, 0.0) + t.shares.get(c, 0.0) * t.duration_ns / 1e9
            assumed_s[k] = assumed_s.get(k, 0.0) + t.assumed.get(c, 0.0) * t.duration_ns / 1e9
        orch_s[service, lane] = orch_s.get((service, lane), 0.0) + t.orchestration_ns / 1e9
    out = {}
    for key, values in groups.items():
        out["agentscope_tasks_total", key] = float(len(values))
        out["agentscope_task_duration_seconds_sum", key] = sum(values)
        out["agentscope_task_duration_seconds_count", key] = float(len(values))
    for family, sums in (("agentscope_critical_path_seconds_total", seconds),
                         ("agentscope_critical_path_assumed_seconds_total", assumed_s),
                         ("agentscope_orchestration_seconds_total", orch_s)):
        for key, v in sums.items():
            out[family, key] = v
    return out


def _exported(analysis):
    wanted = {"agentscope_tasks_total", "agentscope_task_duration_seconds_sum",
              "agentscope_task_duration_seconds_count", "agentscope_critical_path_seconds_total",
              "agentscope_critical_path_assumed_seconds_total",
              "agentscope_orchestration_seconds_total"}
    out = {}
    for family in analysis_metrics(analysis):
        for sample in family.samples:
            if sample.name in wanted:
                out[sample.name, tuple(sample.labels.values())] = sample.value
    return out


@pytest.mark.parametrize("source", ["messy", "sample_traces"])
def test_sums_equal_the_loops_to_the_last_bit(tmp_path, source):
    if source == "messy":
        directory = tmp_path / "traces"
        directory.mkdir()
        _messy_traces(directory, 21)
    else:
        directory = REPO / "sample_traces"
    analysis = agentscope.analyze(directory, db=":memory:")
    tasks = analysis.task_results
    assert len(tasks) > 40
    got, want = _exported(analysis), _reference(tasks)
    assert got.keys() == want.keys()
    assert [k for k in want if got[k] != want[k]] == []  # exact, not approximately
    total = sum(t.duration_ns for t in tasks)
    by_class = dict.fromkeys(CLASSES, 0.0)
    for t in tasks:
        for c in CLASSES:
            by_class[c] += t.shares.get(c, 0.0) * t.duration_ns
    assert analysis.summary.share_of_critical_path == {
        c: round(v / total, 4) for c, v in by_class.items()}
