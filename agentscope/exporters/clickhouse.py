"""``agentscope export clickhouse``: a store's spans into a ClickHouse table in the schema of the
OpenTelemetry Collector's ClickHouse exporter (``otel_traces``), its counter samples into
agentscope's samples table, for users who start from trace files (docs/clickhouse.md). What
``agentscope analyze chdb://...`` reads back is what was written: the same analysis."""

from __future__ import annotations

from typing import Any, Iterator, NamedTuple

from ..store import clickhouse
from .otlp_traces import span_rows

PAGE = 50_000  # rows read from the store at a time
SAMPLES_SQL = ("SELECT ts_ns, host, pid, source, device, metric, value FROM samples "
               "ORDER BY ts_ns, host, metric, source, device, pid, value "
               "LIMIT {limit} OFFSET {offset}")


class Written(NamedTuple):
    target: str  # the URL, without its password
    spans: int
    samples: int


def export(analysis: Any, url: str) -> Written:
    """Write every span and sample of ``analysis``'s store to the ClickHouse of ``url``
    (tables made where missing). StoreError names what went wrong."""
    remote = clickhouse.parse(url)
    counts = [0, 0]

    def counted(lines: Iterator[str], k: int) -> Iterator[str]:
        for line in lines:
            counts[k] += 1
            yield line

    spans = (clickhouse.span_line(row) for row in span_rows(analysis, PAGE))
    clickhouse.write(remote, counted(spans, 0), counted(_samples(analysis), 1))
    return Written(remote.display, counts[0], counts[1])


def _samples(analysis: Any) -> Iterator[str]:
    offset = 0
    while True:
        columns, rows = analysis.query_rows(SAMPLES_SQL.format(limit=PAGE, offset=offset))
        for row in rows:
            yield clickhouse.sample_line(dict(zip(columns, row)))
        if len(rows) < PAGE:
            return
        offset += PAGE
