-- Spans without agentscope.stage get one from their OpenTelemetry semantic conventions
-- (ARCHITECTURE §2), so traces from any OTel-instrumented agent can be analysed.
-- GenAI: gen_ai.operation.name; OpenInference: openinference.span.kind; then database,
-- HTTP/RPC client and messaging spans. Runs over the rows of one load ($file_ids).
UPDATE spans SET
    stage = derived.stage,
    stage_from = 'convention'
FROM (
    SELECT trace_id, span_id,
        CASE
            WHEN op IN ('chat', 'text_completion', 'generate_content', 'embeddings',
                        'call_llm', 'completion', 'embedding') THEN 'inference'
            WHEN op IN ('execute_tool', 'tool') THEN 'tool'
            WHEN op IN ('invoke_agent', 'create_agent', 'invoke_workflow') THEN 'agent'
            WHEN oi IN ('LLM', 'EMBEDDING') THEN 'inference'
            WHEN oi IN ('TOOL') THEN 'tool'
            WHEN oi IN ('AGENT') THEN 'agent'
            WHEN oi IN ('RETRIEVER', 'RERANKER') THEN 'context'
            WHEN json_exists(attrs, '$."db.system"') OR json_exists(attrs, '$."db.system.name"')
                THEN 'tool'
            WHEN json_exists(attrs, '$."messaging.system"') AND kind = 'consumer' THEN 'queue'
            WHEN json_exists(attrs, '$."messaging.system"') THEN 'tool'
            WHEN kind = 'client' AND (json_exists(attrs, '$."http.request.method"')
                                      OR json_exists(attrs, '$."http.method"')
                                      OR json_exists(attrs, '$."rpc.system"')) THEN 'tool'
        END AS stage
    FROM (
        SELECT trace_id, span_id, kind, attrs,
               lower(json_extract_string(attrs, '$."gen_ai.operation.name"')) AS op,
               upper(json_extract_string(attrs, '$."openinference.span.kind"')) AS oi
        FROM spans
        WHERE stage IS NULL AND file_id IN (SELECT unnest($file_ids))
    )
) AS derived
WHERE derived.stage IS NOT NULL
  AND spans.trace_id = derived.trace_id AND spans.span_id = derived.span_id
  AND spans.stage IS NULL;
