package models_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
)

// lockedBuffer is a log sink the store's goroutines may share.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) count(s string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Count(l.b.String(), s)
}

// TestReadReplicaRouting runs a real primary and streaming standby
// (storetest.StartReplicaPair) and checks the read routing end to end:
// request reads reach the standby, a reader's own write stays visible to it
// while the standby's replay is paused (and another reader's does not
// until replay resumes), the standby's replay position is cached, and reads
// fail over to the primary when the standby stops, logged once, and come
// back when it returns.
func TestReadReplicaRouting(t *testing.T) {
	pair := storetest.StartReplicaPair(t)
	logs := &lockedBuffer{}
	ctx := context.Background()
	s, err := models.Open(ctx, pair.PrimaryURL, models.OpenOpts{
		Logger: slog.New(slog.NewTextHandler(logs, nil)), ReadURL: pair.StandbyURL})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.MigrateUp(ctx); err != nil {
		t.Fatal(err)
	}
	s.ReplicaTimings(20*time.Millisecond, 300*time.Millisecond, time.Minute)
	pair.WaitReplayed(ctx)

	// A read URL of another cluster is refused at start.
	if other, err := models.Open(ctx, storetest.NewURL(t, models.Postgres), models.OpenOpts{
		Logger: slog.New(slog.DiscardHandler), ReadURL: pair.StandbyURL}); err == nil || !strings.Contains(err.Error(), "not a replica of the database") {
		if other != nil {
			other.Close()
		}
		t.Fatalf("a standby of another cluster: %v, want refused", err)
	}

	// GET requests of two API readers, and a POST of the first.
	getA, _ := models.WithReadScope(ctx, "token:a", 0, true)
	getB, _ := models.WithReadScope(ctx, "token:b", 0, true)
	postA, postScope := models.WithReadScope(ctx, "token:a", 0, false)

	// Reads of a GET come from the standby; background reads and a POST's
	// from the primary.
	for _, c := range []struct {
		name    string
		ctx     context.Context
		standby bool
	}{{"GET", getB, true}, {"POST", postA, false}, {"background", ctx, false}} {
		got, err := s.ReadInRecovery(c.ctx)
		if err != nil || got != c.standby {
			t.Fatalf("%s read: in recovery %v (%v), want %v", c.name, got, err, c.standby)
		}
	}
	before := s.ReplicaStats()
	if _, err := s.ListSessions(getB, models.SessionQuery{Limit: 10}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Inbox(getB, models.InboxOpts{}); err != nil {
		t.Fatal(err)
	}
	if after := s.ReplicaStats(); after.Standby <= before.Standby || after.Primary != before.Primary {
		t.Fatalf("list and inbox reads: stats %+v then %+v, want standby reads only", before, after)
	}

	// Replay paused: the lag is as long as the test wants.
	standby := pair.Standby()
	if _, err := standby.ExecContext(ctx, `SELECT pg_wal_replay_pause()`); err != nil {
		t.Fatal(err)
	}
	id := storetest.Session(postA, t, s, nil)
	floor, changed := postScope.Floor()
	if floor == 0 || !changed {
		t.Fatalf("the write left no floor: %v %v", floor, changed)
	}
	// The writer (same token) sees its write: its read goes to the primary.
	if got, err := s.GetSession(getA, id); err != nil || got.ID != id {
		t.Fatalf("writer's read: %+v %v", got, err)
	}
	if rec, _ := s.ReadInRecovery(getA); rec {
		t.Fatal("the writer's read went to the standby before it replayed the write")
	}
	// So does a browser bringing the floor in its cookie (no token key).
	cookie, _ := models.WithReadScope(ctx, "", floor, true)
	if _, err := s.GetSession(cookie, id); err != nil {
		t.Fatalf("browser with the floor: %v", err)
	}
	// Another reader reads the standby, which has not replayed it yet.
	if _, err := s.GetSession(getB, id); !errors.As(err, new(*models.NotFoundError)) {
		t.Fatalf("other reader during paused replay: %v, want not found", err)
	}
	// The replay position is cached: twenty floored reads, about one probe
	// (at most one per 20 ms here).
	s.ReplicaTimings(time.Hour, 0, 0)
	p0 := s.ReplicaStats().ReplayProbes
	for range 20 {
		if _, err := s.GetSession(getA, id); err != nil {
			t.Fatal(err)
		}
	}
	if n := s.ReplicaStats().ReplayProbes - p0; n > 1 {
		t.Fatalf("20 reads probed the standby's replay position %d times", n)
	}
	s.ReplicaTimings(20*time.Millisecond, 0, 0)
	time.Sleep(30 * time.Millisecond)

	if _, err := standby.ExecContext(ctx, `SELECT pg_wal_replay_resume()`); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := s.GetSession(getB, id)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the other reader never saw the write: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Replayed: the writer's reads go back to the standby, and its floor is
	// forgotten.
	time.Sleep(30 * time.Millisecond)
	if rec, err := s.ReadInRecovery(getA); err != nil || !rec {
		t.Fatalf("writer's read after replay: in recovery %v (%v), want the standby", rec, err)
	}
	cookie2, cookieScope := models.WithReadScope(ctx, "", floor, true)
	if _, err := s.GetSession(cookie2, id); err != nil {
		t.Fatal(err)
	}
	if f, changed := cookieScope.Floor(); f != 0 || !changed {
		t.Fatalf("the browser's floor after replay: %v %v, want dropped", f, changed)
	}

	// The standby stops: reads fail over to the primary, logged once.
	pair.StopStandby()
	f0 := s.ReplicaStats().Failovers
	for i := range 5 {
		got, err := s.GetSession(getB, id)
		if err != nil || got.ID != id {
			t.Fatalf("read %d with the standby down: %+v %v", i, got, err)
		}
		if rec, err := s.ReadInRecovery(getB); err != nil || rec {
			t.Fatalf("read %d with the standby down: in recovery %v (%v)", i, rec, err)
		}
	}
	st := s.ReplicaStats()
	if !st.Down || st.Failovers <= f0 {
		t.Fatalf("stats with the standby down: %+v", st)
	}
	// Retried later (300 ms here): the retry fails over again, logged still once.
	time.Sleep(350 * time.Millisecond)
	if _, err := s.GetSession(getB, id); err != nil {
		t.Fatal(err)
	}
	if n := logs.count("read replica failed"); n != 1 {
		t.Fatalf("the standby's failure was logged %d times, want once:\n%s", n, logs.b.String())
	}
	// It comes back: reads return to it after the retry delay.
	pair.StartStandby()
	deadline = time.Now().Add(30 * time.Second)
	for {
		rec, err := s.ReadInRecovery(getB)
		if err == nil && rec {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("reads did not return to the standby: %v %v", rec, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if logs.count("read replica answers again") != 1 {
		t.Fatalf("the standby's return was not logged once:\n%s", logs.b.String())
	}
}

// TestReadReplicaNeedsPostgres pins the startup error: a read URL with
// SQLite, or a read URL that is not PostgreSQL.
func TestReadReplicaNeedsPostgres(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct{ db, read string }{
		{"sqlite:" + t.TempDir() + "/x.db", "postgres://127.0.0.1:1/x"},
		{storetest.PostgresURL(), "sqlite:" + t.TempDir() + "/y.db"},
	} {
		s, err := models.Open(ctx, c.db, models.OpenOpts{Logger: slog.New(slog.DiscardHandler), ReadURL: c.read})
		if err == nil {
			s.Close()
		}
		if !errors.Is(err, models.ErrReadReplicaDialect) {
			t.Fatalf("open %s with read url %s: %v, want ErrReadReplicaDialect", c.db, c.read, err)
		}
	}
}

func TestParseLSN(t *testing.T) {
	for _, c := range []string{"0/0", "16/B374D848", "FFFFFFFF/FFFFFFFF"} {
		l, err := models.ParseLSN(c)
		if err != nil || l.String() != c {
			t.Fatalf("ParseLSN(%q) = %v %v", c, l, err)
		}
	}
	if a, b := mustLSN(t, "1/0"), mustLSN(t, "0/FFFFFFFF"); a <= b {
		t.Fatal("1/0 should be after 0/FFFFFFFF")
	}
	if _, err := models.ParseLSN("nope"); err == nil {
		t.Fatal("ParseLSN accepted nope")
	}
}

func mustLSN(t *testing.T, s string) models.LSN {
	t.Helper()
	l, err := models.ParseLSN(s)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestReadReplicaDownAtStart: a standby that does not answer at start does
// not stop the server: reads use the primary, and the failure is logged
// once however many reads follow.
func TestReadReplicaDownAtStart(t *testing.T) {
	ctx := context.Background()
	logs := &lockedBuffer{}
	s, err := models.Open(ctx, storetest.NewURL(t, models.Postgres), models.OpenOpts{
		Logger: slog.New(slog.NewTextHandler(logs, nil)), ReadURL: "postgres://postgres@127.0.0.1:1/test?sslmode=disable"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.MigrateUp(ctx); err != nil {
		t.Fatal(err)
	}
	get, _ := models.WithReadScope(ctx, "token:a", 0, true)
	id := storetest.Session(ctx, t, s, nil)
	s.ReplicaTimings(0, time.Millisecond, 0)
	for range 5 {
		if _, err := s.GetSession(get, id); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Millisecond) // past the retry delay: each read tries the standby again
	}
	if st := s.ReplicaStats(); !st.Down || st.Standby != 0 || st.Failovers == 0 {
		t.Fatalf("stats %+v", st)
	}
	if n := logs.count("read replica failed"); n != 1 {
		t.Fatalf("logged %d times, want once:\n%s", n, logs.b.String())
	}
}
