-- MCP servers (issue 11): one entry per tenant and name, holding how to reach it (the
-- `McpServerSpec` as JSON, never a secret value: credentials are named `${NAME}`),
-- AgentBreeder's fields, whether an admin enabled it (entries from project-scoped
-- config files start disabled) and the registry owner's per-tool overrides. Its tools
-- are registry tools (`tool_type = 'mcp'`), linked here so discover can synchronise them.
CREATE TABLE registry_mcp_servers (
    id              TEXT    NOT NULL PRIMARY KEY,
    tenant          TEXT    NOT NULL,
    name            TEXT    NOT NULL,
    spec            TEXT    NOT NULL,
    transport       TEXT    NOT NULL,
    endpoint        TEXT    NOT NULL,
    description     TEXT    NOT NULL,
    tags            TEXT    NOT NULL,
    team            TEXT,
    enabled         INTEGER NOT NULL CHECK (enabled = 0 OR enabled = 1),
    source          TEXT    NOT NULL,
    overrides       TEXT    NOT NULL,
    status          TEXT    NOT NULL,
    tool_count      INTEGER NOT NULL CHECK (tool_count >= 0),
    last_ping_at_ms INTEGER,
    last_error      TEXT,
    revision        INTEGER NOT NULL CHECK (revision >= 1),
    created_by      TEXT    NOT NULL,
    created_at_ms   INTEGER NOT NULL,
    updated_at_ms   INTEGER NOT NULL,
    UNIQUE (tenant, name)
) STRICT;

CREATE TABLE registry_mcp_server_tools (
    server_id TEXT NOT NULL REFERENCES registry_mcp_servers (id),
    tool_id   TEXT NOT NULL REFERENCES registry_tools (id),
    PRIMARY KEY (server_id, tool_id)
) STRICT, WITHOUT ROWID;
