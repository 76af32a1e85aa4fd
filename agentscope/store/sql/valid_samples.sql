-- The rules of agentscope.records.sample_problem, for the rows that DuckDB's read_json made
-- of our sample files (store/loading.py; see valid_spans.sql). Filled by str.format:
-- max_epoch_ns (records.MAX_EPOCH_NS).
ts_ns BETWEEN 0 AND {max_epoch_ns}
AND metric IS NOT NULL AND metric <> '' AND source IS NOT NULL
-- (a number too large for a double reads as infinite)
AND coalesce(isfinite(value), true)
