-- Each login session's live refresh token: a refresh spends the presented token (its
-- id must be the one stored here) and stores the next one's id, in one statement, so a
-- refresh token is good for one refresh. A spent one presented again ends the session
-- (the reuse detection of OAuth 2.1): its row is deleted and its id revoked in
-- `registry_revoked_sessions`. A row is kept while its refresh token may be alive, then
-- pruned by a later login; a logout deletes it.
CREATE TABLE registry_sessions (
    session_id    TEXT COLLATE "C" NOT NULL PRIMARY KEY,
    username      TEXT COLLATE "C" NOT NULL,
    refresh_id    TEXT COLLATE "C" NOT NULL,
    expires_at_ms BIGINT NOT NULL
);
CREATE INDEX registry_sessions_expiry ON registry_sessions (expires_at_ms);
