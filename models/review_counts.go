package models

import (
	"context"
	"fmt"
	"sort"

	"gorm.io/gorm"
)

// The review queue's counts are maintained, not computed. Migration 00031's
// triggers keep two tables in every transaction that writes review_items or
// review_scores: review_counts, per human who decided escalations, how many
// of their items still need a score, and review_reviewer_counts, per
// reviewer, how many open items they scored (not their own decisions).
// Open is the sum of a few rows. Available and Mine depend on the reviewer
// and on the clock (claims lapse), so they are derived, exactly, from those
// counts and the live claims, a set as small as the work in flight (see
// reviewCountsOf). What follows checks the counters against the items and
// scores and rebuilds them, for verify and migrate up.

// ReviewCountDrift is a counter row whose stored count differs from the
// items: Table is review_counts (Key a decider) or review_reviewer_counts
// (Key a reviewer).
type ReviewCountDrift struct {
	Table, Key     string
	Stored, Actual int64
}

// reviewCountsExact groups the open items by decider as review_counts counts
// them, and reviewerCountsExact the open items' scores by reviewer as
// review_reviewer_counts does: reads of the open backlog through
// review_items_open_idx, for verify and repair, never for a page.
const (
	reviewCountsExact   = `SELECT decided_by, count(*) AS n FROM review_items WHERE scored < needed GROUP BY decided_by`
	reviewerCountsExact = `SELECT r.reviewer, count(*) AS n FROM review_items i
	JOIN review_scores r ON r.session_id = i.session_id AND r.at_version = i.at_version
	WHERE i.scored < i.needed AND i.decided_by <> r.reviewer GROUP BY r.reviewer`
)

// VerifyReviewCounts compares review_counts and review_reviewer_counts with
// the open review items and their scores and returns every row that
// differs, sorted; none when they agree. All four sides are read by one
// statement, so from one snapshot.
func (s *Store) VerifyReviewCounts(ctx context.Context) ([]ReviewCountDrift, error) {
	var rows []struct {
		T      int
		Key    string
		Stored int
		N      int64
	}
	err := s.DB.WithContext(ctx).Raw(`SELECT 0 AS t, x.decided_by AS key, 0 AS stored, x.n FROM (` + reviewCountsExact + `) AS x
UNION ALL
SELECT 0, decided_by, 1, n FROM review_counts WHERE n <> 0
UNION ALL
SELECT 1, y.reviewer, 0, y.n FROM (` + reviewerCountsExact + `) AS y
UNION ALL
SELECT 1, reviewer, 1, n FROM review_reviewer_counts WHERE n <> 0`).Scan(&rows).Error
	if err != nil {
		return nil, fmt.Errorf("verify review counts: %w", err)
	}
	tables := [2]string{"review_counts", "review_reviewer_counts"}
	type key struct {
		t   int
		key string
	}
	got := map[key]*ReviewCountDrift{}
	for _, r := range rows {
		k := key{r.T, r.Key}
		d := got[k]
		if d == nil {
			d = &ReviewCountDrift{Table: tables[r.T], Key: r.Key}
			got[k] = d
		}
		if r.Stored == 1 {
			d.Stored = r.N
		} else {
			d.Actual = r.N
		}
	}
	var out []ReviewCountDrift
	for _, d := range got {
		if d.Stored != d.Actual {
			out = append(out, *d)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Table != out[j].Table {
			return out[i].Table < out[j].Table
		}
		return out[i].Key < out[j].Key
	})
	return out, nil
}

// RepairReviewCounts rebuilds review_counts and review_reviewer_counts from
// the items and scores in one write transaction (rebuildTables) and returns
// the rows that were wrong (none when the triggers kept them). It also
// drops the rows whose count fell to zero.
func (s *Store) RepairReviewCounts(ctx context.Context) ([]ReviewCountDrift, error) {
	drift, err := s.VerifyReviewCounts(ctx)
	if err != nil || len(drift) == 0 {
		if err == nil {
			err = s.Write(ctx, func(tx *Tx) error {
				tx.Later(failWith("prune review counts"), `DELETE FROM review_counts WHERE n = 0`)
				tx.Later(failWith("prune reviewer counts"), `DELETE FROM review_reviewer_counts WHERE n = 0`)
				return nil
			})
		}
		return drift, err
	}
	err = s.rebuildTables(ctx, []string{"review_counts", "review_reviewer_counts"},
		`INSERT INTO review_counts (decided_by, n) `+reviewCountsExact,
		`INSERT INTO review_reviewer_counts (reviewer, n) `+reviewerCountsExact)
	if err != nil {
		return nil, fmt.Errorf("repair review counts: %w", err)
	}
	s.Logger.Warn("review counts rebuilt from the items", "rows_wrong", len(drift))
	return drift, nil
}

// reviewClaimed is the FROM of the items with a live claim (anyone's),
// reached through review_claims_expires_idx, joined to their items as i.
const reviewClaimed = `(SELECT DISTINCT session_id, at_version FROM review_claims WHERE expires_at > ?) AS k
	JOIN review_items i ON i.session_id = k.session_id AND i.at_version = k.at_version`

// reviewCountsOf counts the queue for actor at now without reading the
// backlog. Of the open items O, actor may not score those they decided (D,
// review_counts) nor those they scored (S, review_reviewer_counts; disjoint
// from D). Every other open item without a live claim is short of scores,
// not scored by actor and has every slot free, so availableTo admits it;
// the rest, L, carry a live claim and are few. Hence
//
//	Available = |O| − |D| − |S| − |L| + |L ∩ available|
//
// with L the claimed open items outside D and S. |O|, |D| and |S| are
// maintained rows and the last two terms read the live claims only;
// availableTo still decides who may review what. Mine are actor's live
// claims that availableTo admits, a subset of L ∩ available. One
// statement, so one snapshot for every term.
func (s *Store) reviewCountsOf(ctx context.Context, actor string, now UTCTime) (ReviewCounts, error) {
	db := s.read(ctx)
	claimed := func() *gorm.DB {
		q := db.Table(reviewClaimed, now).
			Joins("LEFT JOIN review_claims c ON c.session_id = i.session_id AND c.at_version = i.at_version AND c.reviewer = ? AND c.expires_at > ?", actor, now)
		return availableTo(q, actor, now).Select("count(*)")
	}
	var r struct {
		OpenN, DecidedN, ScoredN, ClaimedN, ClaimedAvailableN, MineN int64
	}
	err := db.Raw(`SELECT (SELECT coalesce(sum(n), 0) FROM review_counts) AS open_n,
	(SELECT coalesce(sum(n), 0) FROM review_counts WHERE decided_by = ?) AS decided_n,
	(SELECT coalesce(sum(n), 0) FROM review_reviewer_counts WHERE reviewer = ?) AS scored_n,
	(SELECT count(*) FROM `+reviewClaimed+` WHERE i.scored < i.needed AND i.decided_by <> ? AND `+notScoredBy+`) AS claimed_n,
	(?) AS claimed_available_n,
	(?) AS mine_n`,
		actor, actor, now, actor, actor, claimed(), claimed().Where("c.reviewer IS NOT NULL")).Scan(&r).Error
	if err != nil {
		return ReviewCounts{}, err
	}
	capped := func(n int64) int64 { return min(n, CountCap+1) }
	return ReviewCounts{
		Open:      capped(r.OpenN),
		Available: capped(r.OpenN - r.DecidedN - r.ScoredN - r.ClaimedN + r.ClaimedAvailableN),
		Mine:      capped(r.MineN),
	}, nil
}
