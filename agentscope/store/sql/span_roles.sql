-- What a what-if prediction reads of each span beyond analysis_input.sql, in the same order
-- (idx: position in (trace_id, start_ns, span_id) order): the service that emitted it, and
-- the server queue it names (agentscope.queue.resource: a request waiting for that server's
-- slots; agentscope.queue.held_by: the traces whose requests held the slots meanwhile, a JSON
-- list).
SELECT
    row_number() OVER (ORDER BY trace_id, start_ns, span_id) - 1 AS idx,
    service,
    CASE WHEN attrs IS NULL OR attrs = '{}' THEN NULL
         ELSE json_extract_string(attrs, '$."agentscope.queue.resource"') END AS queue_resource,
    CASE WHEN attrs IS NULL OR attrs = '{}' THEN NULL
         ELSE json_extract(attrs, '$."agentscope.queue.held_by"')::VARCHAR END AS held_by
FROM spans
