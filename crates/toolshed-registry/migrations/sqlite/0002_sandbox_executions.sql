-- Every run of POST /api/v1/tools/sandbox/execute, per tenant: who ran what (the code's
-- hash, never the code), on which input (capped), and the answer as it was given.
CREATE TABLE registry_sandbox_executions (
    id            TEXT    NOT NULL PRIMARY KEY,
    tenant        TEXT    NOT NULL,
    created_by    TEXT    NOT NULL,
    tool_id       TEXT,
    language      TEXT    NOT NULL,
    code_sha256   TEXT    NOT NULL,
    code_bytes    INTEGER NOT NULL,
    input         TEXT,
    input_bytes   INTEGER NOT NULL,
    exit_code     INTEGER,
    timed_out     INTEGER NOT NULL,
    duration_ms   INTEGER NOT NULL,
    result        TEXT    NOT NULL,
    created_at_ms INTEGER NOT NULL
) STRICT;
CREATE INDEX registry_sandbox_executions_by_tenant
    ON registry_sandbox_executions (tenant, created_at_ms, id);
