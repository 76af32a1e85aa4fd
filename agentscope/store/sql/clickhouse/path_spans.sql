-- The rows of the subquery (the rows spans_of_otel_traces.sql makes) that the store would load:
-- the ids and times records.span_problem requires (the other fields of a row from otel_traces
-- cannot fail it, but an event's time). What the critical-path walk (critical_path.sql) reads
-- of each: ids, times and kind, and the host and pid that the counter join
-- (section_counters.sql) places each section by (the walk's section_owners); the analysis'
-- input (analysis_input.sql) reads every column. With refused NOT, the other rows instead: what
-- the store would refuse (an analysis over ClickHouse's input loads them, for their problems).
-- Filled by str.format: columns, spans, refused ('' or 'NOT'), min_epoch_ns, max_epoch_ns.
SELECT {columns}
FROM ({spans})
WHERE {refused} (
    match(trace_id, '^[0-9a-f]{{32}}$') AND trace_id != '00000000000000000000000000000000'
    AND match(span_id, '^[0-9a-f]{{16}}$') AND span_id != '0000000000000000'
    AND (parent_span_id IS NULL OR match(parent_span_id, '^[0-9a-f]{{16}}$'))
    AND start_ns >= {min_epoch_ns} AND end_ns >= start_ns AND end_ns <= {max_epoch_ns}
    AND arrayAll(e -> e.time_ns BETWEEN 0 AND {max_epoch_ns}, events))
