-- Uploaded tool code (issue 10): each archive stored once under its SHA-256, and the
-- archive each tool revision runs. Revisions are never rewritten, so neither is this.
-- The archive is kept as base64 text: the store's parameters have no bytes type.
CREATE TABLE registry_code (
    sha256        TEXT    NOT NULL PRIMARY KEY,
    size_bytes    INTEGER NOT NULL CHECK (size_bytes >= 0),
    files         INTEGER NOT NULL CHECK (files >= 0),
    archive       TEXT    NOT NULL,
    created_at_ms INTEGER NOT NULL
) STRICT;

CREATE TABLE registry_tool_code (
    tool_id  TEXT    NOT NULL REFERENCES registry_tools (id),
    revision INTEGER NOT NULL CHECK (revision >= 1),
    sha256   TEXT    NOT NULL REFERENCES registry_code (sha256),
    PRIMARY KEY (tool_id, revision)
) STRICT, WITHOUT ROWID;
