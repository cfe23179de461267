-- +goose Up
-- The review queue's counts, maintained in the write path
-- (models.ReviewQueue, review_counts.go). Counting the open items read up to
-- 1,001 entries of review_items_open_idx per count and page view, three
-- counts a page; this table holds, per human who decided escalations, the
-- number of their items that still need a score, so that Open is a sum of a
-- few rows and "open items decided by me" (never available to me) one row.
-- Available and Mine are derived from these, from the per-reviewer counts
-- below and from the live claims (see models.reviewCountsOf).
--
-- The triggers keep it exact for every write of review_items (the decision
-- that queues an item, SyncReviewItems, the score that completes one,
-- archive, hand-written SQL) in the writing transaction. Their WHEN clauses
-- are evaluated without calling the function, so a write that leaves an
-- item's openness and decider alone costs nothing more.
CREATE TABLE review_counts (
    decided_by text PRIMARY KEY,
    n          bigint NOT NULL
);

-- +goose StatementBegin
CREATE FUNCTION review_counts_track() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    leaving  boolean := TG_OP <> 'INSERT' AND coalesce(OLD.scored < OLD.needed, false);
    entering boolean := TG_OP <> 'DELETE' AND coalesce(NEW.scored < NEW.needed, false);
BEGIN
    -- A counter row stays locked until the writer commits. An item moving
    -- from one decider to another (hand-written SQL only) changes the two
    -- rows in key order, so that two such writers take the locks in the same
    -- order instead of deadlocking (Store.Write retries a deadlock anyway).
    IF leaving AND entering AND NEW.decided_by < OLD.decided_by THEN
        INSERT INTO review_counts VALUES (NEW.decided_by, 1)
            ON CONFLICT (decided_by) DO UPDATE SET n = review_counts.n + 1;
        entering := false;
    END IF;
    IF leaving THEN
        -- Zero rows stay: a later item of the same decider updates them in
        -- place, and RepairReviewCounts drops them.
        INSERT INTO review_counts VALUES (OLD.decided_by, -1)
            ON CONFLICT (decided_by) DO UPDATE SET n = review_counts.n - 1;
    END IF;
    IF entering THEN
        INSERT INTO review_counts VALUES (NEW.decided_by, 1)
            ON CONFLICT (decided_by) DO UPDATE SET n = review_counts.n + 1;
    END IF;
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

CREATE TRIGGER review_items_counts_insert AFTER INSERT ON review_items FOR EACH ROW
    WHEN (NEW.scored < NEW.needed)
    EXECUTE FUNCTION review_counts_track();
CREATE TRIGGER review_items_counts_update AFTER UPDATE OF scored, needed, decided_by ON review_items FOR EACH ROW
    WHEN ((OLD.scored < OLD.needed OR NEW.scored < NEW.needed)
        AND (OLD.scored < OLD.needed, OLD.decided_by) IS DISTINCT FROM (NEW.scored < NEW.needed, NEW.decided_by))
    EXECUTE FUNCTION review_counts_track();
CREATE TRIGGER review_items_counts_delete AFTER DELETE ON review_items FOR EACH ROW
    WHEN (OLD.scored < OLD.needed)
    EXECUTE FUNCTION review_counts_track();

-- The backfill, after the triggers and in the same transaction: creating a
-- trigger locks out writers of review_items until commit.
INSERT INTO review_counts (decided_by, n)
SELECT decided_by, count(*) FROM review_items WHERE scored < needed GROUP BY decided_by;

-- Per reviewer, the number of open items they scored (not their own
-- decisions: those are counted above): the items still waiting for the
-- second, blind score. With the two counts, every open item a reviewer may
-- not score is counted except those held by others' live claims, a set as
-- small as the claims in flight (models.reviewCountsOf).
CREATE TABLE review_reviewer_counts (
    reviewer text PRIMARY KEY,
    n        bigint NOT NULL
);

-- +goose StatementBegin
CREATE FUNCTION review_scores_counts_track() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP <> 'INSERT' THEN
        INSERT INTO review_reviewer_counts (reviewer, n)
        SELECT OLD.reviewer, -1 FROM review_items i
        WHERE i.session_id = OLD.session_id AND i.at_version = OLD.at_version
            AND i.scored < i.needed AND i.decided_by <> OLD.reviewer
        ON CONFLICT (reviewer) DO UPDATE SET n = review_reviewer_counts.n + excluded.n;
    END IF;
    IF TG_OP <> 'DELETE' THEN
        INSERT INTO review_reviewer_counts (reviewer, n)
        SELECT NEW.reviewer, 1 FROM review_items i
        WHERE i.session_id = NEW.session_id AND i.at_version = NEW.at_version
            AND i.scored < i.needed AND i.decided_by <> NEW.reviewer
        ON CONFLICT (reviewer) DO UPDATE SET n = review_reviewer_counts.n + excluded.n;
    END IF;
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

-- An item that closes (its last score) or opens again, or changes decider,
-- moves the counts of everyone who scored it, in reviewer order (a lock
-- order; ScoreReview counts the item before it inserts the score, so the
-- score that closes an item touches only the other scorers' rows).
-- +goose StatementBegin
CREATE FUNCTION review_items_scorers_track() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO review_reviewer_counts (reviewer, n)
    SELECT reviewer, sum(d) FROM (
        SELECT r.reviewer, -1 AS d FROM review_scores r
        WHERE r.session_id = OLD.session_id AND r.at_version = OLD.at_version
            AND OLD.scored < OLD.needed AND r.reviewer <> OLD.decided_by
        UNION ALL
        SELECT r.reviewer, 1 FROM review_scores r
        WHERE r.session_id = NEW.session_id AND r.at_version = NEW.at_version
            AND NEW.scored < NEW.needed AND r.reviewer <> NEW.decided_by
    ) AS x GROUP BY reviewer HAVING sum(d) <> 0 ORDER BY reviewer
    ON CONFLICT (reviewer) DO UPDATE SET n = review_reviewer_counts.n + excluded.n;
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

CREATE TRIGGER review_scores_counts_insert AFTER INSERT ON review_scores FOR EACH ROW
    EXECUTE FUNCTION review_scores_counts_track();
CREATE TRIGGER review_scores_counts_update AFTER UPDATE OF session_id, at_version, reviewer ON review_scores FOR EACH ROW
    WHEN ((OLD.session_id, OLD.at_version, OLD.reviewer) IS DISTINCT FROM (NEW.session_id, NEW.at_version, NEW.reviewer))
    EXECUTE FUNCTION review_scores_counts_track();
CREATE TRIGGER review_scores_counts_delete AFTER DELETE ON review_scores FOR EACH ROW
    EXECUTE FUNCTION review_scores_counts_track();
-- Named to fire after review_items_counts_update (triggers fire in name
-- order): the decider's row first, then the scorers'.
CREATE TRIGGER review_items_scorers_update AFTER UPDATE OF scored, needed, decided_by ON review_items FOR EACH ROW
    WHEN ((OLD.scored < OLD.needed OR NEW.scored < NEW.needed)
        AND (OLD.scored < OLD.needed, OLD.decided_by) IS DISTINCT FROM (NEW.scored < NEW.needed, NEW.decided_by))
    EXECUTE FUNCTION review_items_scorers_track();

INSERT INTO review_reviewer_counts (reviewer, n)
SELECT r.reviewer, count(*) FROM review_scores r
JOIN review_items i ON i.session_id = r.session_id AND i.at_version = r.at_version
WHERE i.scored < i.needed AND i.decided_by <> r.reviewer
GROUP BY r.reviewer;

-- The third set, the live claims: lapsed claims stay until their item is
-- claimed again, so a range of the live ones reads only those.
CREATE INDEX review_claims_expires_idx ON review_claims (expires_at, session_id, at_version);

-- +goose Down
DROP INDEX review_claims_expires_idx;
DROP TRIGGER review_items_scorers_update ON review_items;
DROP TRIGGER review_scores_counts_delete ON review_scores;
DROP TRIGGER review_scores_counts_update ON review_scores;
DROP TRIGGER review_scores_counts_insert ON review_scores;
DROP FUNCTION review_items_scorers_track();
DROP FUNCTION review_scores_counts_track();
DROP TABLE review_reviewer_counts;
DROP TRIGGER review_items_counts_delete ON review_items;
DROP TRIGGER review_items_counts_update ON review_items;
DROP TRIGGER review_items_counts_insert ON review_items;
DROP FUNCTION review_counts_track();
DROP TABLE review_counts;
