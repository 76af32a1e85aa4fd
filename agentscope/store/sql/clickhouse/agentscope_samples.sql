-- agentscope's counter samples in ClickHouse (our own table: the Collector has no place for
-- them), one row per sample as in a sample file (docs/file-formats.md). Made by
-- `agentscope export clickhouse`; read beside the spans by `agentscope analyze chdb://...`.
-- Filled by str.format: table (quoted, with its database).
CREATE TABLE IF NOT EXISTS {table} (
    Timestamp DateTime64(9) CODEC(Delta, ZSTD(1)),
    HostName LowCardinality(String) CODEC(ZSTD(1)),
    Pid Nullable(Int32) CODEC(ZSTD(1)),
    Source LowCardinality(String) CODEC(ZSTD(1)),
    Device Nullable(String) CODEC(ZSTD(1)),
    Metric LowCardinality(String) CODEC(ZSTD(1)),
    Value Float64 CODEC(ZSTD(1))
) ENGINE = MergeTree
PARTITION BY toDate(Timestamp)
ORDER BY (HostName, Metric, Timestamp)
