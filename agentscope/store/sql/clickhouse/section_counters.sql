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
-- Each step is read once (ClickHouse repeats a WITH step at each place it is named): the walk
-- runs once, and every section travels through one chain, its series joined in one array.
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
-- each span's host and pid: those of the row the store keeps of its span id
owners AS (
    SELECT trace_id, span_id,
        argMin((host, pid), (start_ns, end_ns, isNull(parent_span_id),
                             ifNull(parent_span_id, ''), kind)) AS who
    FROM ({owners})
    GROUP BY trace_id, span_id
),
placed AS (
    SELECT x.trace_id AS trace_id, x.sec AS sec, x.a AS a, x.b AS b,
        assumeNotNull(o.who.1) AS host, ifNull(o.who.2, -1) AS pid
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
-- the series of each host, as one array
host_series AS (
    SELECT host, groupArray((metric, device, pid, first_ts, last_ts)) AS ks
    FROM (SELECT host, metric, device, pid, min(ts) AS first_ts, max(ts) AS last_ts
          FROM s GROUP BY host, metric, device, pid)
    GROUP BY host
),
-- the GPUs each process holds memory on
gpus AS (
    SELECT assumeNotNull(host) AS host, assumeNotNull(pid) AS pid,
        groupUniqArray(assumeNotNull(device)) AS devices
    FROM read
    WHERE metric = {gpu_memory} AND pid IS NOT NULL AND device IS NOT NULL
        AND host IS NOT NULL
    GROUP BY host, pid
),
no_gpu_runs AS (
    SELECT assumeNotNull(host) AS host, min(ts_ns) AS first_ns, max(ts_ns) AS last_ns
    FROM read
    WHERE host IS NOT NULL
    GROUP BY host
    HAVING countIf(metric = {up} AND source = {gpu_source} AND value IS NOT NULL) > 0
        AND maxIf(value, metric = {up} AND source = {gpu_source}) = 0
),
-- every section with each series of its host that it overlaps (a section with none keeps one
-- row of no series, metric ''), its process's GPUs, and whether a run without a GPU holds it
covered AS (
    SELECT trace_id, sec, a, b, host, pid, devices, no_gpu, k.1 AS metric, k.2 AS device,
        k.3 AS series_pid, greatest(a, k.4) AS a2, least(b, k.5) AS b2
    FROM (
        SELECT x.trace_id AS trace_id, x.sec AS sec, x.a AS a, x.b AS b, x.host AS host,
            x.pid AS pid, g.devices AS devices,
            r.host != '' AND x.a >= r.first_ns AND x.b <= r.last_ns AS no_gpu,
            arrayFilter(k -> least(x.b, k.5) > greatest(x.a, k.4)
                             AND (NOT has({per_process}, k.1) OR k.3 = x.pid),
                        h.ks) AS overlapped
        FROM placed AS x
        LEFT JOIN host_series AS h ON h.host = x.host
        LEFT JOIN gpus AS g ON g.host = x.host AND g.pid = x.pid
        LEFT JOIN no_gpu_runs AS r ON r.host = x.host)
    LEFT ARRAY JOIN overlapped AS k
),
at_a AS (
    SELECT c.*,
        r.integral - if(r.held, r.value * (r.ts - c.a2), 0) AS ia,
        r.described - if(r.held, r.ts - c.a2, 0) AS ca
    FROM covered AS c
    ASOF LEFT JOIN series AS r
        ON r.host = c.host AND r.metric = c.metric AND r.device = c.device
            AND r.pid = c.series_pid AND c.a2 <= r.ts
),
at_b AS (
    SELECT c.*,
        r.integral - if(r.held, r.value * (r.ts - c.b2), 0) AS ib,
        r.described - if(r.held, r.ts - c.b2, 0) AS cb
    FROM at_a AS c
    ASOF LEFT JOIN series AS r
        ON r.host = c.host AND r.metric = c.metric AND r.device = c.device
            AND r.pid = c.series_pid AND c.b2 <= r.ts
),
-- each series' mean over each section it describes enough of (NULL: not enough), and per
-- metric the highest, and the highest of the section's process's own GPUs
per_metric AS (
    SELECT trace_id, sec, metric, any(devices) AS gpus_held, any(no_gpu) AS in_no_gpu_run,
        maxIfOrNull((ib - ia) / (cb - ca), described) AS mean,
        maxIfOrNull((ib - ia) / (cb - ca), described AND has(devices, device)) AS own
    FROM (SELECT *, metric != '' AND cb > ca AND (cb - ca) * 2 >= b - a AS described
          FROM at_b)
    GROUP BY trace_id, sec, metric
),
per_section AS (
    SELECT trace_id, sec, any(gpus_held) AS devices, any(in_no_gpu_run) AS no_gpu,
        arrayFilter(m -> m.2 IS NOT NULL, groupArray(
            CAST((metric, mean), 'Tuple(String, Nullable(Float64))'))) AS got,
        maxIfOrNull(own, metric = {gpu_util}) AS own_gpu,
        countIf(metric = {gpu_util} AND mean IS NOT NULL) > 0 AS had_gpu
    FROM per_metric
    GROUP BY trace_id, sec
)
SELECT trace_id, sec, m.1 AS metric, m.2 AS mean
FROM (SELECT *, notEmpty(devices) AND max(had_gpu) OVER () AS gpu_of_process
      FROM per_section)
ARRAY JOIN arrayConcat(
    arrayFilter(m -> NOT (gpu_of_process AND m.1 = {gpu_util}), got),
    if(gpu_of_process,
       [CAST(({gpu_util}, own_gpu), 'Tuple(String, Nullable(Float64))'),
        CAST(({gpu_of_process}, 1.), 'Tuple(String, Nullable(Float64))')], []),
    if(no_gpu, [CAST(({no_gpu}, 1.), 'Tuple(String, Nullable(Float64))')], [])) AS m
