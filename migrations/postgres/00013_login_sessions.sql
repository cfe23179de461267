-- +goose Up
-- Browser logins are server-side records: the login cookie carries only the
-- record's secret id, so a login can be revoked (logout, sign out everywhere,
-- disable, password change or reset) and expires on the server whatever the
-- browser keeps. The id is the SHA-256 of the cookie's secret, so that a read
-- of this table does not hand out live logins. csrf_secret is the login's
-- CSRF token: it exists only with the login, so a token from before sign-in
-- or from another login is refused.
CREATE TABLE login_sessions (
    id           text PRIMARY KEY,
    user_id      text NOT NULL REFERENCES users(id),
    csrf_secret  text NOT NULL,
    user_agent   text NOT NULL DEFAULT '',
    address      text NOT NULL DEFAULT '',
    created_at   timestamptz NOT NULL,
    last_seen_at timestamptz NOT NULL,
    expires_at   timestamptz NOT NULL,
    revoked_at   timestamptz NULL
);
-- Revoking every login of a user, and listing a user's live logins.
CREATE INDEX login_sessions_user_idx ON login_sessions (user_id) WHERE revoked_at IS NULL;
-- Purging ended logins.
CREATE INDEX login_sessions_expires_idx ON login_sessions (expires_at);

-- Failed-login throttling, shared by every server process on the database:
-- one row per key ("pair:EMAIL ADDRESS" or "address:ADDRESS") with the
-- failures since the key was last quiet for a window, and until when the key
-- must wait (exponential in the failures beyond the free ones).
CREATE TABLE login_throttle (
    key             text PRIMARY KEY,
    failures        integer NOT NULL,
    last_failure_at timestamptz NOT NULL,
    blocked_until   timestamptz NOT NULL
);
CREATE INDEX login_throttle_last_failure_idx ON login_throttle (last_failure_at);

-- The first admin's generated password (and an admin's reset) was seen by
-- someone else: the user must choose their own at the next sign-in.
ALTER TABLE users ADD COLUMN must_change_password boolean NOT NULL DEFAULT false;

-- +goose Down
ALTER TABLE users DROP COLUMN must_change_password;
DROP TABLE login_throttle;
DROP TABLE login_sessions;
