-- The registry schema, version 1: tools (every revision kept), agents and the usage graph,
-- users, shared settings. Tables are prefixed `registry_` (they live beside the journal's).
CREATE TABLE registry_tools (
    id            TEXT    NOT NULL PRIMARY KEY,
    name          TEXT    NOT NULL,
    description   TEXT    NOT NULL,
    tool_type     TEXT    NOT NULL,
    source        TEXT    NOT NULL,
    status        TEXT    NOT NULL CHECK (status = 'active' OR status = 'deleted'),
    endpoint      TEXT,
    version       TEXT,
    revision      INTEGER NOT NULL CHECK (revision >= 1),
    definition    TEXT    NOT NULL,
    created_by    TEXT    NOT NULL,
    created_at_ms INTEGER NOT NULL,
    updated_at_ms INTEGER NOT NULL
) STRICT;
CREATE UNIQUE INDEX registry_tools_active_name ON registry_tools (name)
    WHERE status = 'active';
CREATE INDEX registry_tools_active_type ON registry_tools (tool_type, name)
    WHERE status = 'active';
CREATE INDEX registry_tools_active_source ON registry_tools (source, name)
    WHERE status = 'active';

CREATE TABLE registry_tool_versions (
    tool_id       TEXT    NOT NULL REFERENCES registry_tools (id),
    revision      INTEGER NOT NULL CHECK (revision >= 1),
    name          TEXT    NOT NULL,
    description   TEXT    NOT NULL,
    tool_type     TEXT    NOT NULL,
    source        TEXT    NOT NULL,
    status        TEXT    NOT NULL CHECK (status = 'active' OR status = 'deleted'),
    endpoint      TEXT,
    version       TEXT,
    definition    TEXT    NOT NULL,
    created_by    TEXT    NOT NULL,
    created_at_ms INTEGER NOT NULL,
    updated_at_ms INTEGER NOT NULL,
    PRIMARY KEY (tool_id, revision)
) STRICT;

CREATE TABLE registry_agents (
    id            TEXT    NOT NULL PRIMARY KEY,
    name          TEXT    NOT NULL UNIQUE,
    framework     TEXT    NOT NULL,
    status        TEXT    NOT NULL,
    definition    TEXT    NOT NULL,
    created_by    TEXT    NOT NULL,
    created_at_ms INTEGER NOT NULL,
    updated_at_ms INTEGER NOT NULL
) STRICT;

CREATE TABLE registry_agent_tools (
    agent_id TEXT NOT NULL REFERENCES registry_agents (id),
    tool_id  TEXT NOT NULL REFERENCES registry_tools (id),
    PRIMARY KEY (agent_id, tool_id)
) STRICT, WITHOUT ROWID;
CREATE INDEX registry_agent_tools_by_tool ON registry_agent_tools (tool_id, agent_id);

CREATE TABLE registry_users (
    username      TEXT    NOT NULL PRIMARY KEY,
    password_hash TEXT    NOT NULL,
    role          TEXT    NOT NULL,
    tenant        TEXT    NOT NULL,
    created_at_ms INTEGER NOT NULL,
    updated_at_ms INTEGER NOT NULL
) STRICT;

CREATE TABLE registry_settings (
    key   TEXT NOT NULL PRIMARY KEY,
    value TEXT NOT NULL
) STRICT;
