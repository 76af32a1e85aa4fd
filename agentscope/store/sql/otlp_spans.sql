-- OTLP/JSON traces (an Arrow table `otlp_arrow` of ExportTraceServiceRequest rows, read by
-- pyarrow) flattened into the columns of `spans`, plus `ok` (every check passed) and `extras`
-- (events, links and repeated attribute keys, which the Python reader handles). Same mapping as store/otlp.py; where a
-- key is repeated, the last one counts, as in the Python reader's dict.
-- {accounting} is replaced by the list of agentscope's accounting attribute names,
-- {min_epoch_ns} by records.MIN_EPOCH_NS (smaller start times are another unit, and 0 no
-- start time: those spans go to the Python reader, which names them), {max_epoch_ns} by
-- records.MAX_EPOCH_NS, {max_count} and {int32_max} by the bounds of the counts
-- (records.INT_FIELDS: a count outside them is NULL, as the Python reader makes it).
WITH rs AS (SELECT unnest(resourceSpans) AS rs FROM otlp_arrow),
-- the resource's attributes are read once per resource, not once per span
ss AS (
    SELECT list_filter(coalesce(rs.resource.attributes, []),
                       lambda a: a.key = 'service.name')[-1].value.stringValue AS service,
           list_filter(coalesce(rs.resource.attributes, []),
                       lambda a: a.key = 'host.name')[-1].value.stringValue AS host,
           -- (a string where OTEL_RESOURCE_ATTRIBUTES gave it: `agentscope run` does)
           TRY_CAST(coalesce(list_filter(coalesce(rs.resource.attributes, []),
                                         lambda a: a.key = 'process.pid')[-1].value.intValue,
                             list_filter(coalesce(rs.resource.attributes, []),
                                         lambda a: a.key = 'process.pid')[-1].value.stringValue)
                    AS INTEGER) AS pid,
           unnest(rs.scopeSpans) AS ss
    FROM rs
),
sp AS (SELECT service, host, pid, ss.scope.name AS scope, unnest(ss.spans) AS sp FROM ss),
flat AS (
    SELECT
        sp.traceId AS raw_trace, sp.spanId AS raw_span, sp.parentSpanId AS raw_parent,
        coalesce(sp.name, '') AS name, coalesce(sp.kind, 0) AS kind_code,
        TRY_CAST(sp.startTimeUnixNano AS BIGINT) AS start_ns,
        TRY_CAST(sp.endTimeUnixNano AS BIGINT) AS end_ns,
        coalesce(sp.status.code, 0) AS status_code, sp.status.message AS status_message,
        coalesce(sp.attributes, []) AS all_attributes, scope, service, host, pid,
        coalesce(len(sp.events), 0) + coalesce(len(sp.links), 0)
            -- a key given twice: the Python reader keeps the last value, in the first place
            + coalesce(len(sp.attributes), 0)
            - coalesce(len(list_distinct(list_transform(sp.attributes, lambda a: a.key))), 0)
            AS extras
    FROM sp
),
typed AS (
    -- accounting attributes (read into columns) apart from the rest (kept as JSON); the
    -- accounting lookups below then scan a few entries, not every attribute
    SELECT *,
        -- (agentscope.analysis.* are verdicts `agentscope export otlp` derived: not input)
        list_filter(all_attributes, lambda a: NOT list_contains({accounting}, a.key)
                    AND NOT starts_with(a.key, {derived})) AS kept,
        list_filter(all_attributes, lambda a: list_contains({accounting}, a.key))
            AS attributes,
        list_filter(all_attributes, lambda a: a.key = 'agentscope.stage')[-1].value.stringValue
            AS stage
    FROM flat
)
SELECT
    lower(raw_trace) AS trace_id,
    lower(raw_span) AS span_id,
    CASE WHEN regexp_full_match(coalesce(raw_parent, ''), '[0-9a-fA-F]{{16}}')
              AND raw_parent <> '0000000000000000' THEN lower(raw_parent) END AS parent_span_id,
    name, stage,
    otlp_kind(kind_code) AS kind,
    start_ns, end_ns,
    otlp_status(status_code) AS status,
    nullif(status_message, '') AS status_message,
    service, host, pid,
    otlp_int(attributes, 'thread.id') AS tid,
    otlp_count(attributes, 'agentscope.cpu.thread_ns', {max_count}) AS thread_cpu_ns,
    otlp_count(attributes, 'agentscope.cpu.children_ns', {max_count}) AS child_cpu_ns,
    CAST(otlp_count(attributes, 'agentscope.children.count', {int32_max}) AS INTEGER)
        AS children,
    otlp_count(attributes, 'agentscope.ctx_switches.voluntary', {max_count}) AS vcsw,
    otlp_count(attributes, 'agentscope.ctx_switches.involuntary', {max_count}) AS ivcsw,
    otlp_count(attributes, 'agentscope.page_faults.minor', {max_count}) AS minflt,
    otlp_count(attributes, 'agentscope.page_faults.major', {max_count}) AS majflt,
    otlp_count(attributes, 'agentscope.children.page_faults.major', {max_count})
        AS child_majflt,
    '{{' || array_to_string(list_concat(
        list_transform(kept, lambda a: to_json(a.key) || ':' || otlp_value(a.value)),
        CASE WHEN scope IS NOT NULL
                  AND NOT list_contains(list_transform(kept, lambda a: a.key), 'otel.scope.name')
             THEN ['"otel.scope.name":' || to_json(scope)] ELSE [] END), ',') || '}}' AS attrs,
    '[]' AS events,
    '[]' AS links,
    extras,
    coalesce(regexp_full_match(raw_trace, '[0-9a-fA-F]{{32}}')
             AND raw_trace <> '00000000000000000000000000000000'
             AND regexp_full_match(raw_span, '[0-9a-fA-F]{{16}}')
             AND raw_span <> '0000000000000000'
             AND start_ns IS NOT NULL AND end_ns IS NOT NULL AND end_ns >= start_ns
             AND start_ns >= {min_epoch_ns} AND end_ns <= {max_epoch_ns}, false) AS ok
FROM typed
