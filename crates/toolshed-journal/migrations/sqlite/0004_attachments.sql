-- Attachments: files attached to a run or a session, parsed once at upload. The file
-- itself is in the blob store (`blob_uri`); its pages are here, one row each, so one
-- page is read without parsing the file again. `tenant` is '' for uploads without one.
CREATE TABLE attachments (
    id TEXT NOT NULL PRIMARY KEY,
    tenant TEXT NOT NULL,
    run_id TEXT,
    session_id TEXT,
    filename TEXT NOT NULL,
    kind TEXT NOT NULL,
    unit TEXT NOT NULL,
    media_type TEXT NOT NULL,
    size_bytes INTEGER NOT NULL,
    sha256 TEXT NOT NULL,
    blob_uri TEXT NOT NULL,
    page_count INTEGER NOT NULL,
    total_length INTEGER NOT NULL,
    uploaded_by TEXT,
    created_at_ms INTEGER NOT NULL,
    CHECK (run_id IS NOT NULL OR session_id IS NOT NULL)
) STRICT;
CREATE INDEX attachments_by_run ON attachments (tenant, run_id);
CREATE INDEX attachments_by_session ON attachments (tenant, session_id);
-- `start` is the page's offset in the attachment's unit (characters or rows).
CREATE TABLE attachment_pages (
    attachment_id TEXT NOT NULL REFERENCES attachments (id) ON DELETE CASCADE,
    page INTEGER NOT NULL,
    start INTEGER NOT NULL,
    length INTEGER NOT NULL,
    sheet TEXT,
    content TEXT NOT NULL,
    PRIMARY KEY (attachment_id, page)
) STRICT;
CREATE INDEX attachment_pages_by_start ON attachment_pages (attachment_id, start);
