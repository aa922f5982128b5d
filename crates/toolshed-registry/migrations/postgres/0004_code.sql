-- Uploaded tool code (issue 10): each archive stored once under its SHA-256, and the
-- archive each tool revision runs. Revisions are never rewritten, so neither is this.
-- The archive is kept as base64 text: the store's parameters have no bytes type.
CREATE TABLE registry_code (
    sha256        TEXT COLLATE "C" NOT NULL PRIMARY KEY,
    size_bytes    BIGINT NOT NULL CHECK (size_bytes >= 0),
    files         BIGINT NOT NULL CHECK (files >= 0),
    archive       TEXT   NOT NULL,
    created_at_ms BIGINT NOT NULL
);

CREATE TABLE registry_tool_code (
    tool_id  TEXT COLLATE "C" NOT NULL REFERENCES registry_tools (id),
    revision BIGINT NOT NULL CHECK (revision >= 1),
    sha256   TEXT COLLATE "C" NOT NULL REFERENCES registry_code (sha256),
    PRIMARY KEY (tool_id, revision)
);
