-- agentscope's counter samples (agentscope_samples.sql) as the fields of our sample files
-- (docs/file-formats.md; text made valid UTF-8: bad bytes replaced; a value that is not
-- finite is none, as JSON has it, and -0 is 0), over the time of the spans read
-- (spans_of_otel_traces.sql) and a minute either side (a counter's rate needs the sample
-- before). Filled by str.format: table (quoted), since_ns, until_ns (integers).
SELECT toUnixTimestamp64Nano(Timestamp) AS ts_ns, toValidUTF8(toString(HostName)) AS host,
       Pid AS pid, toValidUTF8(toString(Source)) AS source, toValidUTF8(Device) AS device,
       toValidUTF8(toString(Metric)) AS metric,
       if(isFinite(Value), Value + 0., NULL) AS value
FROM {table}
WHERE Timestamp >= fromUnixTimestamp64Nano(toInt64({since_ns}) - 60000000000)
  AND Timestamp <= fromUnixTimestamp64Nano(toInt64({until_ns}) + 60000000000)
ORDER BY Timestamp, host, metric
