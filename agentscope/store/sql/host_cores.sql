-- The logical CPUs of each sampled host (the host sampler's system.cpu.logical.count; the
-- most it ever reported).
SELECT host, max(value)::BIGINT AS cores
FROM samples
WHERE metric = $metric AND host IS NOT NULL
GROUP BY host
ORDER BY host
