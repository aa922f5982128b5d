-- Version 3: pruning finds the finished runs that ended before a cutoff by status and
-- last change, oldest first, without reading the rest of the journal.
CREATE INDEX runs_by_status_updated ON runs (status, updated_at_ms);
