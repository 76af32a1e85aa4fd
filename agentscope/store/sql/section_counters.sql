-- The reference for analyzers/counters.py:section_counters (checked equal in the tests):
-- the host's counters over each critical-path section, for every section (a registered table
-- `sections(sec_id, host, a, b)`, times in ns) and every series of one of the wanted metrics
-- ({metrics}) on the same host: the time-weighted mean of the series over the section.
--
-- A sample describes the interval since the previous sample of its series (rates and
-- utilizations are measured over it), so a series is a step function holding each value
-- back to the previous timestamp. With I(t) its integral, the mean over [a, b] is
-- (I(b) - I(a)) / (b - a), and I(t) = I_k - v_k * (ts_k - t) for the first sample k with
-- ts_k >= t: two ASOF joins per section and series. A sample more than {max_hold} ns after
-- the previous one describes no time before it (a hole between collector runs): the mean is
-- over the time described, C(t) likewise. Sections are clipped to the series' span; a section
-- less than half described gets no value (absent, not zero).
-- Several series of one metric on a host (GPUs, process trees, model servers) give one value:
-- the highest mean.
-- (The analysis runs the same arithmetic in numpy on counter_series.sql: 0.7 s instead of
-- 3 s for 366k sections against 4M samples.)
WITH s AS (
    SELECT host, metric, coalesce(device, '') AS device, coalesce(pid, -1) AS pid,
           ts_ns AS ts, value
    FROM samples
    WHERE metric IN ({metrics}) AND value IS NOT NULL AND NOT isnan(value) AND host IS NOT NULL
),
keys AS (
    SELECT host, metric, device, pid, row_number() OVER () AS sid,
           min(ts) AS first_ts, max(ts) AS last_ts
    FROM s GROUP BY ALL
),
series AS MATERIALIZED (
    SELECT sid, ts, value, held,
           sum(dt * value) OVER (PARTITION BY sid ORDER BY ts
                                 ROWS UNBOUNDED PRECEDING) AS integral,
           sum(dt) OVER (PARTITION BY sid ORDER BY ts ROWS UNBOUNDED PRECEDING) AS described
    FROM (SELECT sid, ts, value, coalesce(gap, 0) <= {max_hold} AS held,
                 CASE WHEN coalesce(gap, 0) <= {max_hold} THEN coalesce(gap, 0) ELSE 0 END AS dt
          FROM (SELECT k.sid, s.ts, s.value,
                       s.ts - lag(s.ts) OVER (PARTITION BY k.sid ORDER BY s.ts) AS gap
                FROM s JOIN keys k USING (host, metric, device, pid)))
),
covered AS (
    SELECT x.sec_id, k.sid, k.metric, x.a, x.b, greatest(x.a, k.first_ts) AS a2,
           least(x.b, k.last_ts) AS b2
    FROM sections x JOIN keys k ON k.host = x.host
    WHERE x.b > x.a AND least(x.b, k.last_ts) > greatest(x.a, k.first_ts)
),
at_a AS (
    SELECT c.sec_id, c.sid, c.metric, c.a, c.b, c.a2, c.b2,
           r.integral - CASE WHEN r.held THEN r.value * (r.ts - c.a2) ELSE 0 END AS ia,
           r.described - CASE WHEN r.held THEN r.ts - c.a2 ELSE 0 END AS ca
    FROM covered c ASOF JOIN series r ON r.sid = c.sid AND r.ts >= c.a2
),
at_b AS (
    SELECT c.sec_id, c.metric, c.a, c.b, c.ia, c.ca,
           r.integral - CASE WHEN r.held THEN r.value * (r.ts - c.b2) ELSE 0 END AS ib,
           r.described - CASE WHEN r.held THEN r.ts - c.b2 ELSE 0 END AS cb
    FROM at_a c ASOF JOIN series r ON r.sid = c.sid AND r.ts >= c.b2
)
SELECT sec_id, metric, max((ib - ia) / (cb - ca)) AS mean
FROM at_b
WHERE cb > ca AND (cb - ca) * 2 >= b - a
GROUP BY sec_id, metric
