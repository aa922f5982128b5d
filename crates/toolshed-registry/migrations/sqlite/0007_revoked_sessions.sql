-- Sessions ended by a logout (the console issue): every token carries the session id of
-- its login, shared by the access and refresh tokens of that login and of every refresh
-- after it; a token whose session is listed here is refused by every server sharing the
-- database (read with the user's token generation, through the same short cache). A
-- row is kept until every token of its session has expired, then pruned by a later
-- logout: the table holds the sessions ended within one refresh-token lifetime.
CREATE TABLE registry_revoked_sessions (
    session_id    TEXT    NOT NULL PRIMARY KEY,
    username      TEXT    NOT NULL,
    expires_at_ms INTEGER NOT NULL
) STRICT;
CREATE INDEX registry_revoked_sessions_user ON registry_revoked_sessions (username, expires_at_ms);
CREATE INDEX registry_revoked_sessions_expiry ON registry_revoked_sessions (expires_at_ms);
