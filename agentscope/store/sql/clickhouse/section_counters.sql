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
--     embedded store sees them once loaded), where some section is on a host with a series
--     of the metrics (section_means gives nothing at all otherwise).
-- Those two "where any section" conditions are decided per query: per part of a window
-- walked in parts (per shard), as the embedded analysis decides them per batch of traces.
-- What it is not: the fallback of the embedded analysis for a span that named no host (its
-- sampled process tree's host) needs the process-tree join, which runs on the client.
--
-- Not grouped by trace: sections meet samples by host and time. On a cluster sharded by
-- trace, each shard's sections need the samples of their hosts: a samples table replicated
-- to every shard (or a GLOBAL JOIN) keeps it shard-local (docs/clickhouse.md).
--
-- Each step is read once (ClickHouse repeats a WITH step at each place it is named): the walk
-- runs once, and every section travels through one chain, its host's series in one array,
-- keyed by numbers (trace_no: the path's row number in this query; sec); the trace id and
-- the path's other columns ride on each trace's first section only.
--
-- Rows: one a trace, critical_path.sql's columns and `counters`: per metric, (the metric, the
-- numbers from 1 of the sections it has a mean over, those means) (the path's row carried
-- along, so that the walk runs once).
-- Filled by str.format: paths (critical_path.sql's query), samples
-- (samples_of_agentscope_samples.sql's query), metrics, per_process (ClickHouse arrays of
-- strings), max_hold, and the quoted names above.
WITH
-- every section of every path (a trace without one: one row of section 0), placed on its
-- span's host and pid (the walk's section_owners: a gap, or a span that named no host, has
-- no host, so no counter); the path's columns on its first row
placed AS (
    SELECT trace_no, if(empty(p.sections), 0, k) AS sec, s.1 AS span_id, s.2 AS a,
        s.3 AS b, o.1 AS host, ifNull(o.2, -1) AS pid,
        if(k <= 1, (trace_id, path_start, path_end, root_ids, off_path, duplicates),
           ('', 0, 0, [], 0, 0)) AS path
    FROM (SELECT *, rowNumberInAllBlocks() AS trace_no FROM ({paths})) AS p
    LEFT ARRAY JOIN p.sections AS s, p.section_owners AS o, arrayEnumerate(p.sections) AS k
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
    SELECT trace_no, sec, span_id, a, b, path, host, devices, no_gpu, host_sampled,
        k.1 AS metric,
        k.2 AS device, k.3 AS series_pid, greatest(a, k.4) AS a2, least(b, k.5) AS b2
    FROM (
        SELECT x.trace_no AS trace_no, x.sec AS sec, x.span_id AS span_id, x.a AS a,
            x.b AS b, x.path AS path, ifNull(x.host, '') AS host, g.devices AS devices,
            r.host != '' AND x.a >= r.first_ns AND x.b <= r.last_ns AS no_gpu,
            notEmpty(h.ks) AS host_sampled,
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
-- per section: each series' mean over it where it describes enough of it
per_section AS (
    SELECT trace_no, sec, any(span_id) AS section_span, any(a) AS section_a,
        any(b) AS section_b, argMax(path, path.1) AS trace_path,
        any(devices) AS process_gpus, any(no_gpu) AS in_run_without_gpu,
        any(host_sampled) AS on_sampled_host,
        groupArrayIf((metric, device, mean), ok) AS series_means
    FROM (SELECT *, metric != '' AND cb > ca AND (cb - ca) * 2 >= b - a AS ok,
              (ib - ia) / (cb - ca) AS mean
          FROM at_b)
    GROUP BY trace_no, sec
),
-- per metric the highest mean; of GPU utilization also the highest of the process's GPUs
judged AS (
    SELECT *,
        arrayMap(m -> CAST((m, arrayMax(arrayMap(x -> x.3, arrayFilter(x -> x.1 = m,
                                                                    series_means)))),
                           'Tuple(String, Nullable(Float64))'),
                 arrayDistinct(arrayMap(x -> x.1, series_means))) AS got,
        arrayMap(x -> x.3, arrayFilter(x -> x.1 = {gpu_util} AND has(process_gpus, x.2),
                                       series_means)) AS own,
        if(empty(own), NULL, arrayMax(own)) AS own_gpu,
        has(arrayMap(x -> x.1, series_means), {gpu_util}) AS had_gpu
    FROM per_section
)
-- per trace: its path (the columns of critical_path.sql) and, per metric, the numbers of the
-- sections it has a mean over and those means (the name once, not once a mean)
SELECT trace_id, sections, path_start, path_end, root_ids, off_path, duplicates, counters
FROM (
    SELECT trace_no,
        argMax(trace_path, trace_path.1) AS first, first.1 AS trace_id, first.2 AS path_start,
        first.3 AS path_end, first.4 AS root_ids, first.5 AS off_path, first.6 AS duplicates,
        arrayMap(x -> x.2, arraySort(x -> x.1, groupArrayIf(
            (sec, (section_span, section_a, section_b)), sec > 0))) AS sections,
        arrayFlatten(groupArray(arrayMap(m -> (sec, m.1, m.2), means))) AS triples,
        arrayMap(g -> (g.1, arrayMap(x -> x.1, g.2), arrayMap(x -> x.3, g.2)),
                 arrayMap(m -> (m, arrayFilter(x -> x.2 = m, triples)),
                          arrayDistinct(arrayMap(x -> x.2, triples)))) AS counters
    FROM (
        SELECT trace_no, sec, section_span, section_a, section_b, trace_path, arrayConcat(
            arrayFilter(m -> NOT (gpu_of_process AND m.1 = {gpu_util}), got),
            if(gpu_of_process,
               [CAST(({gpu_util}, own_gpu), 'Tuple(String, Nullable(Float64))'),
                CAST(({gpu_of_process}, 1.), 'Tuple(String, Nullable(Float64))')], []),
            if(without_gpu, [CAST(({no_gpu}, 1.), 'Tuple(String, Nullable(Float64))')],
               [])) AS means
        FROM (SELECT *, notEmpty(process_gpus) AND max(had_gpu) OVER () AS gpu_of_process,
                  in_run_without_gpu AND max(on_sampled_host) OVER () AS without_gpu
              FROM judged))
    GROUP BY trace_no
)
