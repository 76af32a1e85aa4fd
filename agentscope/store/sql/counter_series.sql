-- The counter series the analysis joins to critical-path sections (analyzers/counters.py):
-- every sample of the wanted metrics ({metrics}), grouped into series by (host, metric,
-- device, pid) and ordered by time within each. The first query lists the series and their
-- lengths, in the order the second returns their samples.
SELECT host, metric, coalesce(device, '') AS device, coalesce(pid, -1) AS pid, count(*) AS n
FROM samples
WHERE metric IN ({metrics}) AND value IS NOT NULL AND NOT isnan(value) AND host IS NOT NULL
GROUP BY ALL
ORDER BY host, metric, device, pid;

SELECT ts_ns, value
FROM samples
WHERE metric IN ({metrics}) AND value IS NOT NULL AND NOT isnan(value) AND host IS NOT NULL
ORDER BY host, metric, coalesce(device, ''), coalesce(pid, -1), ts_ns;
