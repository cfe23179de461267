package models_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
)

func tableRows(t testing.TB, s *models.Store, table string) int64 {
	t.Helper()
	var n int64
	if err := s.DB.Raw(`SELECT count(*) FROM ` + table).Scan(&n).Error; err != nil {
		t.Fatal(err)
	}
	return n
}

// TestRetentionIdempotencyKeys: a retry within the key's lifetime replays
// the first outcome; the maintenance pass deletes the key once it is older
// than the lifetime, and the same key then makes a new command.
func TestRetentionIdempotencyKeys(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		clk := setFanClock(s)
		in := models.CreateSessionInput{Goal: "Refund order 1182 if eligible"}
		first, err := s.CreateSession(ctx, fanActor, "retry-me", in)
		if err != nil {
			t.Fatal(err)
		}
		clk.Add(models.DefaultIdempotencyKeyTTL - time.Minute)
		if r, err := s.Maintain(ctx); err != nil || r.ExpiredKeys != 0 {
			t.Fatalf("pass before the lifetime: %+v %v", r, err)
		}
		again, err := s.CreateSession(ctx, fanActor, "retry-me", in)
		if err != nil || !again.Replayed || again.SessionID != first.SessionID {
			t.Fatalf("retry within the lifetime: %+v %v, want a replay of %s", again, err, first.SessionID)
		}
		clk.Add(2 * time.Minute)
		r, err := s.Maintain(ctx)
		if err != nil || r.ExpiredKeys != 1 {
			t.Fatalf("pass after the lifetime: %+v %v, want 1 expired key", r, err)
		}
		if n := tableRows(t, s, "idempotency_keys"); n != 0 {
			t.Fatalf("%d idempotency keys left", n)
		}
		late, err := s.CreateSession(ctx, fanActor, "retry-me", in)
		if err != nil || late.Replayed || late.SessionID == first.SessionID {
			t.Fatalf("retry after the lifetime: %+v %v, want a new session", late, err)
		}
	})
}

// TestRetentionBatches: expiry deletes at most one batch per kind and pass,
// oldest first, and asks for the next pass at once while a full batch was
// deleted; younger rows and the other table stay.
func TestRetentionBatches(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		clk := setFanClock(s)
		old := models.NewUTCTime(clk.Now().Add(-models.DefaultIdempotencyKeyTTL - time.Hour))
		young := models.NewUTCTime(clk.Now().Add(-time.Hour))
		const nOld = 250
		var vals []string
		var args []any
		for i := range nOld + 3 {
			at := old
			if i >= nOld {
				at = young
			}
			vals = append(vals, "(?, ?, 'fp', '{}', ?)")
			args = append(args, "scope", fmt.Sprintf("k%04d", i), at)
		}
		if err := s.DB.Exec(`INSERT INTO idempotency_keys (scope, key, fingerprint, outcome, created_at) VALUES `+
			strings.Join(vals, ", "), args...).Error; err != nil {
			t.Fatal(err)
		}
		// Rejection counters: 210 minutes of them 31 days ago, one today.
		var rs []models.Rejection
		for i := range 210 {
			rs = append(rs, models.Rejection{At: clk.Now().Add(-31*24*time.Hour + time.Duration(i)*time.Minute), Reason: models.RejectStale, Queue: "q", Count: 1})
		}
		rs = append(rs, models.Rejection{At: clk.Now(), Reason: models.RejectStale, Queue: "q", Count: 1})
		if err := s.RecordRejections(ctx, rs); err != nil {
			t.Fatal(err)
		}

		r, next, err := s.MaintainNext(ctx)
		if err != nil || r.ExpiredKeys != 200 || r.ExpiredRejections != 200 {
			t.Fatalf("first pass: %+v %v, want 200 of each", r, err)
		}
		if next.After(clk.Now()) {
			t.Fatalf("after full batches the next pass is at %v, want now (%v)", next, clk.Now())
		}
		r, _, err = s.MaintainNext(ctx)
		if err != nil || r.ExpiredKeys != nOld-200 || r.ExpiredRejections != 10 {
			t.Fatalf("second pass: %+v %v", r, err)
		}
		if n := tableRows(t, s, "idempotency_keys"); n != 3 {
			t.Fatalf("%d keys left, want the 3 young ones", n)
		}
		if n := tableRows(t, s, "write_rejections"); n != 1 {
			t.Fatalf("%d rejection counters left, want today's", n)
		}
		// Nothing is due now: an idle pass is still one statement, and the
		// next one is planned when the oldest row comes due.
		count := countStatements(t, s)
		r, next, err = s.MaintainNext(ctx)
		if err != nil || r != (models.MaintenanceReport{}) {
			t.Fatalf("idle pass: %+v %v", r, err)
		}
		if n := count(); n > 1 {
			t.Fatalf("idle pass sent %d statements, want 1", n)
		}
		if want := young.Add(models.DefaultIdempotencyKeyTTL); next.IsZero() || next.After(want) {
			t.Fatalf("next pass at %v, want by %v", next, want)
		}
	})
}

// TestRetentionSettings: custom lifetimes apply, and a negative one keeps
// the rows (and leaves the probe out).
func TestRetentionSettings(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		clk := setFanClock(s)
		s.Retention = models.RetentionPolicy{IdempotencyKeys: time.Hour, Rejections: -1}
		if _, err := s.CreateSession(ctx, fanActor, "k", models.CreateSessionInput{Goal: "Refund order 1182 if eligible"}); err != nil {
			t.Fatal(err)
		}
		if err := s.RecordRejection(ctx, models.RejectStale, "q"); err != nil {
			t.Fatal(err)
		}
		clk.Add(365 * 24 * time.Hour)
		r, err := s.Maintain(ctx)
		if err != nil || r.ExpiredKeys != 1 || r.ExpiredRejections != 0 {
			t.Fatalf("pass: %+v %v", r, err)
		}
		if n := tableRows(t, s, "write_rejections"); n != 1 {
			t.Fatalf("%d rejection counters, want the one kept forever", n)
		}
	})
}

// TestRetentionProbeUsesIndexes: the probe's min() of each table and the
// batch's oldest-first selection are index seeks (PostgreSQL with sequential
// scans disabled, so that a missing index shows on a small table; SQLite's
// query plan).
func TestRetentionProbeUsesIndexes(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		for _, q := range []struct{ sql, index string }{
			{`SELECT min(created_at) FROM idempotency_keys`, "idempotency_keys_created_idx"},
			{`SELECT min(bucket) FROM write_rejections`, map[models.Dialect]string{models.Postgres: "write_rejections_pkey", models.SQLite: "sqlite_autoindex_write_rejections_1"}[s.Dialect]},
			{`SELECT scope, key FROM idempotency_keys WHERE created_at <= '2026-01-01' ORDER BY created_at LIMIT 200`, "idempotency_keys_created_idx"},
		} {
			var plan string
			err := s.DB.Transaction(func(tx *gorm.DB) error {
				if s.Dialect == models.SQLite {
					var rows []struct{ Detail string }
					err := tx.Raw(`EXPLAIN QUERY PLAN ` + q.sql).Scan(&rows).Error
					for _, r := range rows {
						plan += r.Detail + "\n"
					}
					return err
				}
				if err := tx.Exec(`SET LOCAL enable_seqscan = off`).Error; err != nil {
					return err
				}
				var lines []string
				err := tx.Raw(`EXPLAIN ` + q.sql).Scan(&lines).Error
				plan = strings.Join(lines, "\n")
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(plan, q.index) {
				t.Fatalf("%s does not use %s:\n%s", q.sql, q.index, plan)
			}
		}
	})
}
