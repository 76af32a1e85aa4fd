-- agentscope's counter samples (agentscope_samples.sql) as the lines of our sample files
-- (docs/file-formats.md), over the time of the spans read (spans_of_otel_traces.sql) and a
-- minute either side (a counter's rate needs the sample before). Filled by str.format:
-- table (quoted), since_ns, until_ns (integers).
SELECT toUnixTimestamp64Nano(Timestamp) AS ts_ns, toString(HostName) AS host, Pid AS pid,
       toString(Source) AS source, Device AS device, toString(Metric) AS metric, Value AS value
FROM {table}
WHERE Timestamp >= fromUnixTimestamp64Nano(toInt64({since_ns}) - 60000000000)
  AND Timestamp <= fromUnixTimestamp64Nano(toInt64({until_ns}) + 60000000000)
ORDER BY Timestamp, host, metric
