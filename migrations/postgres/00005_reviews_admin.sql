-- +goose Up
-- Review queue: one item per escalation that a human decided, keyed by the
-- session and the escalation's version (Escalation.AtVersion), the exact
-- package the agent saw. Items are derived from the event log by
-- models.SyncReviewItems; the scores themselves are review.scored events, and
-- review_scores is their projection, written in the same transaction.
CREATE TABLE review_items (
    session_id        text NOT NULL REFERENCES sessions(id),
    at_version        bigint NOT NULL,
    decision_event_id text NOT NULL UNIQUE,
    decision_type     text NOT NULL,
    decided_by        text NOT NULL,
    queue             text NOT NULL DEFAULT '',
    ticket_ref        text NOT NULL DEFAULT '',
    escalated_at      timestamptz NOT NULL,
    claimed_at        timestamptz NULL,
    decided_at        timestamptz NOT NULL,
    -- 1, or 2 for the share that is scored twice (blind) to measure agreement.
    needed            integer NOT NULL,
    scored            integer NOT NULL DEFAULT 0,
    created_at        timestamptz NOT NULL,
    PRIMARY KEY (session_id, at_version)
);
-- The queue: items still needing a score, oldest decision first. Partial, so
-- it stays as small as the backlog however many items were scored.
CREATE INDEX review_items_open_idx ON review_items (decided_at, session_id, at_version) WHERE scored < needed;

-- Claims for review, so that two reviewers do not score the same item by
-- accident; a claim lapses at expires_at.
CREATE TABLE review_claims (
    session_id text NOT NULL,
    at_version bigint NOT NULL,
    reviewer   text NOT NULL,
    claimed_at timestamptz NOT NULL,
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (session_id, at_version, reviewer),
    FOREIGN KEY (session_id, at_version) REFERENCES review_items (session_id, at_version)
);
CREATE INDEX review_claims_reviewer_idx ON review_claims (reviewer, expires_at);

-- Projection of review.scored events: one row per reviewer and item.
CREATE TABLE review_scores (
    event_id             text PRIMARY KEY,
    session_id           text NOT NULL,
    at_version           bigint NOT NULL,
    reviewer             text NOT NULL,
    goal_clear           smallint NOT NULL,
    state_current        smallint NOT NULL,
    evidence_sufficient  smallint NOT NULL,
    risks_explicit       smallint NOT NULL,
    next_step_actionable smallint NOT NULL,
    scored_at            timestamptz NOT NULL,
    CONSTRAINT review_scores_item_reviewer_key UNIQUE (session_id, at_version, reviewer),
    FOREIGN KEY (session_id, at_version) REFERENCES review_items (session_id, at_version)
);
CREATE INDEX review_scores_scored_at_idx ON review_scores (scored_at);

-- How far SyncReviewItems has read the decision events.
CREATE TABLE review_sync (
    name      text PRIMARY KEY,
    watermark timestamptz NOT NULL
);

-- Every admin action (users, tokens, verify, exports) with its actor and the
-- target's before and after, written in the transaction of the change.
CREATE TABLE admin_audit (
    id          text PRIMARY KEY,
    actor       text NOT NULL,
    action      text NOT NULL,
    target_kind text NOT NULL,
    target_id   text NOT NULL DEFAULT '',
    before      text NULL,
    after       text NULL,
    created_at  timestamptz NOT NULL
);
CREATE INDEX admin_audit_created_idx ON admin_audit (created_at, id);

-- +goose Down
DROP TABLE admin_audit;
DROP TABLE review_sync;
DROP TABLE review_scores;
DROP TABLE review_claims;
DROP TABLE review_items;
