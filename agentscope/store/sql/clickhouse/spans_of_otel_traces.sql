-- The spans of an `otel_traces` table (the OpenTelemetry Collector's ClickHouse exporter's
-- schema) as the fields of our span files (docs/file-formats.md): what the store loads and
-- checks as it does any span file. The mapping is the one formats/otlp_common.py applies to
-- OTLP: kinds and status codes by name (`Server`, `SPAN_KIND_SERVER`; `Ok`,
-- `STATUS_CODE_OK`), agentscope's accounting attributes back into columns (the exporter
-- writes every attribute as a string; a value that is not an integer in its column's range is
-- no measurement: NULL), `agentscope.stage` the stage, `agentscope.analysis.*` (verdicts
-- `agentscope export otlp` derived) dropped, the scope's name kept as `otel.scope.name`.
-- Whole traces: every span of each trace that has a span in the window (within a day of it,
-- so that a table partitioned by day is read only over the days concerned).
-- Filled by str.format: table (quoted), window (a condition on Timestamp and ServiceName, or
-- 1), near (a condition on Timestamp: the window widened by a day, or 1), pid (the
-- expression of the process.pid resource attribute), accounting (one expression per
-- accounting column, each `... AS column,`), consumed (the attribute names that became
-- columns, as a ClickHouse array), columns (the span file's fields, in order).
-- The rows come in no particular order (sorting every row with its attributes cost more than
-- reading it): of a (trace, span) id on several rows, the store keeps the one REPEATS_BY
-- (store/clickhouse.py) puts first, as critical_path.sql does.
WITH traces AS (SELECT DISTINCT TraceId FROM {table} WHERE {window})
SELECT {columns} FROM (
SELECT
    lower(TraceId) AS trace_id,
    lower(SpanId) AS span_id,
    nullIf(lower(ParentSpanId), '') AS parent_span_id,
    SpanName AS name,
    nullIf(SpanAttributes['agentscope.stage'], '') AS stage,
    replaceOne(lower(toString(SpanKind)), 'span_kind_', '') AS raw_kind,
    if(raw_kind IN ('server', 'client', 'producer', 'consumer'), raw_kind, 'internal') AS kind,
    toUnixTimestamp64Nano(Timestamp) AS start_ns,
    toInt64(toUnixTimestamp64Nano(Timestamp) + toInt64(least(Duration, 4611686018427387904)))
        AS end_ns,
    replaceOne(lower(toString(StatusCode)), 'status_code_', '') AS raw_status,
    if(raw_status IN ('ok', 'error'), raw_status, 'unset') AS status,
    nullIf(StatusMessage, '') AS status_message,
    nullIf(toString(ServiceName), '') AS service,
    nullIf(ResourceAttributes['host.name'], '') AS host,
    {pid} AS pid,
    {accounting}
    mapFilter((k, v) -> NOT (has({consumed}, k) OR startsWith(k, 'agentscope.analysis.')),
              CAST(SpanAttributes, 'Map(String, String)')) AS own_attrs,
    if(ScopeName != '' AND NOT mapContains(own_attrs, 'otel.scope.name'),
       mapUpdate(own_attrs, map('otel.scope.name', ScopeName)), own_attrs) AS attrs,
    arrayMap((t, n, a) -> CAST((n, toUnixTimestamp64Nano(t), a),
                               'Tuple(name String, time_ns Int64, attrs Map(String, String))'),
             Events.Timestamp, Events.Name, Events.Attributes) AS events,
    arrayMap((tr, sp, a) -> CAST((lower(tr), lower(sp), a),
                                 'Tuple(trace_id String, span_id String, attrs Map(String, String))'),
             Links.TraceId, Links.SpanId, Links.Attributes) AS links
FROM {table}
WHERE TraceId IN traces AND {near}
)
