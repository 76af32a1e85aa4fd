"""agentscope/metric_names.py: every counter name defined once, by one convention, with its
unit; the analysis and the exporters read only names defined there."""

from __future__ import annotations

from agentscope import metric_names as mn
from agentscope.analyzers.counters import METRICS
from agentscope.exporters.html_report import COUNTERS
from agentscope.exporters.prometheus import SAMPLED

NAMES = {k: v for k, v in vars(mn).items() if k.isupper() and isinstance(v, str)}
METRIC_NAMES = {k: v for k, v in NAMES.items() if not k.startswith("SOURCE_")}


def test_each_constant_is_its_metric_name_upper_cased():
    for const, name in METRIC_NAMES.items():
        assert const == name.upper().replace(".", "_"), const
    assert len(set(NAMES.values())) == len(NAMES)  # no name defined twice


def test_every_metric_has_a_unit():
    assert set(mn.UNITS) == set(METRIC_NAMES.values())


def test_readers_use_defined_names():
    defined = set(METRIC_NAMES.values())
    assert set(METRICS) <= defined
    assert set(SAMPLED) <= defined
    assert {m for m, _, _ in COUNTERS} <= defined
