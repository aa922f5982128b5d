-- The registry schema, version 1: tools (every revision kept), agents and the usage graph,
-- users, shared settings. Tables are prefixed `registry_` (they live beside the journal's).
CREATE TABLE registry_tools (
    id            TEXT COLLATE "C" NOT NULL PRIMARY KEY,
    name          TEXT COLLATE "C" NOT NULL,
    description   TEXT   NOT NULL,
    tool_type     TEXT COLLATE "C" NOT NULL,
    source        TEXT COLLATE "C" NOT NULL,
    status        TEXT   NOT NULL CHECK (status = 'active' OR status = 'deleted'),
    endpoint      TEXT,
    version       TEXT,
    revision      BIGINT NOT NULL CHECK (revision >= 1),
    definition    JSONB  NOT NULL,
    created_by    TEXT   NOT NULL,
    created_at_ms BIGINT NOT NULL,
    updated_at_ms BIGINT NOT NULL
);
CREATE UNIQUE INDEX registry_tools_active_name ON registry_tools (name)
    WHERE status = 'active';
CREATE INDEX registry_tools_active_type ON registry_tools (tool_type, name)
    WHERE status = 'active';
CREATE INDEX registry_tools_active_source ON registry_tools (source, name)
    WHERE status = 'active';

CREATE TABLE registry_tool_versions (
    tool_id       TEXT COLLATE "C" NOT NULL REFERENCES registry_tools (id),
    revision      BIGINT NOT NULL CHECK (revision >= 1),
    name          TEXT COLLATE "C" NOT NULL,
    description   TEXT   NOT NULL,
    tool_type     TEXT COLLATE "C" NOT NULL,
    source        TEXT COLLATE "C" NOT NULL,
    status        TEXT   NOT NULL CHECK (status = 'active' OR status = 'deleted'),
    endpoint      TEXT,
    version       TEXT,
    definition    JSONB  NOT NULL,
    created_by    TEXT   NOT NULL,
    created_at_ms BIGINT NOT NULL,
    updated_at_ms BIGINT NOT NULL,
    PRIMARY KEY (tool_id, revision)
);

CREATE TABLE registry_agents (
    id            TEXT COLLATE "C" NOT NULL PRIMARY KEY,
    name          TEXT COLLATE "C" NOT NULL UNIQUE,
    framework     TEXT   NOT NULL,
    status        TEXT   NOT NULL,
    definition    JSONB  NOT NULL,
    created_by    TEXT   NOT NULL,
    created_at_ms BIGINT NOT NULL,
    updated_at_ms BIGINT NOT NULL
);

CREATE TABLE registry_agent_tools (
    agent_id TEXT COLLATE "C" NOT NULL REFERENCES registry_agents (id),
    tool_id  TEXT COLLATE "C" NOT NULL REFERENCES registry_tools (id),
    PRIMARY KEY (agent_id, tool_id)
);
CREATE INDEX registry_agent_tools_by_tool ON registry_agent_tools (tool_id, agent_id);

CREATE TABLE registry_users (
    username      TEXT COLLATE "C" NOT NULL PRIMARY KEY,
    password_hash TEXT   NOT NULL,
    role          TEXT   NOT NULL,
    tenant        TEXT   NOT NULL,
    created_at_ms BIGINT NOT NULL,
    updated_at_ms BIGINT NOT NULL
);

CREATE TABLE registry_settings (
    key   TEXT NOT NULL PRIMARY KEY,
    value TEXT NOT NULL
);
