-- Every span of the traces in the registered table `wanted_traces(trace_id)`, for drawing
-- their timelines: (trace_id, span_id, parent, name, stage, start_ns, end_ns, host, status),
-- parents before children where they start together.
SELECT s.trace_id, s.span_id, s.parent_span_id, s.name, s.stage, s.start_ns, s.end_ns, s.host,
       s.status
FROM spans s JOIN wanted_traces w USING (trace_id)
ORDER BY s.trace_id, s.start_ns, s.end_ns DESC
