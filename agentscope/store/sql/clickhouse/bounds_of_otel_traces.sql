-- The time the spans that spans_of_otel_traces.sql reads cover (the first start, the last
-- end, epoch ns): the samples read beside them are those of this time. Filled by str.format
-- as spans_of_otel_traces.sql (table, window, near).
WITH traces AS (SELECT DISTINCT TraceId FROM {table} WHERE {window})
SELECT min(toUnixTimestamp64Nano(Timestamp)),
       max(toUnixTimestamp64Nano(Timestamp) + toInt64(least(Duration, 4611686018427387904)))
FROM {table}
WHERE TraceId IN traces AND {near}
