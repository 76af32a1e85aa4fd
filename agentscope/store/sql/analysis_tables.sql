-- Analysis results, replaced on every analysis, and the stable views over them
-- (ARCHITECTURE §5): tasks (one row per task, with its evidence in words) and critical_path
-- (one row per section, with its class, confidence and class shares; the words for every
-- section are in the JSON report).
CREATE OR REPLACE TABLE task_results (
    trace_id        VARCHAR,
    name            VARCHAR,
    lane            VARCHAR,
    service         VARCHAR,
    start_ns        BIGINT,
    duration_ns     BIGINT,
    bottleneck      VARCHAR,
    confidence      DOUBLE,
    measured_share  DOUBLE,
    share_gpu       DOUBLE,
    share_cpu       DOUBLE,
    share_memory    DOUBLE,
    share_io        DOUBLE,
    share_queue     DOUBLE,
    share_untraced  DOUBLE,
    orchestration_ns BIGINT,
    spans           INTEGER,
    evidence        JSON,
    -- the rest of each task's result, for the analysis restored from the store (Store.saved_results)
    duplicates      BIGINT,
    off_path        BIGINT,
    orphans         BIGINT,
    root_span_id    VARCHAR,
    assumed_gpu     DOUBLE,
    assumed_cpu     DOUBLE,
    assumed_memory  DOUBLE,
    assumed_io      DOUBLE,
    assumed_queue   DOUBLE,
    assumed_untraced DOUBLE,
    timeout_ns      BIGINT,
    retry_ns        BIGINT,
    orphan_roots    BIGINT
);
CREATE OR REPLACE TABLE cp_sections (
    trace_id    VARCHAR,
    seq         INTEGER,
    span_id     VARCHAR,
    name        VARCHAR,
    stage       VARCHAR,
    start_ns    BIGINT,
    end_ns      BIGINT,
    class       VARCHAR,
    confidence  DOUBLE,
    basis       VARCHAR,
    share_gpu   DOUBLE,
    share_cpu   DOUBLE,
    share_memory DOUBLE,
    share_io    DOUBLE,
    share_queue DOUBLE,
    share_untraced DOUBLE,
    assumed     DOUBLE,   -- the part of the section whose class rests on a label or assumption
    assumed_cls TINYINT   -- ... and that class, a position in CLASSES
);
CREATE OR REPLACE VIEW tasks AS
    SELECT trace_id, name, lane, service, make_timestamp(start_ns // 1000) AS start,
           duration_ns / 1e9 AS duration_s, bottleneck, confidence, measured_share,
           share_gpu, share_cpu, share_memory, share_io, share_queue, share_untraced,
           orchestration_ns / 1e9 AS orchestration_s, spans, evidence
    FROM task_results;
CREATE OR REPLACE VIEW critical_path AS
    SELECT c.trace_id, c.seq, c.span_id, c.name, c.stage,
           (c.start_ns - t.start_ns) / 1e9 AS start_s, (c.end_ns - t.start_ns) / 1e9 AS end_s,
           (c.end_ns - c.start_ns) / 1e9 AS duration_s, c.class, c.confidence, c.basis,
           c.share_gpu, c.share_cpu, c.share_memory, c.share_io, c.share_queue,
           c.share_untraced
    FROM cp_sections c JOIN task_results t USING (trace_id);
