-- The journal schema, version 1: runs, their calls (keyed by run and ordinal), crumbs.
-- JSON is stored as TEXT: exactly what serde_json wrote, the same in both dialects.
-- Status lists are `=`/`OR` chains: SQLite evaluates `IN (…)` through a temporary index
-- built on every execution.
CREATE TABLE runs (
    id             TEXT    NOT NULL PRIMARY KEY,
    agent_id       TEXT    NOT NULL,
    session_id     TEXT    NOT NULL,
    principal      TEXT,
    tenant         TEXT,
    status         TEXT    NOT NULL
        CHECK (status = 'running' OR status = 'parked' OR status = 'completed'
               OR status = 'failed' OR status = 'cancelled'),
    budgets        TEXT    NOT NULL,
    driver         TEXT    NOT NULL,
    resumes        INTEGER NOT NULL DEFAULT 0,
    error          TEXT,
    next_crumb_seq INTEGER NOT NULL DEFAULT 0,
    created_at_ms  INTEGER NOT NULL,
    updated_at_ms  INTEGER NOT NULL
) STRICT;
CREATE INDEX runs_by_created ON runs (created_at_ms);
CREATE INDEX runs_by_status ON runs (status, created_at_ms);
CREATE INDEX runs_by_agent ON runs (agent_id, created_at_ms);
CREATE INDEX runs_by_tenant ON runs (tenant, created_at_ms);

CREATE TABLE calls (
    call_id       TEXT    NOT NULL PRIMARY KEY,
    run_id        TEXT    NOT NULL REFERENCES runs (id),
    ordinal       INTEGER NOT NULL CHECK (ordinal >= 0),
    tool_call_id  TEXT    NOT NULL,
    tool          TEXT    NOT NULL,
    args_hash     TEXT    NOT NULL,
    args          TEXT    NOT NULL,
    status        TEXT    NOT NULL
        CHECK (status = 'open' OR status = 'started' OR status = 'awaiting_approval'
               OR status = 'awaiting_answer' OR status = 'approved'
               OR status = 'completed' OR status = 'failed'),
    attempts      INTEGER NOT NULL DEFAULT 0,
    result        TEXT,
    error         TEXT,
    duration_ms   REAL,
    gate          TEXT,
    decision      TEXT,
    answer        TEXT,
    created_at_ms INTEGER NOT NULL,
    updated_at_ms INTEGER NOT NULL,
    UNIQUE (run_id, ordinal)
) STRICT;
CREATE INDEX calls_pending ON calls (run_id)
    WHERE (status = 'awaiting_approval' OR status = 'awaiting_answer');

CREATE TABLE crumbs (
    run_id TEXT    NOT NULL REFERENCES runs (id),
    seq    INTEGER NOT NULL,
    crumb  TEXT    NOT NULL,
    PRIMARY KEY (run_id, seq)
) STRICT, WITHOUT ROWID;
