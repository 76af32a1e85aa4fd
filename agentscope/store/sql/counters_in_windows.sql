-- The samples of the metrics $metrics on each window's host over the window (a registered
-- table `windows(k, host, lo, hi)`, times in ns), from 2 s before it (the sample in force at
-- its start) to 1 s after: (k, metric, device or '', ts_ns, value). Per-device series only
-- for $per_device (the GPUs); the host totals of the others.
SELECT w.k, s.metric, coalesce(s.device, ''), s.ts_ns, s.value
FROM samples s JOIN windows w ON s.host = w.host
     AND s.ts_ns BETWEEN w.lo - 2000000000 AND w.hi + 1000000000
WHERE s.metric IN (SELECT unnest($metrics::VARCHAR[])) AND isfinite(s.value)
  AND (s.device IS NULL OR s.metric = $per_device)
ORDER BY w.k, s.metric, s.device, s.ts_ns
