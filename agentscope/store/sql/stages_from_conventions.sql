-- Spans without agentscope.stage get one from the conventions their instrumentation follows
-- (ARCHITECTURE §2), so traces from any OTel-instrumented agent, or imported from another
-- tool, can be analysed. The rules are one table, agentscope.semconv.STAGE_RULES (shown with
-- their sources in docs/analysis.md), checked in order: the first that matches gives the
-- stage. agentscope.semconv.stage_sql() fills the three placeholders in braces from it: the
-- JSON paths of the attributes the rules read (one parse per span), their values lower-cased
-- (one column each, named by the attribute), and the rules as a CASE over those columns and
-- the span kind.
-- agentscope.semconv.stage_for() is the same table in Python; a test holds them together.
-- Runs over the rows of one load ($file_ids).
UPDATE spans SET
    stage = derived.stage,
    stage_from = 'convention'
FROM (
    SELECT trace_id, span_id,
        {stage_case} AS stage
    FROM (
        SELECT trace_id, span_id, kind, {stage_attributes}
        FROM (
            SELECT trace_id, span_id, kind, json_extract_string(attrs, {stage_paths}) AS v
            FROM spans
            WHERE stage IS NULL AND file_id IN (SELECT unnest($file_ids))
        )
    )
) AS derived
WHERE derived.stage IS NOT NULL
  AND spans.trace_id = derived.trace_id AND spans.span_id = derived.span_id
  AND spans.stage IS NULL;
