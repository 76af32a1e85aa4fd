-- The rules of agentscope.records.span_problem, for the rows that DuckDB's read_json made of
-- our span files (store/loading.py): a row that passes them can be stored as it is; a file
-- with a row that does not goes to the per-line reader (formats/spanfile.py), which names
-- each bad line with its reason and loads the rest. Bad input is never stored: a value here
-- that the analysis could not compute with (an integer past what it adds up, a time that is
-- not epoch ns, a string where an object belongs) would fail every later analysis.
-- attrs/events/links are read as JSON, which DuckDB gives back minified: an object starts
-- with `{{` and a list with `[` (cheaper to test than json_type; a JSON string where an
-- object belongs stays a string, not its text). CASE, not OR: DuckDB then evaluates the
-- costly checks only for the rows that have attributes, events or links.
-- Nesting: a text of at most 2 x N bytes, or with at most N `[` and `{{`, nests at most N
-- levels (rows.MAX_DEPTH; + 2 for the event or link list and object around attributes):
-- text these cannot vouch for is measured by the Python reader (store/rows.py).
-- Filled by str.format (so braces are doubled): min_epoch_ns, max_epoch_ns, max_count,
-- max_depth, max_depth_2, list_depth, list_depth_2 (records.py, rows.py).
trace_id IS NOT NULL AND regexp_full_match(trace_id, '[0-9a-f]{{32}}')
AND trace_id <> '00000000000000000000000000000000'
AND span_id IS NOT NULL AND regexp_full_match(span_id, '[0-9a-f]{{16}}')
AND span_id <> '0000000000000000'
AND (parent_span_id IS NULL OR regexp_full_match(parent_span_id, '[0-9a-f]{{16}}'))
AND name IS NOT NULL
-- a start of 0 is a span with no start time; before 1973 another unit (s, ms, us)
AND start_ns >= {min_epoch_ns}
AND end_ns >= start_ns AND end_ns <= {max_epoch_ns}
AND kind IN ('internal', 'server', 'client', 'producer', 'consumer')
AND status IN ('unset', 'ok', 'error')
-- counts: 0 .. records.MAX_COUNT (pid, tid: any value of their column's type)
AND coalesce(children >= 0, true)
AND coalesce(thread_cpu_ns BETWEEN 0 AND {max_count}, true)
AND coalesce(child_cpu_ns BETWEEN 0 AND {max_count}, true)
AND coalesce(vcsw BETWEEN 0 AND {max_count}, true)
AND coalesce(ivcsw BETWEEN 0 AND {max_count}, true)
AND coalesce(minflt BETWEEN 0 AND {max_count}, true)
AND coalesce(majflt BETWEEN 0 AND {max_count}, true)
AND coalesce(child_majflt BETWEEN 0 AND {max_count}, true)
AND CASE WHEN attrs IS NULL OR attrs = '{{}}' THEN true
         ELSE starts_with(attrs, '{{')
              AND (strlen(attrs) <= {max_depth_2}
                   OR strlen(attrs) - strlen(replace(replace(attrs, '[', ''), '{{', ''))
                      <= {max_depth})
    END
-- events: {{"name": string, "time_ns": integer in range, "attrs": object or absent}}
AND CASE WHEN events IS NULL OR events = '[]' THEN true
         ELSE starts_with(events, '[')
              AND (strlen(events) <= {list_depth_2}
                   OR strlen(events) - strlen(replace(replace(events, '[', ''), '{{', ''))
                      <= {list_depth})
              AND coalesce(list_bool_and(list_transform(json_extract(events, '$[*]'), lambda e:
                  coalesce(json_type(e) = 'OBJECT' AND json_type(e, '$.name') = 'VARCHAR'
                           AND json_type(e, '$.time_ns') IN ('UBIGINT', 'BIGINT')
                           AND TRY_CAST(json_extract_string(e, '$.time_ns') AS BIGINT)
                               BETWEEN 0 AND {max_epoch_ns}
                           AND coalesce(json_type(e, '$.attrs') IN ('OBJECT', 'NULL'), true),
                           false))), true)
    END
-- links: {{"trace_id": string, "span_id": string, "attrs": object or absent}}
AND CASE WHEN links IS NULL OR links = '[]' THEN true
         ELSE starts_with(links, '[')
              AND (strlen(links) <= {list_depth_2}
                   OR strlen(links) - strlen(replace(replace(links, '[', ''), '{{', ''))
                      <= {list_depth})
              AND coalesce(list_bool_and(list_transform(json_extract(links, '$[*]'), lambda k:
                  coalesce(json_type(k) = 'OBJECT' AND json_type(k, '$.trace_id') = 'VARCHAR'
                           AND json_type(k, '$.span_id') = 'VARCHAR'
                           AND coalesce(json_type(k, '$.attrs') IN ('OBJECT', 'NULL'), true),
                           false))), true)
    END
