-- The store's tables (ARCHITECTURE §5). Stable names: spans, samples; views tasks and
-- critical_path are created by the analyzers (analysis.sql). Everything else is internal.

CREATE TABLE IF NOT EXISTS spans (
    trace_id        VARCHAR NOT NULL,
    span_id         VARCHAR NOT NULL,
    parent_span_id  VARCHAR,
    name            VARCHAR,
    stage           VARCHAR,   -- agentscope.stage, or derived from conventions (stage_from)
    kind            VARCHAR,
    start_ns        BIGINT NOT NULL,
    end_ns          BIGINT NOT NULL,
    status          VARCHAR,
    status_message  VARCHAR,
    service         VARCHAR,
    host            VARCHAR,
    pid             INTEGER,
    tid             BIGINT,
    thread_cpu_ns   BIGINT,
    child_cpu_ns    BIGINT,
    children        INTEGER,
    vcsw            BIGINT,
    ivcsw           BIGINT,
    minflt          BIGINT,
    majflt          BIGINT,
    child_majflt    BIGINT,
    attrs           VARCHAR,  -- JSON text
    events          VARCHAR,  -- JSON text
    links           VARCHAR,  -- JSON text
    stage_from      VARCHAR,   -- 'agentscope' | 'convention' | NULL (unknown)
    file_id         INTEGER    -- loaded_files.file_id it came from
);

CREATE TABLE IF NOT EXISTS samples (
    ts_ns   BIGINT NOT NULL,
    host    VARCHAR,
    pid     INTEGER,
    source  VARCHAR,
    device  VARCHAR,
    metric  VARCHAR NOT NULL,
    value   DOUBLE,
    file_id INTEGER
);

CREATE TABLE IF NOT EXISTS loaded_files (
    file_id      INTEGER PRIMARY KEY,
    path         VARCHAR UNIQUE NOT NULL,
    format       VARCHAR NOT NULL,   -- spans | samples | otlp | otlp-lines
    loaded_bytes BIGINT NOT NULL,    -- complete lines (or the whole file) loaded so far
    loaded_lines BIGINT NOT NULL,
    records      BIGINT NOT NULL,
    problems     BIGINT NOT NULL,
    loaded_at    TIMESTAMP DEFAULT current_timestamp
);

CREATE TABLE IF NOT EXISTS load_problems (
    path     VARCHAR,
    line     BIGINT,
    span_id  VARCHAR,
    reason   VARCHAR,
    torn     BOOLEAN
);

-- what the last load saw of each file (store/loading.py): its size and modification time,
-- and a hash of the end of what was loaded, to tell a file appended to from one rewritten
-- (a bad line fixed by hand: the file is read again from its start). Added to stores made
-- before them; NULL there until the file is loaded again.
ALTER TABLE loaded_files ADD COLUMN IF NOT EXISTS size BIGINT;
ALTER TABLE loaded_files ADD COLUMN IF NOT EXISTS mtime_ns BIGINT;
ALTER TABLE loaded_files ADD COLUMN IF NOT EXISTS tail_hash VARCHAR;

-- one row each time a load forgets what a file gave before (a rewritten file read again,
-- store/loading.py): an incremental analysis (Store.marks) tells from it that rows were
-- taken out, which row ids alone cannot show (a checkpoint after a large DELETE renumbers them)
CREATE TABLE IF NOT EXISTS forgotten (
    file_id      INTEGER,
    forgotten_at TIMESTAMP DEFAULT current_timestamp
);
