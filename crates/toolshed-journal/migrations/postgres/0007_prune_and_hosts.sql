-- A prune removes the attachments and background runs of the runs it removes, and the
-- attachments nothing keeps any more. It asks which attachments a run has, which old
-- attachments there are, and whether any attachment still names a blob (its file goes
-- when none does): each question an index lookup, not a scan. (Whether a session has a
-- live run is read through `runs_by_status`: runs are not indexed by session, which
-- would cost every run's insert.)
CREATE INDEX attachments_by_run_id ON attachments (run_id);
CREATE INDEX attachments_by_created ON attachments (created_at_ms);
CREATE INDEX attachments_by_blob ON attachments (blob_uri);
-- The machine a background run's supervisor runs on (its host name, and the boot it
-- started in): only a check on that machine can tell whether the supervisor still
-- runs, and a check after that machine restarted knows it does not. Older rows have
-- neither (NULL), and are checked where they are read, as before.
ALTER TABLE process_runs ADD COLUMN host TEXT;
ALTER TABLE process_runs ADD COLUMN boot_id TEXT;
