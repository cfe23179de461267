-- +goose Up
-- Sessions are the projection of the event log: one row per session holding the
-- latest valid state, so the console and the API read it in one indexed lookup.
CREATE TABLE sessions (
    id            text PRIMARY KEY,
    parent_id     text NULL REFERENCES sessions(id),
    ticket_ref    text NOT NULL DEFAULT '',
    goal          text NOT NULL,
    status        text NOT NULL,
    priority      integer NOT NULL DEFAULT 3,
    state_version bigint NOT NULL,
    current_step  text NOT NULL DEFAULT '',
    queue         text NOT NULL DEFAULT '',
    assignee      text NOT NULL DEFAULT '',
    -- Canonical JSON of models.State. Stored as text, not jsonb, because verify
    -- compares it byte for byte with the replayed state.
    state         text NOT NULL,
    last_hash     text NOT NULL,
    escalated_at  timestamptz NULL,
    created_at    timestamptz NOT NULL,
    updated_at    timestamptz NOT NULL
);
CREATE INDEX sessions_status_priority_created_idx ON sessions (status, priority, created_at, id);
CREATE INDEX sessions_ticket_ref_idx ON sessions (ticket_ref);
CREATE INDEX sessions_parent_idx ON sessions (parent_id) WHERE parent_id IS NOT NULL;
CREATE INDEX sessions_created_idx ON sessions (created_at, id);

-- The append-only, hash-chained log; the source of truth.
CREATE TABLE events (
    id              text PRIMARY KEY,
    session_id      text NOT NULL REFERENCES sessions(id),
    seq             bigint NOT NULL,
    type            text NOT NULL,
    actor           text NOT NULL,
    version_before  bigint NOT NULL,
    version_after   bigint NOT NULL,
    payload         text NOT NULL,
    idempotency_key text NULL,
    prev_hash       text NOT NULL,
    hash            text NOT NULL,
    created_at      timestamptz NOT NULL,
    CONSTRAINT events_session_seq_key UNIQUE (session_id, seq)
);
CREATE INDEX events_created_idx ON events (created_at, id);
CREATE INDEX events_actor_idx ON events (actor, created_at, id);
CREATE INDEX events_type_idx ON events (type, created_at, id);

-- One queued unit of work for a step of a session. Written only in the same
-- transaction as the session event that creates, leases, retries or ends it.
CREATE TABLE delegations (
    id               text PRIMARY KEY,
    session_id       text NOT NULL REFERENCES sessions(id),
    queue            text NOT NULL,
    step             text NOT NULL,
    instructions     text NOT NULL DEFAULT '',
    status           text NOT NULL,
    priority         integer NOT NULL DEFAULT 3,
    attempt          integer NOT NULL,
    max_attempts     integer NOT NULL,
    lease_seconds    integer NOT NULL,
    lease_token      text NULL,
    leased_by        text NOT NULL DEFAULT '',
    lease_expires_at timestamptz NULL,
    available_at     timestamptz NOT NULL,
    created_at       timestamptz NOT NULL,
    updated_at       timestamptz NOT NULL
);
CREATE INDEX delegations_claim_idx ON delegations (queue, priority, available_at, id) WHERE status = 'queued';
CREATE INDEX delegations_expiry_idx ON delegations (lease_expires_at) WHERE status = 'leased';
CREATE INDEX delegations_session_idx ON delegations (session_id);

-- First outcome of every command sent with an idempotency key, per caller.
CREATE TABLE idempotency_keys (
    scope       text NOT NULL,
    key         text NOT NULL,
    fingerprint text NOT NULL,
    outcome     text NOT NULL,
    created_at  timestamptz NOT NULL,
    PRIMARY KEY (scope, key)
);

CREATE TABLE users (
    id            text PRIMARY KEY,
    email         text NOT NULL UNIQUE,
    name          text NOT NULL,
    role          text NOT NULL,
    password_hash text NOT NULL,
    disabled      boolean NOT NULL DEFAULT false,
    created_at    timestamptz NOT NULL,
    updated_at    timestamptz NOT NULL
);

-- API tokens: only the SHA-256 of the secret is stored.
CREATE TABLE api_tokens (
    id           text PRIMARY KEY,
    name         text NOT NULL,
    role         text NOT NULL,
    token_hash   text NOT NULL UNIQUE,
    created_at   timestamptz NOT NULL,
    last_used_at timestamptz NULL,
    revoked_at   timestamptz NULL
);

-- +goose Down
DROP TABLE api_tokens;
DROP TABLE users;
DROP TABLE idempotency_keys;
DROP TABLE delegations;
DROP TABLE events;
DROP TABLE sessions;
