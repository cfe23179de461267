package models_test

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
)

// ownConn is a connection of s's pool that the test keeps to itself (a
// transaction or a session lock held across other calls), closed at the end.
func ownConn(ctx context.Context, t *testing.T, s *models.Store) *sql.Conn {
	t.Helper()
	sqlDB, err := s.DB.DB()
	if err != nil {
		t.Fatal(err)
	}
	c, err := sqlDB.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// execOn runs each statement on c, failing the test on an error.
func execOn(ctx context.Context, t *testing.T, c *sql.Conn, stmts ...string) {
	t.Helper()
	for _, q := range stmts {
		if _, err := c.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

// bloatCounterTable updates every row of table again and again while another
// connection holds a snapshot, as a long report, a backup or a bulk load
// does: no old version can be pruned, so the new ones go to new pages; then
// it vacuums, as autovacuum would, which empties the old pages but cannot
// give them back (the live rows sit on the last ones).
func bloatCounterTable(ctx context.Context, t *testing.T, s *models.Store, table string, rounds int) {
	t.Helper()
	hold := ownConn(ctx, t, s)
	defer hold.Close() // back to the pool now; the cleanup's second Close is a no-op
	execOn(ctx, t, hold, "BEGIN ISOLATION LEVEL REPEATABLE READ", "SELECT count(*) FROM "+table)
	for range rounds {
		if err := s.DB.Exec("UPDATE " + table + " SET n = n").Error; err != nil {
			t.Fatal(err)
		}
	}
	execOn(ctx, t, hold, "COMMIT")
	if err := s.DB.Exec("VACUUM " + table).Error; err != nil {
		t.Fatal(err)
	}
}

// blocksRead is the shared buffers a statement touched (hit or read).
func blocksRead(t *testing.T, s *models.Store, sql string) float64 {
	t.Helper()
	plan, _ := explainPlan(t, s, sql)
	hit, _ := plan["Shared Hit Blocks"].(float64)
	read, _ := plan["Shared Read Blocks"].(float64)
	return hit + read
}

func tableBy(ts []models.TableSize, name string) (models.TableSize, bool) {
	for _, x := range ts {
		if x.Name == name {
			return x, true
		}
	}
	return models.TableSize{}, false
}

// TestIndexUpkeepCounterTables: a counter table bloated by updates under a
// held snapshot is reported by a dry run and left as it is, then rewritten
// to the pages its rows need while writers keep claiming and releasing the
// sessions it counts: no write fails, the counts still equal the sessions,
// and reading the table touches a fraction of the pages. A table whose
// writer holds its lock past the lock wait is reported busy, not rewritten,
// and the call neither fails nor waits for the writer.
func TestIndexUpkeepCounterTables(t *testing.T) {
	ctx := context.Background()
	s := storetest.New(t, models.Postgres)
	queues := []string{"refunds", "billing", "shipping"}
	var sessions []string
	for i := range 30 {
		sessions = append(sessions, escalated(ctx, t, s, 1+i%5, fmt.Sprintf("T-%d", i), queues[i%len(queues)]))
	}
	const read = `SELECT CAST(sum(n) AS BIGINT) FROM inbox_counts WHERE n > 0`

	rep, err := s.UpkeepIndexes(ctx, models.IndexUpkeepOpts{})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Tables) != 5 || len(rep.TablesBloated) != 0 {
		t.Fatalf("fresh counter tables: %+v, bloated %+v; want five checked, none bloated", rep.Tables, rep.TablesBloated)
	}

	bloatCounterTable(ctx, t, s, "inbox_counts", 400)
	before := blocksRead(t, s, read)
	rep, err = s.UpkeepIndexes(ctx, models.IndexUpkeepOpts{DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	bloated, ok := tableBy(rep.TablesBloated, "inbox_counts")
	if !ok || len(rep.TablesRewritten) != 0 {
		t.Fatalf("dry run after bloating: tables %+v, bloated %+v, rewritten %+v", rep.Tables, rep.TablesBloated, rep.TablesRewritten)
	}
	t.Logf("bloated: %+v; reading it touched %.0f blocks", bloated, before)
	if again := blocksRead(t, s, read); again != before {
		t.Errorf("the dry run changed the table: %.0f blocks read before, %.0f after", before, again)
	}

	// Writers claim and release the counted sessions all through the rewrite
	// (a claim as one admin, the forced release as another: an admin
	// releasing their own claim is not a forced release).
	var (
		wg       sync.WaitGroup
		stop     atomic.Bool
		writes   atomic.Int64
		mu       sync.Mutex
		failures []error
	)
	failed := func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(failures) > 0
	}
	for w := range 3 {
		wg.Go(func() {
			claimer := models.User{ID: fmt.Sprintf("usr_w%d", w), Name: "W", Role: models.RoleAdmin}
			releaser := models.User{ID: fmt.Sprintf("usr_w%d", (w+1)%3), Name: "W", Role: models.RoleAdmin}
			for i := w; !stop.Load(); i += 3 {
				id := sessions[i%len(sessions)]
				row, err := s.GetSession(ctx, id)
				if err == nil {
					v := row.StateVersion
					switch row.Status {
					case models.StatusEscalated:
						_, err = s.ClaimEscalation(ctx, id, claimer, "", models.ClaimInput{ExpectedVersion: &v})
					case models.StatusHumanActive:
						_, err = s.ForceRelease(ctx, id, releaser, "", models.ReleaseInput{ExpectedVersion: &v, Reason: "shift over"})
					}
				}
				if err == nil {
					writes.Add(1)
					continue
				}
				mu.Lock()
				failures = append(failures, err)
				mu.Unlock()
				return
			}
		})
	}
	// waitWrites waits until the writers have made n more writes; a writer
	// that fails ends the wait (and the test, below).
	waitWrites := func(n int64) {
		for target := writes.Load() + n; writes.Load() < target && !failed(); {
			if _, err := s.GetSession(ctx, sessions[0]); err != nil {
				t.Fatal(err)
			}
		}
	}
	waitWrites(5)
	rep, err = s.UpkeepIndexes(ctx, models.IndexUpkeepOpts{Counters: models.CounterUpkeepOpts{LockWait: 5000}})
	waitWrites(5)
	stop.Store(true)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	for _, err := range failures {
		t.Errorf("write beside the rewrite: %v", err)
	}
	done, ok := tableBy(rep.TablesRewritten, "inbox_counts")
	if !ok {
		t.Fatalf("inbox_counts was not rewritten: bloated %+v, rewritten %+v, busy %v", rep.TablesBloated, rep.TablesRewritten, rep.TablesBusy)
	}
	after := blocksRead(t, s, read)
	t.Logf("rewritten beside %d writes in %v: %+v; reading it touched %.0f blocks, %.0f before", writes.Load(), done.Took, done, after, before)
	// The writers go on after the rewrite, so the table may have grown a
	// few pages again by the time it is measured.
	if done.After <= 0 || done.After*4 > done.Pages || after*4 > before {
		t.Errorf("after the rewrite: %d pages (needs %d), %.0f blocks read against %.0f before", done.After, done.Needs, after, before)
	}
	if exact, stored := exactInboxCounts(t, s), storedInboxCounts(t, s); !sameCounts(exact, stored) {
		t.Errorf("maintained counts %v, sessions %v", stored, exact)
	}
	if drift, err := s.VerifyInboxCounts(ctx); err != nil || len(drift) != 0 {
		t.Errorf("verify inbox counts: %v %v", drift, err)
	}
	if rep, err = s.UpkeepIndexes(ctx, models.IndexUpkeepOpts{}); err != nil || len(rep.TablesBloated) != 0 {
		t.Fatalf("a second pass found %+v bloated (%v); want none", rep.TablesBloated, err)
	}

	// A writer in the middle of its transaction holds the table: the
	// rewrite gives up after its lock wait and leaves it for the next round.
	bloatCounterTable(ctx, t, s, "inbox_counts", 400)
	writer := ownConn(ctx, t, s)
	execOn(ctx, t, writer, "BEGIN", "LOCK TABLE inbox_counts IN ROW EXCLUSIVE MODE")
	rep, err = s.UpkeepIndexes(ctx, models.IndexUpkeepOpts{Counters: models.CounterUpkeepOpts{LockWait: 50}})
	if err != nil {
		t.Fatalf("upkeep beside a writer holding the table: %v", err)
	}
	if _, ok := tableBy(rep.TablesRewritten, "inbox_counts"); ok || len(rep.TablesBusy) != 1 || rep.TablesBusy[0] != "inbox_counts" {
		t.Errorf("beside a writer holding the table: rewritten %+v, busy %v; want inbox_counts busy", rep.TablesRewritten, rep.TablesBusy)
	}
	execOn(ctx, t, writer, "COMMIT")
	if rep, err = s.UpkeepIndexes(ctx, models.IndexUpkeepOpts{}); err != nil {
		t.Fatal(err)
	}
	if _, ok := tableBy(rep.TablesRewritten, "inbox_counts"); !ok {
		t.Errorf("the next round, with the writer gone: rewritten %+v, busy %v", rep.TablesRewritten, rep.TablesBusy)
	}
}

// TestIndexUpkeepLockIsPerSchema: while another process holds the upkeep
// lock of a schema, UpkeepIndexes there skips; a store in another schema of
// the same database does its upkeep all the same.
func TestIndexUpkeepLockIsPerSchema(t *testing.T) {
	ctx := context.Background()
	a, b := storetest.New(t, models.Postgres), storetest.New(t, models.Postgres)
	var schema string
	if err := a.DB.Raw("SELECT current_schema()").Scan(&schema).Error; err != nil {
		t.Fatal(err)
	}
	holder := ownConn(ctx, t, a)
	if _, err := holder.ExecContext(ctx, "SELECT pg_advisory_lock($1)", models.IndexUpkeepLockKey(schema)); err != nil {
		t.Fatal(err)
	}
	if rep, err := a.UpkeepIndexes(ctx, models.IndexUpkeepOpts{}); err != nil || !rep.Skipped || len(rep.Tables) != 0 {
		t.Errorf("upkeep of the locked schema: skipped %v, tables %+v (%v); want skipped", rep.Skipped, rep.Tables, err)
	}
	if rep, err := b.UpkeepIndexes(ctx, models.IndexUpkeepOpts{}); err != nil || rep.Skipped || len(rep.Tables) != 5 {
		t.Errorf("upkeep of another schema: skipped %v, tables %+v (%v); want it done", rep.Skipped, rep.Tables, err)
	}
	if _, err := holder.ExecContext(ctx, "SELECT pg_advisory_unlock($1)", models.IndexUpkeepLockKey(schema)); err != nil {
		t.Fatal(err)
	}
	if rep, err := a.UpkeepIndexes(ctx, models.IndexUpkeepOpts{}); err != nil || rep.Skipped {
		t.Errorf("upkeep after the lock was let go: skipped %v (%v)", rep.Skipped, err)
	}
}
