-- The counter join of analyzers/counters.py:section_means, in ClickHouse: the counters over
-- every critical-path section (the sections critical_path.sql walks), on the host (and, for
-- per-process metrics, the process) of the section's span. Same arithmetic as the embedded
-- store's reference (store/sql/section_counters.sql): a sample holds its value back to the
-- previous sample of its series (host, metric, device, pid), so with I(t) a series' integral
-- the mean over [a, b] is (I(b) - I(a)) / (b - a), I(t) = I_k - v_k * (ts_k - t) for the
-- first sample k with ts_k >= t (an ASOF join); a sample more than {max_hold} ns after the
-- previous one describes no time before it; a section is clipped to the series and gets no
-- value where less than half of it is described; several series of a metric give the
-- highest mean. And what section_means adds to it:
--   * GPU utilization ({gpu_util}) of a section whose process holds memory on GPUs of its
--     host ({gpu_memory} samples) is that of those GPUs (NULL where none of them has a
--     value), and the section is marked {gpu_of_process} = 1 (where any section got a GPU
--     utilization at all);
--   * a section of a host whose collector reported its NVIDIA GPU source ({gpu_source}) absent
--     and never up ({up}), within the time of that host's samples, is marked {no_gpu} = 1
--     (the samples read from ClickHouse are one run of the collector per host, as the
--     embedded store sees them once loaded).
-- What it is not: the fallback of the embedded analysis for a span that named no host (its
-- sampled process tree's host) needs the process-tree join, which runs on the client.
--
-- Not grouped by trace: sections meet samples by host and time. On a cluster sharded by
-- trace, each shard's sections need the samples of their hosts: a samples table replicated
-- to every shard (or a GLOBAL JOIN) keeps it shard-local (docs/clickhouse.md).
--
-- Rows: (trace_id, sec: the section's place in its trace's sections, 1-based, metric, mean).
-- Filled by str.format: paths (critical_path.sql's query), owners (the span rows of the walk,
-- with host and pid: path_spans.sql), samples (samples_of_agentscope_samples.sql's query),
-- metrics, per_process (ClickHouse arrays of strings), max_hold, and the quoted names above.
WITH
sections AS (
    SELECT trace_id, sec, s.1 AS span_id, s.2 AS a, s.3 AS b
    FROM ({paths}) AS p
    ARRAY JOIN p.sections AS s, arrayEnumerate(p.sections) AS sec
    WHERE s.1 IS NOT NULL AND s.3 > s.2
),
-- each section's host and pid: those of the row the store keeps of its span id
owners AS (
    SELECT trace_id, span_id,
        argMin((host, pid), (start_ns, end_ns, isNull(parent_span_id),
                             ifNull(parent_span_id, ''), kind)) AS who
    FROM ({owners})
    WHERE (trace_id, span_id) IN (SELECT trace_id, span_id FROM sections)
    GROUP BY trace_id, span_id
),
placed AS (
    SELECT x.trace_id AS trace_id, x.sec AS sec, x.a AS a, x.b AS b,
        o.who.1 AS host, ifNull(o.who.2, -1) AS pid
    FROM sections AS x
    INNER JOIN owners AS o ON o.trace_id = x.trace_id AND o.span_id = x.span_id
    WHERE o.who.1 IS NOT NULL
),
read AS (
    SELECT * FROM ({samples})
),
s AS (
    SELECT assumeNotNull(host) AS host, metric, ifNull(device, '') AS device,
        ifNull(pid, -1) AS pid, ts_ns AS ts, assumeNotNull(value) AS value
    FROM read
    WHERE has({metrics}, metric) AND value IS NOT NULL AND NOT isNaN(value)
        AND host IS NOT NULL
),
-- each series as a step function: the running integral and the time described, per sample
series AS (
    SELECT host, metric, device, pid, ts, value, held,
        sum(value * dt) OVER run AS integral, sum(dt) OVER run AS described
    FROM (
        SELECT host, metric, device, pid, ts, value, gap <= {max_hold} AS held,
            if(gap <= {max_hold}, gap, 0) AS dt
        FROM (
            SELECT *, ts - lagInFrame(ts, 1, ts) OVER (
                PARTITION BY host, metric, device, pid ORDER BY ts
                ROWS BETWEEN 1 PRECEDING AND CURRENT ROW) AS gap
            FROM s))
    WINDOW run AS (PARTITION BY host, metric, device, pid ORDER BY ts
                   ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)
),
keys AS (
    SELECT host, metric, device, pid, min(ts) AS first_ts, max(ts) AS last_ts
    FROM s GROUP BY host, metric, device, pid
),
covered AS (
    SELECT x.trace_id AS trace_id, x.sec AS sec, x.a AS a, x.b AS b, k.host AS host,
        k.metric AS metric, k.device AS device, k.pid AS pid,
        greatest(x.a, k.first_ts) AS a2, least(x.b, k.last_ts) AS b2
    FROM placed AS x INNER JOIN keys AS k ON k.host = x.host
    WHERE least(x.b, k.last_ts) > greatest(x.a, k.first_ts)
        AND (NOT has({per_process}, k.metric) OR k.pid = x.pid)
),
at_a AS (
    SELECT c.*,
        r.integral - if(r.held, r.value * (r.ts - c.a2), 0) AS ia,
        r.described - if(r.held, r.ts - c.a2, 0) AS ca
    FROM covered AS c
    ASOF INNER JOIN series AS r
        ON r.host = c.host AND r.metric = c.metric AND r.device = c.device
            AND r.pid = c.pid AND c.a2 <= r.ts
),
at_b AS (
    SELECT c.*,
        r.integral - if(r.held, r.value * (r.ts - c.b2), 0) AS ib,
        r.described - if(r.held, r.ts - c.b2, 0) AS cb
    FROM at_a AS c
    ASOF INNER JOIN series AS r
        ON r.host = c.host AND r.metric = c.metric AND r.device = c.device
            AND r.pid = c.pid AND c.b2 <= r.ts
),
-- each series' mean over each section it describes enough of
means AS (
    SELECT trace_id, sec, host, metric, device, pid, (ib - ia) / (cb - ca) AS mean
    FROM at_b
    WHERE cb > ca AND (cb - ca) * 2 >= b - a
),
-- the GPUs each process holds memory on
gpus_of AS (
    SELECT DISTINCT assumeNotNull(host) AS host, assumeNotNull(pid) AS pid,
        assumeNotNull(device) AS device
    FROM read
    WHERE metric = {gpu_memory} AND pid IS NOT NULL AND device IS NOT NULL
        AND host IS NOT NULL
),
own_gpu AS (  -- sections of such a process: the highest mean of its GPUs (NULL: none)
    SELECT x.trace_id AS trace_id, x.sec AS sec,
        maxIfOrNull(m.mean, m.trace_id != '') AS mean
    FROM placed AS x
    INNER JOIN gpus_of AS g ON g.host = x.host AND g.pid = x.pid
    LEFT JOIN (SELECT * FROM means WHERE metric = {gpu_util}) AS m
        ON m.trace_id = x.trace_id AND m.sec = x.sec AND m.device = g.device
    WHERE (SELECT count() FROM means WHERE metric = {gpu_util}) > 0
    GROUP BY x.trace_id, x.sec
),
no_gpu_runs AS (
    SELECT assumeNotNull(host) AS host, min(ts_ns) AS first_ns, max(ts_ns) AS last_ns
    FROM read
    WHERE host IS NOT NULL
    GROUP BY host
    HAVING countIf(metric = {up} AND source = {gpu_source} AND value IS NOT NULL) > 0
        AND maxIf(value, metric = {up} AND source = {gpu_source}) = 0
)
SELECT trace_id, sec, metric, max(mean) AS mean
FROM means
WHERE NOT (metric = {gpu_util} AND (trace_id, sec) IN (SELECT trace_id, sec FROM own_gpu))
GROUP BY trace_id, sec, metric
UNION ALL
SELECT trace_id, sec, {gpu_util}, mean FROM own_gpu
UNION ALL
SELECT trace_id, sec, {gpu_of_process}, 1. FROM own_gpu
UNION ALL
SELECT x.trace_id, x.sec, {no_gpu}, 1.
FROM placed AS x INNER JOIN no_gpu_runs AS r ON r.host = x.host
WHERE x.a >= r.first_ns AND x.b <= r.last_ns
