-- +goose Up
-- The review queue's counts, maintained in the write path (see the
-- PostgreSQL migration). SQLite has one writer, so the triggers need no
-- lock order.
CREATE TABLE review_counts (
    decided_by text PRIMARY KEY,
    n          integer NOT NULL
);

-- +goose StatementBegin
CREATE TRIGGER review_items_counts_insert AFTER INSERT ON review_items
WHEN new.scored < new.needed
BEGIN
    INSERT INTO review_counts VALUES (new.decided_by, 1)
        ON CONFLICT (decided_by) DO UPDATE SET n = n + 1;
END;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE TRIGGER review_items_counts_update AFTER UPDATE OF scored, needed, decided_by ON review_items
WHEN (old.scored < old.needed OR new.scored < new.needed)
    AND ((old.scored < old.needed) IS NOT (new.scored < new.needed) OR old.decided_by IS NOT new.decided_by)
BEGIN
    INSERT INTO review_counts SELECT old.decided_by, -1
        WHERE old.scored < old.needed
        ON CONFLICT (decided_by) DO UPDATE SET n = n - 1;
    INSERT INTO review_counts SELECT new.decided_by, 1
        WHERE new.scored < new.needed
        ON CONFLICT (decided_by) DO UPDATE SET n = n + 1;
END;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE TRIGGER review_items_counts_delete AFTER DELETE ON review_items
WHEN old.scored < old.needed
BEGIN
    INSERT INTO review_counts VALUES (old.decided_by, -1)
        ON CONFLICT (decided_by) DO UPDATE SET n = n - 1;
END;
-- +goose StatementEnd

INSERT INTO review_counts (decided_by, n)
SELECT decided_by, count(*) FROM review_items WHERE scored < needed GROUP BY decided_by;

-- Per reviewer, the open items they scored (see the PostgreSQL migration).
CREATE TABLE review_reviewer_counts (
    reviewer text PRIMARY KEY,
    n        integer NOT NULL
);

-- +goose StatementBegin
CREATE TRIGGER review_scores_counts_insert AFTER INSERT ON review_scores
BEGIN
    INSERT INTO review_reviewer_counts (reviewer, n)
    SELECT new.reviewer, 1 FROM review_items i
    WHERE i.session_id = new.session_id AND i.at_version = new.at_version
        AND i.scored < i.needed AND i.decided_by <> new.reviewer
    ON CONFLICT (reviewer) DO UPDATE SET n = n + excluded.n;
END;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE TRIGGER review_scores_counts_update AFTER UPDATE OF session_id, at_version, reviewer ON review_scores
WHEN old.session_id IS NOT new.session_id OR old.at_version IS NOT new.at_version OR old.reviewer IS NOT new.reviewer
BEGIN
    INSERT INTO review_reviewer_counts (reviewer, n)
    SELECT old.reviewer, -1 FROM review_items i
    WHERE i.session_id = old.session_id AND i.at_version = old.at_version
        AND i.scored < i.needed AND i.decided_by <> old.reviewer
    ON CONFLICT (reviewer) DO UPDATE SET n = n + excluded.n;
    INSERT INTO review_reviewer_counts (reviewer, n)
    SELECT new.reviewer, 1 FROM review_items i
    WHERE i.session_id = new.session_id AND i.at_version = new.at_version
        AND i.scored < i.needed AND i.decided_by <> new.reviewer
    ON CONFLICT (reviewer) DO UPDATE SET n = n + excluded.n;
END;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE TRIGGER review_scores_counts_delete AFTER DELETE ON review_scores
BEGIN
    INSERT INTO review_reviewer_counts (reviewer, n)
    SELECT old.reviewer, -1 FROM review_items i
    WHERE i.session_id = old.session_id AND i.at_version = old.at_version
        AND i.scored < i.needed AND i.decided_by <> old.reviewer
    ON CONFLICT (reviewer) DO UPDATE SET n = n + excluded.n;
END;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE TRIGGER review_items_scorers_update AFTER UPDATE OF scored, needed, decided_by ON review_items
WHEN (old.scored < old.needed OR new.scored < new.needed)
    AND ((old.scored < old.needed) IS NOT (new.scored < new.needed) OR old.decided_by IS NOT new.decided_by)
BEGIN
    INSERT INTO review_reviewer_counts (reviewer, n)
    SELECT reviewer, sum(d) FROM (
        SELECT r.reviewer, -1 AS d FROM review_scores r
        WHERE r.session_id = old.session_id AND r.at_version = old.at_version
            AND old.scored < old.needed AND r.reviewer <> old.decided_by
        UNION ALL
        SELECT r.reviewer, 1 FROM review_scores r
        WHERE r.session_id = new.session_id AND r.at_version = new.at_version
            AND new.scored < new.needed AND r.reviewer <> new.decided_by
    ) AS x WHERE true GROUP BY reviewer HAVING sum(d) <> 0
    ON CONFLICT (reviewer) DO UPDATE SET n = n + excluded.n;
END;
-- +goose StatementEnd

INSERT INTO review_reviewer_counts (reviewer, n)
SELECT r.reviewer, count(*) FROM review_scores r
JOIN review_items i ON i.session_id = r.session_id AND i.at_version = r.at_version
WHERE i.scored < i.needed AND i.decided_by <> r.reviewer
GROUP BY r.reviewer;

CREATE INDEX review_claims_expires_idx ON review_claims (expires_at, session_id, at_version);

-- +goose Down
DROP INDEX review_claims_expires_idx;
DROP TRIGGER review_items_scorers_update;
DROP TRIGGER review_scores_counts_delete;
DROP TRIGGER review_scores_counts_update;
DROP TRIGGER review_scores_counts_insert;
DROP TABLE review_reviewer_counts;
DROP TRIGGER review_items_counts_delete;
DROP TRIGGER review_items_counts_update;
DROP TRIGGER review_items_counts_insert;
DROP TABLE review_counts;
