"""``agentscope export clickhouse``: a store's spans into a ClickHouse table in the schema of the
OpenTelemetry Collector's ClickHouse exporter (``otel_traces``), its counter samples into
agentscope's samples table, for users who start from trace files (docs/clickhouse.md). What
``agentscope analyze chdb://...`` reads back is what was written: the same analysis."""

from __future__ import annotations

import contextlib
from typing import Any, Iterator, NamedTuple

from ..store import clickhouse
from .otlp_traces import SPAN_COLUMNS

PAGE = 50_000  # rows read from the store at a time
SAMPLE_COLUMNS = ("ts_ns", "host", "pid", "source", "device", "metric", "value")


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

    # one read of each table, unsorted (ClickHouse sorts the rows by its table's key; a
    # sorted page a statement read the table again for each page: 20M spans, 24 minutes);
    # closed when done or failed (each holds the store open while it is read)
    with contextlib.closing(analysis.table_rows("spans", SPAN_COLUMNS, PAGE)) as spans, \
            contextlib.closing(analysis.table_rows("samples", SAMPLE_COLUMNS, PAGE)) as samples:
        clickhouse.write(remote, counted(map(clickhouse.span_line, spans), 0),
                         counted(map(clickhouse.sample_line, samples), 1))
    return Written(remote.display, counts[0], counts[1])


