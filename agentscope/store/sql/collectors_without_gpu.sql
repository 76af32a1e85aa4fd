-- The runs (sample files) of collectors that reported their host's NVIDIA GPU source absent
-- and never up ($up: the collector-up metric, $source: the GPU source's name), with the time
-- each run covered: (host, first ns, last ns). Within such a run, an inference on that host
-- did not wait on a local NVIDIA GPU.
SELECT s.host, min(s.ts_ns), max(s.ts_ns)
FROM samples s
JOIN (
    SELECT host, file_id FROM samples
    WHERE metric = $up AND source = $source AND host IS NOT NULL
    GROUP BY host, file_id
    HAVING max(value) = 0
) a ON s.host = a.host AND s.file_id IS NOT DISTINCT FROM a.file_id
GROUP BY s.host, s.file_id
