-- The journal schema, version 1: runs, their calls (keyed by run and ordinal), crumbs.
-- JSON is stored as TEXT: exactly what serde_json wrote, the same in both dialects (and
-- `jsonb` refuses `\u0000`, which tool output may contain). Unlike the SQLite schema there
-- are no `CHECK` constraints on statuses: PostgreSQL rebuilds every CHECK expression from
-- its stored text on each INSERT and UPDATE, about a quarter of a journal statement's
-- cost; statuses are only ever written from the Rust enums.
CREATE TABLE runs (
    seq            BIGINT  GENERATED ALWAYS AS IDENTITY,
    id             TEXT    NOT NULL PRIMARY KEY,
    agent_id       TEXT    NOT NULL,
    session_id     TEXT    NOT NULL,
    principal      TEXT,
    tenant         TEXT,
    status         TEXT    NOT NULL,
    budgets        TEXT    NOT NULL,
    driver         TEXT    NOT NULL,
    resumes        BIGINT  NOT NULL DEFAULT 0,
    error          TEXT,
    next_crumb_seq BIGINT  NOT NULL DEFAULT 0,
    created_at_ms  BIGINT  NOT NULL,
    updated_at_ms  BIGINT  NOT NULL
);
CREATE INDEX runs_by_created ON runs (created_at_ms DESC, seq DESC);
CREATE INDEX runs_by_status ON runs (status, created_at_ms DESC, seq DESC);
CREATE INDEX runs_by_agent ON runs (agent_id, created_at_ms DESC, seq DESC);
CREATE INDEX runs_by_tenant ON runs (tenant, created_at_ms DESC, seq DESC);

CREATE TABLE calls (
    call_id       TEXT    NOT NULL PRIMARY KEY,
    run_id        TEXT    NOT NULL REFERENCES runs (id),
    ordinal       BIGINT  NOT NULL,
    tool_call_id  TEXT    NOT NULL,
    tool          TEXT    NOT NULL,
    args_hash     TEXT    NOT NULL,
    args          TEXT    NOT NULL,
    status        TEXT    NOT NULL,
    attempts      BIGINT  NOT NULL DEFAULT 0,
    result        TEXT,
    error         TEXT,
    duration_ms   DOUBLE PRECISION,
    gate          TEXT,
    decision      TEXT,
    answer        TEXT,
    created_at_ms BIGINT  NOT NULL,
    updated_at_ms BIGINT  NOT NULL,
    UNIQUE (run_id, ordinal)
);
CREATE INDEX calls_pending ON calls (run_id)
    WHERE status IN ('awaiting_approval', 'awaiting_answer');

CREATE TABLE crumbs (
    run_id TEXT   NOT NULL REFERENCES runs (id),
    seq    BIGINT NOT NULL,
    crumb  TEXT   NOT NULL,
    PRIMARY KEY (run_id, seq)
);
