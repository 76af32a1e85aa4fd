-- The latest value of each series (metric, host, device, pid) of the metrics $metrics, and
-- when it was sampled: what a metrics endpoint shows as the current value.
SELECT metric, host, device, pid, arg_max(value, ts_ns) AS value, max(ts_ns) AS ts_ns
FROM samples
WHERE metric IN (SELECT unnest($metrics::VARCHAR[]))
GROUP BY ALL
ORDER BY ALL
