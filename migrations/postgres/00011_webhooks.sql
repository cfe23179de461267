-- +goose Up
-- Webhooks (API.md "Webhooks"): subscriptions that receive committed events,
-- signed per the Standard Webhooks specification. The secret is kept in
-- clear because every delivery is signed with it (an HMAC key cannot be
-- hashed like a token); old_secret also signs during a rotation's grace.
-- cursor_pos is the feed position (events.feed_pos) up to which events were
-- examined and their deliveries enqueued; it moves only in the transaction
-- that inserts those deliveries.
CREATE TABLE webhooks (
    id                    text PRIMARY KEY,
    url                   text NOT NULL,
    -- JSON array of event types; [] means every type.
    types                 text NOT NULL,
    description           text NOT NULL DEFAULT '',
    secret                text NOT NULL,
    old_secret            text NULL,
    old_secret_expires_at timestamptz NULL,
    cursor_pos            bigint NOT NULL,
    created_by            text NOT NULL,
    created_at            timestamptz NOT NULL
);
CREATE INDEX webhooks_created_idx ON webhooks (created_at, id);

-- One row per (webhook, event): the delivery's state machine
-- pending -> sending (claimed, leased) -> delivered | pending (retry) | failed.
CREATE TABLE webhook_deliveries (
    webhook_id       text NOT NULL REFERENCES webhooks(id) ON DELETE CASCADE,
    event_id         text NOT NULL,
    session_id       text NOT NULL,
    seq              bigint NOT NULL,
    feed_pos         bigint NOT NULL,
    status           text NOT NULL,
    attempt          integer NOT NULL DEFAULT 0,
    status_code      integer NULL,
    error            text NOT NULL DEFAULT '',
    next_attempt_at  timestamptz NULL,
    -- Start of the current delivery effort (enqueue or redeliver): retries
    -- stop WebhookPolicy.GiveUpAfter after it.
    queued_at        timestamptz NOT NULL,
    lease_token      text NULL,
    lease_expires_at timestamptz NULL,
    delivered_at     timestamptz NULL,
    created_at       timestamptz NOT NULL,
    updated_at       timestamptz NOT NULL,
    PRIMARY KEY (webhook_id, event_id)
);
-- Due deliveries, for the claim; partial so it stays as small as the backlog.
CREATE INDEX webhook_deliveries_due_idx ON webhook_deliveries (next_attempt_at, feed_pos) WHERE status = 'pending';
-- Per-session order: is an earlier delivery of the session still open?
CREATE INDEX webhook_deliveries_open_idx ON webhook_deliveries (webhook_id, session_id, seq) WHERE status IN ('pending', 'sending');
-- Expired leases, for the rescue.
CREATE INDEX webhook_deliveries_lease_idx ON webhook_deliveries (lease_expires_at) WHERE status = 'sending';
-- The delivery log, newest first.
CREATE INDEX webhook_deliveries_log_idx ON webhook_deliveries (webhook_id, feed_pos);

-- +goose Down
DROP TABLE webhook_deliveries;
DROP TABLE webhooks;
