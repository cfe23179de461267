-- +goose Up
-- Review statistics rollup (models/review_rollup.go): ReviewStatsFor read
-- every score of its window; it now reads these rows for the window's whole
-- UTC days and review_scores only for the items with a score in the partial
-- days at its two ends. An item is in the rollup while it has all the
-- scores it needs: the score that completes it adds it (ScoreReview, in the
-- same transaction), archiving its session takes it out.
--
-- review_score_days: per day of scored_at and queue, the scores and the sum
-- of each criterion (overall, per queue, per week).
CREATE TABLE review_score_days (
    day                  text NOT NULL,
    queue                text NOT NULL,
    scores               integer NOT NULL,
    goal_clear           integer NOT NULL,
    state_current        integer NOT NULL,
    evidence_sufficient  integer NOT NULL,
    risks_explicit       integer NOT NULL,
    next_step_actionable integer NOT NULL,
    PRIMARY KEY (day, queue)
);
-- review_pair_days: reviewer agreement, per day of an item's first score,
-- day of its second and criterion (0..4 in rubric order): p<a><b> is how
-- many pairs the first reviewer scored a and the second b, the contingency
-- table Cohen's kappa needs.
CREATE TABLE review_pair_days (
    day1      text NOT NULL,
    day2      text NOT NULL,
    criterion integer NOT NULL,
    p11 integer NOT NULL,
    p12 integer NOT NULL,
    p13 integer NOT NULL,
    p14 integer NOT NULL,
    p15 integer NOT NULL,
    p21 integer NOT NULL,
    p22 integer NOT NULL,
    p23 integer NOT NULL,
    p24 integer NOT NULL,
    p25 integer NOT NULL,
    p31 integer NOT NULL,
    p32 integer NOT NULL,
    p33 integer NOT NULL,
    p34 integer NOT NULL,
    p35 integer NOT NULL,
    p41 integer NOT NULL,
    p42 integer NOT NULL,
    p43 integer NOT NULL,
    p44 integer NOT NULL,
    p45 integer NOT NULL,
    p51 integer NOT NULL,
    p52 integer NOT NULL,
    p53 integer NOT NULL,
    p54 integer NOT NULL,
    p55 integer NOT NULL,
    PRIMARY KEY (day1, day2, criterion)
);
-- review_item_days: what items add to the clarity timing (claimed items:
-- the mean score rounded, the sums Pearson needs over the mean × 10 and the
-- seconds from claim to decision) and to the count of double-scored items.
-- part 'whole' is keyed by the days of the first and last score; an item
-- whose two scores fall on different days also has a 'first' and a 'second'
-- part (each score alone), keyed by its own day and the other score's day,
-- for a window that holds only one of them.
CREATE TABLE review_item_days (
    day1        text NOT NULL,
    day2        text NOT NULL,
    part        text NOT NULL,
    clarity     integer NOT NULL,
    items       integer NOT NULL,
    doubled     integer NOT NULL,
    claimed     integer NOT NULL,
    sum_us      integer NOT NULL,
    sum_x10     integer NOT NULL,
    sum_x10sq   integer NOT NULL,
    sum_secs2   real NOT NULL,
    sum_x10secs real NOT NULL,
    PRIMARY KEY (day1, day2, part, clarity)
);

-- Backfill: the complete items' scores in scoring order.
CREATE TEMP TABLE review_backfill AS
SELECT r.session_id, r.at_version, r.event_id,
    r.goal_clear AS c0, r.state_current AS c1, r.evidence_sufficient AS c2, r.risks_explicit AS c3, r.next_step_actionable AS c4,
    r.goal_clear + r.state_current + r.evidence_sufficient + r.risks_explicit + r.next_step_actionable AS total,
    substr(r.scored_at, 1, 10) || 'T00:00:00.000000Z' AS day,
    i.queue, i.claimed_at, i.decided_at,
    row_number() OVER (PARTITION BY r.session_id, r.at_version ORDER BY r.scored_at, r.event_id) AS rn
FROM review_scores r JOIN review_items i ON i.session_id = r.session_id AND i.at_version = r.at_version
WHERE i.scored >= i.needed;

INSERT INTO review_score_days (day, queue, scores, goal_clear, state_current, evidence_sufficient, risks_explicit, next_step_actionable)
SELECT day, queue, count(*), sum(c0), sum(c1), sum(c2), sum(c3), sum(c4)
FROM review_backfill GROUP BY day, queue;

INSERT INTO review_pair_days (day1, day2, criterion, p11, p12, p13, p14, p15, p21, p22, p23, p24, p25, p31, p32, p33, p34, p35, p41, p42, p43, p44, p45, p51, p52, p53, p54, p55)
SELECT day1, day2, criterion,
    sum(CASE WHEN a = 1 AND b = 1 THEN 1 ELSE 0 END),
    sum(CASE WHEN a = 1 AND b = 2 THEN 1 ELSE 0 END),
    sum(CASE WHEN a = 1 AND b = 3 THEN 1 ELSE 0 END),
    sum(CASE WHEN a = 1 AND b = 4 THEN 1 ELSE 0 END),
    sum(CASE WHEN a = 1 AND b = 5 THEN 1 ELSE 0 END),
    sum(CASE WHEN a = 2 AND b = 1 THEN 1 ELSE 0 END),
    sum(CASE WHEN a = 2 AND b = 2 THEN 1 ELSE 0 END),
    sum(CASE WHEN a = 2 AND b = 3 THEN 1 ELSE 0 END),
    sum(CASE WHEN a = 2 AND b = 4 THEN 1 ELSE 0 END),
    sum(CASE WHEN a = 2 AND b = 5 THEN 1 ELSE 0 END),
    sum(CASE WHEN a = 3 AND b = 1 THEN 1 ELSE 0 END),
    sum(CASE WHEN a = 3 AND b = 2 THEN 1 ELSE 0 END),
    sum(CASE WHEN a = 3 AND b = 3 THEN 1 ELSE 0 END),
    sum(CASE WHEN a = 3 AND b = 4 THEN 1 ELSE 0 END),
    sum(CASE WHEN a = 3 AND b = 5 THEN 1 ELSE 0 END),
    sum(CASE WHEN a = 4 AND b = 1 THEN 1 ELSE 0 END),
    sum(CASE WHEN a = 4 AND b = 2 THEN 1 ELSE 0 END),
    sum(CASE WHEN a = 4 AND b = 3 THEN 1 ELSE 0 END),
    sum(CASE WHEN a = 4 AND b = 4 THEN 1 ELSE 0 END),
    sum(CASE WHEN a = 4 AND b = 5 THEN 1 ELSE 0 END),
    sum(CASE WHEN a = 5 AND b = 1 THEN 1 ELSE 0 END),
    sum(CASE WHEN a = 5 AND b = 2 THEN 1 ELSE 0 END),
    sum(CASE WHEN a = 5 AND b = 3 THEN 1 ELSE 0 END),
    sum(CASE WHEN a = 5 AND b = 4 THEN 1 ELSE 0 END),
    sum(CASE WHEN a = 5 AND b = 5 THEN 1 ELSE 0 END)
FROM (
    SELECT f.day AS day1, s.day AS day2, c.criterion, CASE c.criterion WHEN 0 THEN f.c0 WHEN 1 THEN f.c1 WHEN 2 THEN f.c2 WHEN 3 THEN f.c3 ELSE f.c4 END AS a, CASE c.criterion WHEN 0 THEN s.c0 WHEN 1 THEN s.c1 WHEN 2 THEN s.c2 WHEN 3 THEN s.c3 ELSE s.c4 END AS b
    FROM review_backfill f
    JOIN review_backfill s ON s.session_id = f.session_id AND s.at_version = f.at_version AND s.rn = 2
    CROSS JOIN (SELECT 0 AS criterion UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4) c
    WHERE f.rn = 1
) p
GROUP BY day1, day2, criterion;

-- x10 is the mean score × 10 (2 × the total of one score of five values,
-- the total of two); its clarity bucket is the mean rounded half up.
INSERT INTO review_item_days (day1, day2, part, clarity, items, doubled, claimed, sum_us, sum_x10, sum_x10sq, sum_secs2, sum_x10secs)
SELECT day1, day2, part, clarity, count(*), sum(doubled), sum(claimed),
    sum(claimed * us), sum(claimed * x10), sum(claimed * x10 * x10),
    sum(CASE WHEN claimed = 1 THEN (CAST(us AS real) / 1000000.0) * (CAST(us AS real) / 1000000.0) ELSE 0 END),
    sum(CASE WHEN claimed = 1 THEN CAST(x10 AS real) * (CAST(us AS real) / 1000000.0) ELSE 0 END)
FROM (
    SELECT day1, day2, part, x10, doubled,
        CASE WHEN claimed_at IS NULL THEN 0 ELSE (x10 + 5) / 10 END AS clarity,
        CASE WHEN claimed_at IS NULL THEN 0 ELSE 1 END AS claimed,
        CASE WHEN claimed_at IS NULL THEN 0 ELSE ((CAST(strftime('%s', substr(decided_at, 1, 19)) AS integer) - CAST(strftime('%s', substr(claimed_at, 1, 19)) AS integer)) * 1000000 + CAST(substr(decided_at, 21, 6) AS integer) - CAST(substr(claimed_at, 21, 6) AS integer)) END AS us
    FROM (
        SELECT f.day AS day1, COALESCE(s.day, f.day) AS day2, 'whole' AS part,
            CASE WHEN s.session_id IS NULL THEN 2 * f.total ELSE f.total + s.total END AS x10,
            CASE WHEN s.session_id IS NULL THEN 0 ELSE 1 END AS doubled,
            f.claimed_at, f.decided_at
        FROM review_backfill f
        LEFT JOIN review_backfill s ON s.session_id = f.session_id AND s.at_version = f.at_version AND s.rn = 2
        WHERE f.rn = 1
        UNION ALL
        SELECT f.day, s.day, 'first', 2 * f.total, 0, f.claimed_at, f.decided_at
        FROM review_backfill f
        JOIN review_backfill s ON s.session_id = f.session_id AND s.at_version = f.at_version AND s.rn = 2
        WHERE f.rn = 1 AND s.day <> f.day
        UNION ALL
        SELECT s.day, f.day, 'second', 2 * s.total, 0, f.claimed_at, f.decided_at
        FROM review_backfill f
        JOIN review_backfill s ON s.session_id = f.session_id AND s.at_version = f.at_version AND s.rn = 2
        WHERE f.rn = 1 AND s.day <> f.day
    ) p
) q
GROUP BY day1, day2, part, clarity;

DROP TABLE review_backfill;

-- +goose Down
DROP TABLE review_item_days;
DROP TABLE review_pair_days;
DROP TABLE review_score_days;
