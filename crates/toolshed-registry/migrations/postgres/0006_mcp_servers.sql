-- MCP servers (issue 11): one entry per tenant and name, holding how to reach it (the
-- `McpServerSpec` as JSON, never a secret value: credentials are named `${NAME}`),
-- AgentBreeder's fields, whether an admin enabled it (entries from project-scoped
-- config files start disabled) and the registry owner's per-tool overrides. Its tools
-- are registry tools (`tool_type = 'mcp'`), linked here so discover can synchronise them.
CREATE TABLE registry_mcp_servers (
    id              TEXT COLLATE "C" NOT NULL PRIMARY KEY,
    tenant          TEXT COLLATE "C" NOT NULL,
    name            TEXT COLLATE "C" NOT NULL,
    spec            JSONB  NOT NULL,
    transport       TEXT   NOT NULL,
    endpoint        TEXT   NOT NULL,
    description     TEXT   NOT NULL,
    tags            JSONB  NOT NULL,
    team            TEXT,
    enabled         BIGINT NOT NULL CHECK (enabled = 0 OR enabled = 1),
    source          TEXT   NOT NULL,
    overrides       JSONB  NOT NULL,
    status          TEXT   NOT NULL,
    tool_count      BIGINT NOT NULL CHECK (tool_count >= 0),
    last_ping_at_ms BIGINT,
    last_error      TEXT,
    revision        BIGINT NOT NULL CHECK (revision >= 1),
    created_by      TEXT   NOT NULL,
    created_at_ms   BIGINT NOT NULL,
    updated_at_ms   BIGINT NOT NULL,
    UNIQUE (tenant, name)
);

CREATE TABLE registry_mcp_server_tools (
    server_id TEXT COLLATE "C" NOT NULL REFERENCES registry_mcp_servers (id),
    tool_id   TEXT COLLATE "C" NOT NULL REFERENCES registry_tools (id),
    PRIMARY KEY (server_id, tool_id)
);
