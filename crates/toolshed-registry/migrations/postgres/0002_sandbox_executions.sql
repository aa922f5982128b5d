-- Every run of POST /api/v1/tools/sandbox/execute, per tenant: who ran what (the code's
-- hash, never the code), on which input (capped), and the answer as it was given.
CREATE TABLE registry_sandbox_executions (
    id            TEXT COLLATE "C" NOT NULL PRIMARY KEY,
    tenant        TEXT COLLATE "C" NOT NULL,
    created_by    TEXT   NOT NULL,
    tool_id       TEXT,
    language      TEXT   NOT NULL,
    code_sha256   TEXT   NOT NULL,
    code_bytes    BIGINT NOT NULL,
    input         JSONB,
    input_bytes   BIGINT NOT NULL,
    exit_code     BIGINT,
    timed_out     BIGINT NOT NULL,
    duration_ms   BIGINT NOT NULL,
    result        JSONB  NOT NULL,
    created_at_ms BIGINT NOT NULL
);
CREATE INDEX registry_sandbox_executions_by_tenant
    ON registry_sandbox_executions (tenant, created_at_ms, id);
