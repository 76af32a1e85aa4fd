-- What the analyzers read of each span, ordered by trace (each trace one contiguous run of
-- rows, numbered by trace_no): ids, times, and its *own* evidence, net of its children's.
-- Strings that only task roots need (trace_id, lane, service) are sent for roots only, and
-- each span's parent comes as the row index of the parent (parent_idx, -1 for none), so the
-- critical-path walk works on integers.
--   own_cpu    on-CPU time of its thread minus that of its children on the same thread, plus
--              CPU of the child processes it waited for minus those its children waited for
--              (-1 when its thread CPU was not measured);
-- Numbers are never NULL (0 = none), so they come out of DuckDB as plain numpy arrays.
--   own_wall   its duration minus the time its children on the same thread ran;
--   own_faults its major faults (thread + children processes) minus its children's.
-- Children on another thread or process did not use this thread, so they are not netted.
WITH kid AS (
    SELECT p.trace_id, p.span_id,
        sum(CASE WHEN c.pid IS NOT DISTINCT FROM p.pid AND c.tid IS NOT DISTINCT FROM p.tid
                 THEN greatest(least(c.end_ns, p.end_ns) - greatest(c.start_ns, p.start_ns), 0)
                 ELSE 0 END) AS busy_wall,
        sum(CASE WHEN c.pid IS NOT DISTINCT FROM p.pid AND c.tid IS NOT DISTINCT FROM p.tid
                 THEN c.thread_cpu_ns END) AS kid_cpu,
        sum(CASE WHEN c.pid IS NOT DISTINCT FROM p.pid THEN c.child_cpu_ns END) AS kid_child_cpu,
        coalesce(sum(CASE WHEN c.pid IS NOT DISTINCT FROM p.pid AND c.tid IS NOT DISTINCT FROM p.tid
                          THEN c.majflt END), 0)
          + coalesce(sum(CASE WHEN c.pid IS NOT DISTINCT FROM p.pid THEN c.child_majflt END), 0)
          AS kid_faults
    FROM spans c
    JOIN spans p ON c.trace_id = p.trace_id AND c.parent_span_id = p.span_id
                AND c.span_id <> p.span_id
    GROUP BY p.trace_id, p.span_id
),
rows AS (
SELECT
    row_number() OVER (ORDER BY s.trace_id, s.start_ns, s.span_id) - 1 AS idx,
    dense_rank() OVER (ORDER BY s.trace_id) AS trace_no,
    s.trace_id AS trace_key,
    CASE WHEN s.parent_span_id IS NULL OR s.stage = 'task' THEN s.trace_id END AS trace_id,
    s.span_id, s.parent_span_id, s.name, s.stage, s.kind, s.start_ns, s.end_ns,
    CASE WHEN s.thread_cpu_ns IS NULL THEN -1 ELSE
        greatest(s.thread_cpu_ns - coalesce(k.kid_cpu, 0), 0)
        + greatest(coalesce(s.child_cpu_ns, 0) - coalesce(k.kid_child_cpu, 0), 0) END AS own_cpu,
    greatest(s.end_ns - s.start_ns - coalesce(k.busy_wall, 0), 0) AS own_wall,
    greatest(coalesce(s.majflt, 0) + coalesce(s.child_majflt, 0) - coalesce(k.kid_faults, 0), 0)
        AS own_faults,
    coalesce(s.child_cpu_ns, 0) AS child_cpu_ns,
    coalesce(TRY_CAST(json_extract_string(s.attrs, '$."gen_ai.latency.time_in_queue"') AS DOUBLE), 0) AS queue_s,
    coalesce(TRY_CAST(json_extract_string(s.attrs, '$."gen_ai.latency.time_in_model_prefill"') AS DOUBLE), 0)
      + coalesce(TRY_CAST(json_extract_string(s.attrs, '$."gen_ai.latency.time_in_model_decode"') AS DOUBLE), 0) AS model_s,
    coalesce(json_extract_string(s.attrs, '$."server.address"') IN ('localhost', '127.0.0.1', '::1',
                                                                   '0.0.0.0'), false) AS server_local,
    coalesce(json_extract_string(s.attrs, '$."agentscope.cpu.scope"') = 'loop', false) AS loop,
    CASE WHEN s.parent_span_id IS NULL OR s.stage = 'task'
         THEN json_extract_string(s.attrs, '$."agentscope.lane"') END AS lane,
    CASE WHEN s.parent_span_id IS NULL OR s.stage = 'task' THEN s.service END AS service
FROM spans s LEFT JOIN kid k ON k.trace_id = s.trace_id AND k.span_id = s.span_id
)
SELECT r.trace_no, r.trace_id, r.span_id, r.name,
       -- low-cardinality strings as codes (no string object per row when fetched):
       -- stage as its position in the list below, kind only where the walk needs it
       coalesce(list_position(['task', 'agent', 'queue', 'context', 'inference', 'tool', 'env',
                               'memory'], r.stage), 0) AS stage_code,
       CASE WHEN r.kind IN ('producer', 'consumer') THEN r.kind END AS kind,
       r.start_ns, r.end_ns, r.own_cpu, r.own_wall, r.own_faults, r.child_cpu_ns, r.queue_s,
       r.model_s, r.server_local, r.loop, r.lane, r.service,
       coalesce(p.idx, -1) AS parent_idx
FROM rows r
LEFT JOIN rows p ON p.trace_key = r.trace_key AND p.span_id = r.parent_span_id
ORDER BY r.idx
