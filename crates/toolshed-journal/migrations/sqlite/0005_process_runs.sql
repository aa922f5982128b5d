-- Background runs of agents' named processes (`run_process` / `check_run`): one row per
-- run, written by its starter and by whoever checks it; the supervisor's own files in
-- `state_dir` say how the process is doing.
CREATE TABLE process_runs (
    id TEXT NOT NULL PRIMARY KEY,
    tenant TEXT NOT NULL,
    agent TEXT NOT NULL,
    run_id TEXT NOT NULL,
    session_id TEXT NOT NULL,
    process TEXT NOT NULL,
    args TEXT NOT NULL,
    state_dir TEXT NOT NULL,
    supervisor_pid INTEGER,
    supervisor_start INTEGER,
    status TEXT NOT NULL,
    exit_code INTEGER,
    signal INTEGER,
    message TEXT,
    created_at INTEGER NOT NULL,
    started_at INTEGER,
    ended_at INTEGER
) STRICT;
CREATE INDEX process_runs_by_owner ON process_runs (tenant, agent, created_at);
