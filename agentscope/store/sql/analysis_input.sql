-- What the analyzers read of each span: ids, times, accounting, and the few attributes that
-- are evidence. Ordered by trace so each trace is one contiguous run of rows.
SELECT
    trace_id, span_id, parent_span_id, name, stage, kind, start_ns, end_ns, pid, tid,
    thread_cpu_ns, child_cpu_ns, majflt, child_majflt,
    TRY_CAST(json_extract_string(attrs, '$."gen_ai.latency.time_in_queue"') AS DOUBLE) AS queue_s,
    nullif(coalesce(TRY_CAST(json_extract_string(attrs, '$."gen_ai.latency.time_in_model_prefill"') AS DOUBLE), 0)
         + coalesce(TRY_CAST(json_extract_string(attrs, '$."gen_ai.latency.time_in_model_decode"') AS DOUBLE), 0), 0) AS model_s,
    json_extract_string(attrs, '$."server.address"') AS server,
    coalesce(json_extract_string(attrs, '$."agentscope.cpu.scope"') = 'loop', false) AS loop,
    json_extract_string(attrs, '$."agentscope.lane"') AS lane,
    service
FROM spans
ORDER BY trace_id, start_ns, span_id
