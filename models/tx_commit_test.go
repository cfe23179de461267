package models_test

import (
	"context"
	"errors"
	"testing"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
)

// errGoSide is a rejection decided in Go, after the statements were queued.
var errGoSide = errors.New("rejected in Go")

// TestGoCheckNeverAfterCommit: a rejection that Go decides on a queued
// statement's outcome leaves nothing committed, whether the command is a
// single batch (no reads: PostgreSQL's implicit transaction) or the COMMIT
// would follow reads. On PostgreSQL, COMMIT may travel in the batch of the
// last writes; Tx keeps it out of any batch that still holds a statement Go
// judges (Later itself takes only a translator of the server's error, so
// it cannot reject what the server accepted).
//
// To see it fail, make Tx.commit (models/tx.go) ignore judgedInGo: the
// PostgreSQL subtests then find the row committed although the write
// returned the rejection.
func TestGoCheckNeverAfterCommit(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		for _, read := range []bool{false, true} {
			key := "no-read"
			if read {
				key = "after-read"
			}
			err := s.Write(ctx, func(tx *models.Tx) error {
				if read {
					if _, err := tx.Exec(`UPDATE sessions SET goal = goal WHERE id = 'none'`); err != nil {
						return err
					}
				}
				tx.Later(func(err error) error { return err },
					`INSERT INTO idempotency_keys (scope, key, fingerprint, outcome, created_at) VALUES ('tx-test', ?, '', '{}', ?)`,
					key, models.NewUTCTime(s.Now()))
				tx.LaterChecked(func(rows int64, err error) error {
					if err == nil && rows != 1 {
						return errGoSide
					}
					return err
				}, `UPDATE idempotency_keys SET outcome = outcome WHERE scope = 'nobody'`)
				return nil
			})
			if !errors.Is(err, errGoSide) {
				t.Errorf("%s: write = %v; want the Go-side rejection", key, err)
			}
			if n := countKeys(t, s, key); n != 0 {
				t.Errorf("%s: the write was rejected in Go, yet its insert committed (%d rows)", key, n)
			}
		}
	})
}

// TestGoCheckCommitsSeparately: on PostgreSQL a command whose statements are
// all decided on the server is one batch, and one with a statement judged
// in Go sends COMMIT in a round trip of its own, after the judgement.
func TestGoCheckCommitsSeparately(t *testing.T) {
	t.Parallel()
	s := storetest.New(t, models.Postgres)
	ctx := context.Background()
	insert := `INSERT INTO idempotency_keys (scope, key, fingerprint, outcome, created_at) VALUES ('tx-test', ?, '', '{}', ?)`
	for _, c := range []struct {
		key       string
		goChecked bool
		trips     int64
	}{{"server-only", false, 1}, {"go-checked", true, 2}} {
		_, rt0 := s.WireStats()
		err := s.Write(ctx, func(tx *models.Tx) error {
			tx.Later(func(err error) error { return err }, insert, c.key, models.NewUTCTime(s.Now()))
			if c.goChecked {
				tx.LaterChecked(func(_ int64, err error) error { return err }, `UPDATE idempotency_keys SET outcome = outcome WHERE key = ?`, c.key)
			}
			return nil
		})
		if err != nil {
			t.Fatalf("%s: %v", c.key, err)
		}
		if _, rt1 := s.WireStats(); rt1-rt0 != c.trips {
			t.Errorf("%s: %d round trips; want %d", c.key, rt1-rt0, c.trips)
		}
		if n := countKeys(t, s, c.key); n != 1 {
			t.Errorf("%s: %d rows committed; want 1", c.key, n)
		}
	}
}

func countKeys(t *testing.T, s *models.Store, key string) int64 {
	t.Helper()
	var n int64
	if err := s.DB.Raw(`SELECT count(*) FROM idempotency_keys WHERE scope = 'tx-test' AND key = ?`, key).Scan(&n).Error; err != nil {
		t.Fatal(err)
	}
	return n
}
