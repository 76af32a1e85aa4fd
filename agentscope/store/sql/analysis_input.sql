-- What the analyzers read of each span: ids, times, and its *own* evidence, net of its
-- children's. Each row carries idx, its position in (trace_id, start_ns, span_id) order, so
-- that each trace is one contiguous run of positions (numbered by trace_no); the rows come
-- back in any order and the reader puts them in idx order (cheaper in numpy than a second
-- sort of every column here). Strings that only task roots need (trace_id, lane, service) are
-- sent for roots only, and each span's parent comes as the idx of the parent (parent_idx, -1
-- for none), so the critical-path walk works on integers.
-- Numbers are never NULL (0 = none), so they come out of DuckDB as plain numpy arrays.
--   own_cpu    on-CPU time of its thread minus that of its children on the same thread, plus
--              CPU of the child processes it waited for minus those its children waited for
--              (-1 when its thread CPU was not measured);
--   own_wall   its duration minus the time its children on the same thread ran;
--   own_faults its major faults (thread + children processes) minus its children's.
-- Children on another thread or process did not use this thread, so they are not netted.
-- The parent is found once (one join on the string ids); the netting sums group by its idx.
-- A span whose parent is not in the data (an orphan: the trace was cut, or a service did not
-- export) is adopted by the innermost true root (a span with no parent) of its trace that
-- encloses it in time, if one does (its missing ancestors ran inside that root, which waited
-- for them); otherwise it is a root itself. Orphans never adopt each other (siblings under
-- one missing parent ran beside each other, not inside). Either way it keeps its trace id
-- and service (orphan marks it).
-- error and timeout: its status is error; and it ended in a timeout (error, and its status
-- message, the exception.type of one of its events or its error.type attribute names one:
-- TimeoutError, socket.timeout, ReadTimeout, "timed out", DEADLINE_EXCEEDED, ...). The
-- events and attributes are read for failed spans only (analyzers/reliability.py).
-- $lo and $hi bound the trace ids read, or $ids lists them (a batch of traces, or the traces
-- an incremental analysis redoes: positions and trace numbers are then the batch's own, from
-- 0 and 1).
-- host_code feeds the counter rules; the store leaves it out (SELECT * EXCLUDE) when it has
-- no counter samples to join. It is the span's host as its 1-based position in $hosts (0:
-- none).
WITH raw AS (
    SELECT
        row_number() OVER (ORDER BY trace_id, start_ns, span_id) - 1 AS idx,
        dense_rank() OVER (ORDER BY trace_id) AS trace_no,
        trace_id, span_id, parent_span_id, name, stage, kind, start_ns, end_ns, pid, tid,
        thread_cpu_ns, child_cpu_ns, majflt, child_majflt, vcsw, ivcsw, service, host,
        -- the attributes the classifier reads, parsed once per span, and only where one of
        -- their names can be in the text (most spans have none of them: parsing every
        -- span's attributes took more than half of this query); a \u escape anywhere may
        -- spell one of those names, so such text is parsed
        CASE WHEN attrs IS NULL OR attrs = '{}'
                  OR NOT (contains(attrs, '"agentscope.') OR contains(attrs, '"server.')
                          OR contains(attrs, '"gen_ai.latency.')
                          OR contains(attrs, '"url.full"') OR contains(attrs, '\u'))
             THEN NULL
             ELSE json_extract_string(attrs, [
                 '$."gen_ai.latency.time_in_queue"',
                 '$."gen_ai.latency.time_in_model_prefill"',
                 '$."gen_ai.latency.time_in_model_decode"',
                 '$."server.address"', '$."agentscope.cpu.scope"',
                 '$."agentscope.lane"', '$."agentscope.cpu.thread_system_ns"',
                 '$."agentscope.children.ctx_switches.involuntary"',
                 '$."agentscope.children.ctx_switches.voluntary"',
                 '$."agentscope.process.other_threads_cpu_ns"',
                 '$."agentscope.workers.cpu_ns"',
                 '$."agentscope.children.run_delay_ns"',
                 '$."agentscope.children.own_cpu_ns"',
                 '$."server.port"', '$."url.full"'])
        END AS a,
        coalesce(status = 'error', false) AS error,
        CASE WHEN status = 'error' THEN coalesce(regexp_matches(concat_ws(' ',
            status_message,
            CASE WHEN attrs IS NOT NULL AND attrs <> '{}'
                 THEN try(json_extract_string(attrs, '$."error.type"')) END,
            CASE WHEN events IS NOT NULL AND events <> '[]'
                 THEN try(array_to_string(json_extract_string(
                          events, '$[*].attrs."exception.type"'), ' ')) END),
            '(?i)timeout|timed out|deadline[ _]?exceeded'), false)
        ELSE false END AS timeout
    FROM spans
    -- one batch of traces ($lo <= trace_id < $hi; NULL: no bound), or those of the ids $ids
    -- (NULL: all)
    WHERE ($lo::VARCHAR IS NULL OR trace_id >= $lo) AND ($hi::VARCHAR IS NULL OR trace_id < $hi)
        AND ($ids::VARCHAR[] IS NULL OR trace_id IN (SELECT unnest($ids::VARCHAR[])))
),
base AS (
    -- the attributes by name (their positions in the list above)
    SELECT * EXCLUDE (a),
        a[1] AS attr_queue_s, a[2] AS attr_prefill_s, a[3] AS attr_decode_s,
        a[4] AS attr_server_address, a[5] AS attr_cpu_scope, a[6] AS attr_lane,
        a[7] AS attr_thread_system_ns, a[8] AS attr_child_ivcsw, a[9] AS attr_child_vcsw,
        a[10] AS attr_other_cpu,
        coalesce(TRY_CAST(a[11] AS BIGINT), 0) AS workers_cpu_ns,
        a[12] AS attr_child_run_delay, a[13] AS attr_child_own_cpu,
        a[14] AS attr_server_port,
        -- the host (and port) of url.full, without its scheme, credentials and path
        nullif(regexp_extract(a[15], '^[A-Za-z][A-Za-z0-9+.-]*://(?:[^@/?#]*@)?([^/?#]+)', 1),
               '') AS attr_url_authority
    FROM raw
),
found AS (
    SELECT c.idx, c.trace_no, c.start_ns, c.end_ns, p.idx AS found_idx,
           c.parent_span_id IS NULL AS true_root,
           c.parent_span_id IS NOT NULL AND p.idx IS NULL AS orphan
    FROM base c
    LEFT JOIN base p ON p.trace_id = c.trace_id AND p.span_id = c.parent_span_id
),
adopted AS (
    -- the innermost enclosing true root (latest start, then earliest end); true roots are
    -- few per trace (usually one), so this join is about as long as the orphans
    SELECT o.idx, arg_max(r.idx, [r.start_ns, -r.end_ns, r.idx]) AS adopter
    FROM found o
    JOIN found r ON r.trace_no = o.trace_no AND r.true_root
        AND r.start_ns <= o.start_ns AND r.end_ns >= o.end_ns
    WHERE o.orphan
    GROUP BY o.idx
),
parents AS (
    -- (a span its own parent is a root: the walk takes it as one, and its trace's task is
    -- named by it)
    SELECT f.idx, CASE WHEN f.found_idx = f.idx THEN -1
                       ELSE coalesce(f.found_idx, a.adopter, -1) END AS parent_idx, f.orphan
    FROM found f LEFT JOIN adopted a ON a.idx = f.idx
),
linked AS (
    SELECT c.*, pa.parent_idx, pa.orphan,
        -- what this span takes off its parent's own time, CPU and faults (NULL: nothing)
        CASE WHEN p.idx <> c.idx AND c.pid IS NOT DISTINCT FROM p.pid
                  AND c.tid IS NOT DISTINCT FROM p.tid
             THEN greatest(least(c.end_ns, p.end_ns) - greatest(c.start_ns, p.start_ns), 0)
             END AS net_wall,
        CASE WHEN p.idx <> c.idx AND c.pid IS NOT DISTINCT FROM p.pid
                  AND c.tid IS NOT DISTINCT FROM p.tid
             THEN c.thread_cpu_ns END AS net_cpu,
        CASE WHEN p.idx <> c.idx AND c.pid IS NOT DISTINCT FROM p.pid
             THEN c.child_cpu_ns END AS net_child_cpu,
        CASE WHEN p.idx <> c.idx AND c.pid IS NOT DISTINCT FROM p.pid
             THEN coalesce(CASE WHEN c.tid IS NOT DISTINCT FROM p.tid THEN c.majflt END, 0)
                  + coalesce(c.child_majflt, 0) END AS net_faults,
        -- a child on another thread of the process ran inside a job the parent handed over:
        -- its CPU is in the parent's workers' CPU already, as are its own workers'
        CASE WHEN p.idx <> c.idx AND c.pid IS NOT DISTINCT FROM p.pid
             THEN c.workers_cpu_ns + CASE WHEN c.tid IS DISTINCT FROM p.tid
                                          THEN coalesce(c.thread_cpu_ns, 0) ELSE 0 END
             END AS net_workers
    FROM base c
    JOIN parents pa ON pa.idx = c.idx
    LEFT JOIN base p ON p.idx = pa.parent_idx
),
kid AS (
    SELECT parent_idx AS idx, sum(net_wall) AS busy_wall, sum(net_cpu) AS kid_cpu,
           sum(net_child_cpu) AS kid_child_cpu, coalesce(sum(net_faults), 0) AS kid_faults,
           coalesce(sum(net_workers), 0) AS kid_workers
    FROM linked WHERE parent_idx >= 0 AND parent_idx <> idx
    GROUP BY parent_idx
),
SELECT s.idx, s.trace_no,
    CASE WHEN s.parent_idx < 0 OR s.stage = 'task' THEN s.trace_id END AS trace_id,
    s.span_id, s.name,
    -- low-cardinality strings as codes (no string object per row when fetched):
    -- stage as its position in the list below, kind only where the walk needs it
    coalesce(list_position(['task', 'agent', 'queue', 'context', 'inference', 'tool', 'env',
                            'memory'], s.stage), 0) AS stage_code,
    CASE WHEN s.kind IN ('producer', 'consumer') THEN s.kind END AS kind,
    s.start_ns, s.end_ns,
    CASE WHEN s.thread_cpu_ns IS NULL THEN -1 ELSE
        greatest(s.thread_cpu_ns - coalesce(k.kid_cpu, 0), 0)
        + greatest(coalesce(s.child_cpu_ns, 0) - coalesce(k.kid_child_cpu, 0), 0)
        + greatest(s.workers_cpu_ns - coalesce(k.kid_workers, 0), 0) END AS own_cpu,
    greatest(s.end_ns - s.start_ns - coalesce(k.busy_wall, 0), 0) AS own_wall,
    greatest(coalesce(s.majflt, 0) + coalesce(s.child_majflt, 0) - coalesce(k.kid_faults, 0), 0)
        AS own_faults,
    coalesce(s.child_cpu_ns, 0) AS child_cpu_ns,
    coalesce(TRY_CAST(s.attr_queue_s AS DOUBLE), 0) AS queue_s,
    coalesce(TRY_CAST(s.attr_prefill_s AS DOUBLE), 0)
        + coalesce(TRY_CAST(s.attr_decode_s AS DOUBLE), 0) AS model_s,
    coalesce(coalesce(s.attr_server_address,
                      regexp_extract(s.attr_url_authority, '^(\[[^\]]*\]|[^:]*)', 1))
             IN ('localhost', '127.0.0.1', '::1', '[::1]', '0.0.0.0'), false) AS server_local,
    -- an inference's model endpoint (server.address[:server.port], else url.full's host:port)
    CASE WHEN s.stage = 'inference' THEN
        coalesce(s.attr_server_address || coalesce(':' || s.attr_server_port, ''),
                 s.attr_url_authority) END AS endpoint,
    coalesce(s.attr_cpu_scope = 'loop', false) AS loop,
    -- kernel CPU of its thread, recorded where it took major faults or 1 ms or more
    coalesce(TRY_CAST(s.attr_thread_system_ns AS DOUBLE), 0) AS sys_cpu,
    CASE WHEN s.parent_idx < 0 OR s.stage = 'task' THEN s.attr_lane END AS lane,
    CASE WHEN s.parent_idx < 0 OR s.stage = 'task' THEN s.service END AS service,
    s.parent_idx, s.orphan,
    -- the process and thread, the context switches of its thread (not netted) and of the
    -- child processes it waited for, the CPU of its process's other threads meanwhile and of
    -- the jobs it handed to worker threads (net of its children's): the span-only rules for
    -- contention, worker threads, the interpreter lock and a blocked event loop
    coalesce(s.pid, -1) AS pid, coalesce(s.tid, -1) AS tid,
    -- its host as a number (processes of one host share it; pids of two hosts do not mix)
    (hash(coalesce(s.host, '')) % 2147483647)::BIGINT AS host_hash,
    coalesce(s.vcsw, 0) AS vcsw, coalesce(s.ivcsw, 0) AS ivcsw,
    coalesce(TRY_CAST(s.attr_child_vcsw AS BIGINT), 0) AS child_vcsw,
    coalesce(TRY_CAST(s.attr_child_ivcsw AS BIGINT), 0) AS child_ivcsw,
    coalesce(TRY_CAST(s.attr_other_cpu AS DOUBLE), 0) AS other_cpu,
    -- how long those children waited runnable for a CPU (-1: not recorded)
    coalesce(TRY_CAST(s.attr_child_run_delay AS DOUBLE), -1) AS child_run_delay,
    -- ... and the CPU those children used themselves (without their descendants; -1: none)
    coalesce(TRY_CAST(s.attr_child_own_cpu AS DOUBLE), -1) AS child_own_cpu,
    greatest(s.workers_cpu_ns - coalesce(k.kid_workers, 0), 0) AS workers_cpu,
    coalesce(s.thread_cpu_ns, -1) AS thread_cpu,
    s.error, s.timeout,
    -- for the counters of the span's host: the host as its 1-based position in $hosts
    coalesce(list_position($hosts::VARCHAR[], s.host), 0) AS host_code
FROM linked s
LEFT JOIN kid k ON k.idx = s.idx
