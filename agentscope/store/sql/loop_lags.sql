-- The event-loop lags the in-process samplers measured (analyzers/threads.py): the sample's
-- device is "thread-<tid>" (the loop's thread), or "thread-<tid>:<span id>" where the sampler
-- saw which span's task held the loop meanwhile.
SELECT host, pid, TRY_CAST(split_part(substr(device, 8), ':', 1) AS BIGINT) AS tid,
       nullif(split_part(device, ':', 2), '') AS span_id, ts_ns, value AS lag_s
FROM samples
WHERE metric = $metric AND host IS NOT NULL AND pid IS NOT NULL AND device LIKE 'thread-%'
    AND value > 0 AND TRY_CAST(split_part(substr(device, 8), ':', 1) AS BIGINT) IS NOT NULL
ORDER BY host, pid, tid, ts_ns
