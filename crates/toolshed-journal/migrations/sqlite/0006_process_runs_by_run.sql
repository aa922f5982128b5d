-- A run's live background runs are looked up by run id (a workspace is kept while one
-- of its run's processes may still use it); without this index that is a full scan.
CREATE INDEX process_runs_by_run ON process_runs (run_id);
