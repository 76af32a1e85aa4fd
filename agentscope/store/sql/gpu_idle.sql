-- GPU idle time and what the critical paths were doing meanwhile (needs the analysis tables).
-- Each $gpu_util (GPU utilization) sample covers the interval since the previous one of
-- its device (gaps over 5 s: the sampler was not running; not counted). Over the time the
-- analysed tasks span: the busy share (mean utilization), the idle share (utilization
-- < 5 %), and, of the critical-path time that overlapped idle intervals (any task, any host:
-- the GPU may serve agents elsewhere), the share per stage and class of the sections.
-- Two statements: the intervals are a temporary table first, gpu_intervals (the store drops
-- it after). As a WITH step read twice, DuckDB 2.0 joined them to the sections by a
-- piecewise merge join that grows with the product of the two: 3.4 s at 1M spans and 100k
-- GPU samples, some 85 s at 5M; from a table it takes an IE join (0.1 s at 1M).
CREATE OR REPLACE TEMP TABLE gpu_intervals AS
WITH g AS (
    SELECT host, device, ts_ns AS ts, value,
           ts_ns - lag(ts_ns) OVER (PARTITION BY host, device ORDER BY ts_ns) AS dt
    FROM samples
    WHERE metric = $gpu_util AND device IS NOT NULL AND NOT isnan(value)
),
w AS (SELECT min(start_ns) AS a, max(start_ns + duration_ns) AS b FROM task_results),
iv AS (
    SELECT g.host, g.device, greatest(g.ts - g.dt, w.a) AS a, least(g.ts, w.b) AS b, g.value
    FROM g, w
    WHERE g.dt IS NOT NULL AND g.dt > 0 AND g.dt <= 5000000000 AND g.ts > w.a
      AND g.ts - g.dt < w.b
)
SELECT * FROM iv;

WITH tot AS (
    SELECT host, device, sum(b - a) AS measured, sum((b - a) * value) AS busy_ns,
           sum(CASE WHEN value < 0.05 THEN b - a ELSE 0 END) AS idle_ns
    FROM temp.gpu_intervals GROUP BY ALL
),
ov AS (
    SELECT i.host, i.device, c.stage, c.class,
           sum(least(c.end_ns, i.b) - greatest(c.start_ns, i.a)) AS overlap
    FROM temp.gpu_intervals i JOIN cp_sections c ON c.start_ns < i.b AND c.end_ns > i.a
    WHERE i.value < 0.05
    GROUP BY ALL
)
SELECT t.host, t.device, t.busy_ns / t.measured AS busy, t.idle_ns / t.measured AS idle,
       t.measured / 1e9 AS measured_s, o.stage, o.class,
       o.overlap / sum(o.overlap) OVER (PARTITION BY o.host, o.device) AS share
FROM tot t LEFT JOIN ov o USING (host, device)
WHERE t.measured > 0
ORDER BY t.host, t.device, share DESC NULLS LAST
