-- What the analyzers read of each span, computed in ClickHouse: the rows and columns of the
-- embedded store's store/sql/analysis_input.sql (its header says what each column is), of the
-- spans the store would hold after loading the window (the rows of spans_of_otel_traces.sql
-- that path_spans.sql keeps; of a span id seen twice in a trace, the row REPEATS_BY puts
-- first; a stage from the conventions where agentscope.stage is absent, by
-- semconv.STAGE_RULES, as stages_from_conventions.sql gives it). Each step below is the step
-- of the same name there. Joins are on the trace (its number, its id) and on row numbers of
-- the part, in the session's temporary tables: not shard-local yet (docs/clickhouse.md).
-- Differences from the embedded query (docs/clickhouse.md): the host travels as text (the
-- store sends its position in a list) and host_hash is ClickHouse's hash of it (the analyzers
-- only group by it); attribute text that DuckDB reads as a number and ClickHouse does not
-- (digit separators, hexadecimal) is no number here; sums past 2^63 wrap; stage values are
-- lower-cased in ASCII. NULLs of a LEFT JOIN need join_use_nulls = 1, which the caller sets.
-- Filled by semconv.stage_sql (stage_names: the attributes the stage rules read,
-- stage_attributes: their values lower-cased, a column each, stage_case), then the spans
-- placeholder replaced by the valid rows (every column) in parentheses, coupling by a list of
-- attribute names, lo and hi by numbers.
-- It runs as statements, each step's rows a temporary table of the session (one query of
-- WITH steps recomputed the steps at each reference: 12 s at 1M spans, against 3.3 s so),
-- separated by a blank line after a `;`; the caller drops the tables after
-- (clickhouse.TEMPORARY_TABLES, WINDOW_TABLE). The first statement runs once for the window;
-- the others once for each part of its traces (a range of the hash of their id: lo to hi).
-- The window's rows are read once, not once a part: a part's traces lie in every granule of
-- the table, so a part that read the table read every column of the whole window again.
-- window: what is read of each row: no attribute map or event list goes further (sorting rows
-- that hold them cost the most); the stage from the conventions where none is given; the hash
-- of its trace's id, the table's order, so that a part is read alone; coupled: whether it is
-- a span whose analysis reads other traces' spans (the store's coupled_traces: the names in
-- coupling), for the caller to analyse the window in one part
CREATE TEMPORARY TABLE agentscope_window ENGINE = MergeTree ORDER BY trace_hash AS
    SELECT cityHash64(trace_id) AS trace_hash, coupled,
        trace_id, span_id, parent_span_id, name, coalesce(given_stage, {stage_case}) AS stage,
        kind, start_ns, end_ns, pid, tid, thread_cpu_ns, child_cpu_ns, majflt, child_majflt,
        vcsw, ivcsw, service, host, a, error, timeout
    FROM (
        SELECT *, {stage_attributes}
        FROM (
            SELECT trace_id, span_id, parent_span_id, toValidUTF8(name) AS name,
                stage AS given_stage, kind, start_ns, end_ns, pid, tid, thread_cpu_ns,
                child_cpu_ns, majflt, child_majflt, vcsw, ivcsw,
                toValidUTF8(service) AS service, toValidUTF8(host) AS host,
                -- the attributes the classifier reads (NULL: absent); text as valid UTF-8,
                -- bad bytes replaced, as the full read makes it (_flat_columns)
                arrayMap(k -> if(mapContains(attrs, k), toValidUTF8(attrs[k]), NULL), [
                    'gen_ai.latency.time_in_queue', 'gen_ai.latency.time_in_model_prefill',
                    'gen_ai.latency.time_in_model_decode', 'server.address',
                    'agentscope.cpu.scope', 'agentscope.lane',
                    'agentscope.cpu.thread_system_ns',
                    'agentscope.children.ctx_switches.involuntary',
                    'agentscope.children.ctx_switches.voluntary',
                    'agentscope.process.other_threads_cpu_ns', 'agentscope.workers.cpu_ns',
                    'agentscope.children.run_delay_ns', 'agentscope.children.own_cpu_ns',
                    'server.port', 'url.full']) AS a,
                status = 'error' AS error,
                status = 'error' AND match(arrayStringConcat(arrayFilter(x -> x != '', [
                        ifNull(status_message, ''), ifNull(attrs['error.type'], ''),
                        arrayStringConcat(arrayFilter(x -> x != '',
                            arrayMap(e -> e.attrs['exception.type'], events)), ' ')]), ' '),
                    '(?i)timeout|timed out|deadline[ _]?exceeded') AS timeout,
                arrayMap(k -> if(mapContains(attrs, k), attrs[k], NULL), {stage_names}) AS v,
                hasAny(mapKeys(attrs), {coupling}) AS coupled
            FROM {spans}
        )
    );

-- staged: the rows of one part
CREATE TEMPORARY TABLE agentscope_staged AS
SELECT * EXCEPT (trace_hash, coupled) FROM agentscope_window
WHERE trace_hash BETWEEN {lo} AND {hi};

-- repeated: the (trace, span) ids on several rows
CREATE TEMPORARY TABLE agentscope_repeated AS
SELECT trace_id, span_id FROM agentscope_staged GROUP BY trace_id, span_id HAVING count() > 1;

-- raw and base: one row per (trace, span) id (of an id on several rows, the earliest start,
-- then end, parent (none last), kind; only those rows sorted: sorting all of them cost
-- seconds), numbered; the attributes by name, numbers read as DuckDB's TRY_CAST reads them
-- (blanks around them; an integer from a decimal rounded)
CREATE TEMPORARY TABLE agentscope_base AS
SELECT * EXCEPT (a),
    a[4] AS attr_server_address, a[5] AS attr_cpu_scope, a[6] AS attr_lane,
    a[14] AS attr_server_port,
    -- numbers: their text without blanks around it (as DuckDB casts text)
    trim(BOTH ' \t\n\r\x0B\x0C' FROM a[1]) AS attr_queue_s,
    trim(BOTH ' \t\n\r\x0B\x0C' FROM a[2]) AS attr_prefill_s,
    trim(BOTH ' \t\n\r\x0B\x0C' FROM a[3]) AS attr_decode_s,
    trim(BOTH ' \t\n\r\x0B\x0C' FROM a[7]) AS attr_thread_system_ns,
    trim(BOTH ' \t\n\r\x0B\x0C' FROM a[10]) AS attr_other_cpu,
    trim(BOTH ' \t\n\r\x0B\x0C' FROM a[12]) AS attr_child_run_delay,
    trim(BOTH ' \t\n\r\x0B\x0C' FROM a[13]) AS attr_child_own_cpu,
    -- integers: the text as one, else a decimal rounded half away from zero (as DuckDB
    -- casts text to BIGINT; ClickHouse's round() rounds half to even)
    trim(BOTH ' \t\n\r\x0B\x0C' FROM a[11]) AS workers_text,
    toFloat64OrNull(workers_text) AS workers_f,
    ifNull(coalesce(toInt64OrNull(workers_text),
                    toInt64OrNull(toString(sign(workers_f) * floor(abs(workers_f) + 0.5)))), 0)
        AS workers_cpu_ns,
    trim(BOTH ' \t\n\r\x0B\x0C' FROM a[9]) AS child_vcsw_text,
    toFloat64OrNull(child_vcsw_text) AS child_vcsw_f,
    coalesce(toInt64OrNull(child_vcsw_text),
             toInt64OrNull(toString(sign(child_vcsw_f) * floor(abs(child_vcsw_f) + 0.5))))
        AS attr_child_vcsw_n,
    trim(BOTH ' \t\n\r\x0B\x0C' FROM a[8]) AS child_ivcsw_text,
    toFloat64OrNull(child_ivcsw_text) AS child_ivcsw_f,
    coalesce(toInt64OrNull(child_ivcsw_text),
             toInt64OrNull(toString(sign(child_ivcsw_f) * floor(abs(child_ivcsw_f) + 0.5))))
        AS attr_child_ivcsw_n,
    nullIf(regexpExtract(a[15], '^[A-Za-z][A-Za-z0-9+.-]*://(?:[^@/?#]*@)?([^/?#]+)', 1),
           '') AS attr_url_authority
FROM (
    SELECT
        toInt64(row_number() OVER (ORDER BY trace_id, start_ns, span_id) - 1) AS idx,
        toInt64(dense_rank() OVER (ORDER BY trace_id)) AS trace_no,
        trace_id, span_id, parent_span_id, name, stage, kind, start_ns, end_ns, pid, tid,
        thread_cpu_ns, child_cpu_ns, majflt, child_majflt, vcsw, ivcsw, service, host, a,
        error, timeout
    FROM (
        SELECT * FROM agentscope_staged
        WHERE (trace_id, span_id) NOT IN (SELECT trace_id, span_id FROM agentscope_repeated)
        UNION ALL
        SELECT * FROM (
            SELECT * FROM agentscope_staged
            WHERE (trace_id, span_id) IN (SELECT trace_id, span_id FROM agentscope_repeated)
            ORDER BY trace_id, span_id, start_ns, end_ns, isNull(parent_span_id),
                     parent_span_id, kind
            LIMIT 1 BY trace_id, span_id)
    )
);

-- found: each span's parent where it is in the data
CREATE TEMPORARY TABLE agentscope_found AS
SELECT c.idx AS idx, c.trace_no AS trace_no, c.start_ns AS start_ns, c.end_ns AS end_ns,
       p.idx AS found_idx, isNull(c.parent_span_id) AS true_root,
       isNotNull(c.parent_span_id) AND isNull(p.idx) AS orphan
FROM agentscope_base c
LEFT JOIN (SELECT trace_id, span_id, idx FROM agentscope_base) p
    ON p.trace_id = c.trace_id AND p.span_id = c.parent_span_id;

-- linked: each span with its parent (found, else adopted) and what it takes off it
CREATE TEMPORARY TABLE agentscope_linked AS
WITH
adopted AS (
    -- the innermost enclosing true root (latest start, then earliest end, then row)
    SELECT o.idx AS idx, argMax(r.idx, (r.start_ns, -r.end_ns, r.idx)) AS adopter
    FROM (SELECT idx, trace_no, start_ns, end_ns FROM agentscope_found WHERE orphan) o
    JOIN (SELECT idx, trace_no, start_ns, end_ns FROM agentscope_found WHERE true_root) r
        ON r.trace_no = o.trace_no
    WHERE r.start_ns <= o.start_ns AND r.end_ns >= o.end_ns
    GROUP BY o.idx
),
parents AS (
    SELECT f.idx AS idx, multiIf(f.found_idx = f.idx, -1,
                                 coalesce(f.found_idx, a.adopter, -1)) AS parent_idx,
           f.orphan AS orphan
    FROM agentscope_found f LEFT JOIN adopted a ON a.idx = f.idx
)
    -- (the parent's columns renamed: every other name is the span's own)
    SELECT * EXCEPT (at_idx, p_idx, p_pid, p_tid, p_start_ns, p_end_ns),
        -- what this span takes off its parent's own time, CPU and faults (NULL: nothing)
        (p_idx != idx AND ifNull(pid = p_pid, isNull(pid) AND isNull(p_pid))) AS same_process,
        same_process AND ifNull(tid = p_tid, isNull(tid) AND isNull(p_tid)) AS same_thread,
        if(same_thread, greatest(least(end_ns, p_end_ns) - greatest(start_ns, p_start_ns), 0),
           NULL) AS net_wall,
        if(same_thread, thread_cpu_ns, NULL) AS net_cpu,
        if(same_process, child_cpu_ns, NULL) AS net_child_cpu,
        if(same_process, ifNull(if(same_thread, majflt, NULL), 0) + ifNull(child_majflt, 0),
           NULL) AS net_faults,
        if(same_process, workers_cpu_ns + if(same_thread, 0, ifNull(thread_cpu_ns, 0)), NULL)
            AS net_workers
    FROM agentscope_base c
    JOIN (SELECT idx AS at_idx, parent_idx, orphan FROM parents) pa ON pa.at_idx = c.idx
    LEFT JOIN (SELECT idx AS p_idx, pid AS p_pid, tid AS p_tid, start_ns AS p_start_ns,
                      end_ns AS p_end_ns FROM agentscope_base) p ON p.p_idx = pa.parent_idx;

-- the rows: each span's own time, CPU and faults net of its children's (kid)
WITH kid AS (
    -- (kid_idx, not idx: an alias is seen in WHERE, where it would hide the column)
    SELECT parent_idx AS kid_idx, sum(net_wall) AS busy_wall, sum(net_cpu) AS kid_cpu,
           sum(net_child_cpu) AS kid_child_cpu, ifNull(sum(net_faults), 0) AS kid_faults,
           ifNull(sum(net_workers), 0) AS kid_workers
    FROM agentscope_linked WHERE parent_idx >= 0 AND parent_idx != idx
    GROUP BY parent_idx
)
SELECT s.idx AS idx, s.trace_no AS trace_no,
    if(s.parent_idx < 0 OR s.stage = 'task', s.trace_id, NULL) AS trace_id,
    s.span_id AS span_id, s.name AS name,
    toInt64(indexOf(['task', 'agent', 'queue', 'context', 'inference', 'tool', 'env',
                     'memory'], ifNull(s.stage, ''))) AS stage_code,
    if(s.kind IN ('producer', 'consumer'), s.kind, NULL) AS kind,
    s.start_ns AS start_ns, s.end_ns AS end_ns,
    toFloat64(if(isNull(s.thread_cpu_ns), -1,
        greatest(s.thread_cpu_ns - ifNull(k.kid_cpu, 0), 0)
        + greatest(ifNull(s.child_cpu_ns, 0) - ifNull(k.kid_child_cpu, 0), 0)
        + greatest(s.workers_cpu_ns - ifNull(k.kid_workers, 0), 0))) AS own_cpu,
    toFloat64(greatest(s.end_ns - s.start_ns - ifNull(k.busy_wall, 0), 0)) AS own_wall,
    toFloat64(greatest(ifNull(s.majflt, 0) + ifNull(s.child_majflt, 0)
                     - ifNull(k.kid_faults, 0), 0)) AS own_faults,
    toInt64(ifNull(s.child_cpu_ns, 0)) AS child_cpu_ns,
    ifNull(toFloat64OrNull(s.attr_queue_s), 0) AS queue_s,
    ifNull(toFloat64OrNull(s.attr_prefill_s), 0)
        + ifNull(toFloat64OrNull(s.attr_decode_s), 0) AS model_s,
    toBool(ifNull(coalesce(s.attr_server_address,
                    regexpExtract(s.attr_url_authority, '^(\\[[^\\]]*\\]|[^:]*)', 1))
           IN ('localhost', '127.0.0.1', '::1', '[::1]', '0.0.0.0'), false)) AS server_local,
    if(s.stage = 'inference',
       coalesce(concat(s.attr_server_address, coalesce(concat(':', s.attr_server_port), '')),
                s.attr_url_authority), NULL) AS endpoint,
    toBool(ifNull(s.attr_cpu_scope = 'loop', false)) AS loop,
    ifNull(toFloat64OrNull(s.attr_thread_system_ns), 0) AS sys_cpu,
    if(s.parent_idx < 0 OR s.stage = 'task', s.attr_lane, NULL) AS lane,
    if(s.parent_idx < 0 OR s.stage = 'task', s.service, NULL) AS service,
    toInt64(s.parent_idx) AS parent_idx, toBool(s.orphan) AS orphan,
    toInt32(ifNull(s.pid, -1)) AS pid, toInt64(ifNull(s.tid, -1)) AS tid,
    toInt64(cityHash64(ifNull(s.host, '')) % 2147483647) AS host_hash,
    toInt64(ifNull(s.vcsw, 0)) AS vcsw, toInt64(ifNull(s.ivcsw, 0)) AS ivcsw,
    ifNull(s.attr_child_vcsw_n, 0) AS child_vcsw,
    ifNull(s.attr_child_ivcsw_n, 0) AS child_ivcsw,
    ifNull(toFloat64OrNull(s.attr_other_cpu), 0) AS other_cpu,
    ifNull(toFloat64OrNull(s.attr_child_run_delay), -1) AS child_run_delay,
    ifNull(toFloat64OrNull(s.attr_child_own_cpu), -1) AS child_own_cpu,
    toFloat64(greatest(s.workers_cpu_ns - ifNull(k.kid_workers, 0), 0)) AS workers_cpu,
    toInt64(ifNull(s.thread_cpu_ns, -1)) AS thread_cpu,
    toBool(s.error) AS error, toBool(s.timeout) AS timeout,
    s.host AS host
FROM agentscope_linked s
LEFT JOIN kid k ON k.kid_idx = s.idx
