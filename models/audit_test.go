package models_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/csv"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"runtime"
	"strings"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
)

// auditWorld is a few sessions on two tickets, written by two controllers
// at known times.
type auditWorld struct {
	t0       time.Time
	sessions []string // T-1, T-1, T-2
	total    int
}

func newAuditWorld(t *testing.T, s *models.Store) auditWorld {
	t.Helper()
	ctx := context.Background()
	t0 := time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)
	clock := t0
	s.Now = func() time.Time { clock = clock.Add(time.Second); return clock }
	w := auditWorld{t0: t0}
	for i, ticket := range []string{"T-1", "T-1", "T-2"} {
		actor := "token:ctl-a"
		if i == 2 {
			actor = "token:ctl-b"
		}
		out, err := s.CreateSession(ctx, actor, "", models.CreateSessionInput{Goal: "goal <&> " + ticket, TicketRef: ticket})
		if err != nil {
			t.Fatal(err)
		}
		sid := out.SessionID
		if _, err := s.Delegate(ctx, sid, actor, fmt.Sprintf("key-%s-%d", ticket, i), models.DelegateInput{Queue: "refunds", Step: "check", ExpectedVersion: v64(1)}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Transition(ctx, sid, models.EventSessionPaused, actor, "", models.TransitionInput{ExpectedVersion: v64(2), Reason: "=cmd|' /C calc'!A0"}); err != nil {
			t.Fatal(err)
		}
		w.sessions = append(w.sessions, sid)
		w.total += 3
	}
	return w
}

func TestAuditTrailFilters(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		w := newAuditWorld(t, s)
		admin := mustUser(t, s, "root@example.com", models.RoleAdmin)
		var all []models.Event
		if err := s.DB.Order("created_at, id").Find(&all).Error; err != nil || len(all) != w.total {
			t.Fatalf("events = %d, %v", len(all), err)
		}
		count := func(f models.AuditFilter) int {
			t.Helper()
			page, err := s.AuditEvents(ctx, models.AuditOpts{AuditFilter: f, Limit: 100})
			if err != nil {
				t.Fatalf("%+v: %v", f, err)
			}
			for i := 1; i < len(page.Events); i++ {
				a, b := page.Events[i-1], page.Events[i]
				if a.CreatedAt.Before(b.CreatedAt.Time) {
					t.Fatalf("not newest first: %v before %v", a.CreatedAt, b.CreatedAt)
				}
			}
			return len(page.Events)
		}
		for _, tc := range []struct {
			f    models.AuditFilter
			want int
		}{
			{models.AuditFilter{}, w.total},
			{models.AuditFilter{SessionID: w.sessions[0]}, 3},
			{models.AuditFilter{TicketRef: "T-1"}, 6},
			{models.AuditFilter{Actor: "token:ctl-b"}, 3},
			{models.AuditFilter{Type: models.EventSessionPaused}, 3},
			{models.AuditFilter{TicketRef: "T-1", Type: models.EventDelegationCreated}, 2},
			// The range is half-open: [third, sixth) holds three events.
			{models.AuditFilter{From: all[2].CreatedAt.Time, To: all[5].CreatedAt.Time}, 3},
			{models.AuditFilter{From: all[2].CreatedAt.Time}, w.total - 2},
			{models.AuditFilter{Actor: "nobody@example.com"}, 0},
		} {
			if got := count(tc.f); got != tc.want {
				t.Errorf("filter %+v: %d events, want %d", tc.f, got, tc.want)
			}
		}
		// An email stands for its user.
		if _, err := s.Transition(ctx, w.sessions[0], models.EventSessionEscalated, admin.Actor(), "", models.TransitionInput{ExpectedVersion: v64(3)}); err != nil {
			t.Fatal(err)
		}
		if got := count(models.AuditFilter{Actor: "ROOT@example.com"}); got != 1 {
			t.Errorf("by email: %d events, want 1", got)
		}
		_, err := s.AuditEvents(ctx, models.AuditOpts{AuditFilter: models.AuditFilter{Type: "nope", From: w.t0, To: w.t0}})
		wantFields(t, err, "type", "to")

		// Keyset pages visit every event once, in order.
		seen := map[string]bool{}
		cursor, pages := "", 0
		for {
			page, err := s.AuditEvents(ctx, models.AuditOpts{Before: cursor, Limit: 4})
			if err != nil {
				t.Fatal(err)
			}
			pages++
			for _, e := range page.Events {
				if seen[e.ID] {
					t.Fatalf("event %s on two pages", e.ID)
				}
				seen[e.ID] = true
			}
			if page.Next == "" {
				break
			}
			cursor = page.Next
		}
		if len(seen) != w.total+1 || pages != 3 {
			t.Fatalf("paged %d events over %d pages, want %d over 3", len(seen), pages, w.total+1)
		}
		_, err = s.AuditEvents(ctx, models.AuditOpts{Before: "garbage"})
		wantFields(t, err, "before")
	})
}

func TestAuditExports(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		w := newAuditWorld(t, s)
		var buf bytes.Buffer
		n, err := s.ExportAuditCSV(ctx, &buf, models.AuditFilter{TicketRef: "T-1"})
		if err != nil || n != int64(buf.Len()) {
			t.Fatalf("csv: %d bytes, %v", n, err)
		}
		recs, err := csv.NewReader(&buf).ReadAll()
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) != 7 || strings.Join(recs[0], ",") != strings.Join(models.AuditCSVHeader, ",") {
			t.Fatalf("csv = %d records, header %v", len(recs), recs[0])
		}
		for _, r := range recs[1:] {
			if r[4] == string(models.EventSessionPaused) && !strings.Contains(r[11], "=cmd") {
				t.Errorf("payload column = %q", r[11])
			}
			if r[8] != "" && !strings.HasPrefix(r[8], "key-T-1") {
				t.Errorf("idempotency key column = %q", r[8])
			}
		}
		buf.Reset()
		if _, err := s.ExportAuditJSONL(ctx, &buf, models.AuditFilter{}); err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
		if len(lines) != w.total {
			t.Fatalf("jsonl lines = %d, want %d", len(lines), w.total)
		}
		var e models.ExportEvent
		if err := json.Unmarshal([]byte(lines[0]), &e); err != nil || e.Hash == "" || len(e.CreatedAt) != len("2006-01-02T15:04:05.000000Z") {
			t.Fatalf("jsonl line = %+v, %v", e, err)
		}
	})
}

// jsonString encodes s as Go's encoding/json does (the recipe says so).
func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// recipeHash follows the transcript's recipe literally: text splicing, no
// use of the models package.
func recipeHash(e models.ExportEvent) string {
	key := ""
	if e.IdempotencyKey != nil {
		key = *e.IdempotencyKey
	}
	text := fmt.Sprintf(`{"session_id":%s,"seq":%d,"type":%s,"actor":%s,"version_before":%d,"version_after":%d,"payload":%s,"idempotency_key":%s,"prev_hash":%s,"created_at":%s}`,
		jsonString(e.SessionID), e.Seq, jsonString(string(e.Type)), jsonString(e.Actor), e.VersionBefore, e.VersionAfter,
		e.Payload, jsonString(key), jsonString(e.PrevHash), jsonString(e.CreatedAt))
	sum := sha256.Sum256([]byte(text))
	return hex.EncodeToString(sum[:])
}

// verifyTranscript re-verifies a transcript by the recipe; it returns the
// first problem or "".
func verifyTranscript(tr models.Transcript) string {
	prev := ""
	for i, e := range tr.Events {
		if e.Seq != int64(i+1) {
			return fmt.Sprintf("seq %d at position %d", e.Seq, i)
		}
		if e.PrevHash != prev {
			return fmt.Sprintf("chain broken at seq %d", e.Seq)
		}
		if recipeHash(e) != e.Hash {
			return fmt.Sprintf("hash mismatch at seq %d", e.Seq)
		}
		prev = e.Hash
	}
	if prev != tr.LastHash {
		return "last_hash mismatch"
	}
	return ""
}

func TestTranscriptReverifies(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		agent := mustUser(t, s, "ann@example.com", models.RoleAgent)
		// Text that Go's JSON escapes (<, >, &, a line separator) and an
		// idempotency key exercise the recipe's escaping rules.
		out, err := s.CreateSession(ctx, "token:ctl", "create-1", models.CreateSessionInput{Goal: "Refund <order> & notify\u2028now", TicketRef: "T-<1>"})
		if err != nil {
			t.Fatal(err)
		}
		sid := out.SessionID
		steps := []func() error{
			func() error {
				_, err := s.Transition(ctx, sid, models.EventSessionEscalated, "token:ctl", "", models.TransitionInput{ExpectedVersion: v64(1), Question: "ok?"})
				return err
			},
			func() error {
				_, err := s.ClaimEscalation(ctx, sid, agent, "", models.ClaimInput{ExpectedVersion: v64(2)})
				return err
			},
			func() error {
				_, err := s.AddNote(ctx, sid, agent, "note-1", models.NoteInput{ExpectedVersion: v64(3), Text: "<script>alert('&')</script> ünïcödé"})
				return err
			},
			func() error {
				_, err := s.CompleteHuman(ctx, sid, agent, "", models.CompleteInput{ExpectedVersion: v64(4), Resolution: "done"})
				return err
			},
			func() error {
				_, err := s.Transition(ctx, sid, models.EventSessionEscalated, "token:ctl", "", models.TransitionInput{ExpectedVersion: v64(5)})
				if models.ErrorCode(err) != models.EILLEGAL {
					return fmt.Errorf("escalating a completed session: %v", err)
				}
				return nil
			},
		}
		for i, step := range steps {
			if err := step(); err != nil {
				t.Fatalf("step %d: %v", i, err)
			}
		}
		var buf bytes.Buffer
		if err := s.WriteTranscript(ctx, &buf, sid, "user:usr_admin", nil); err != nil {
			t.Fatal(err)
		}
		var tr models.Transcript
		if err := json.Unmarshal(buf.Bytes(), &tr); err != nil {
			t.Fatalf("transcript is not JSON: %v\n%s", err, buf.String())
		}
		if tr.Format != models.TranscriptFormat || tr.SessionID != sid || len(tr.Events) != 5 || tr.StateVersion != 5 ||
			tr.Note == "" || len(tr.Verification.Recipe) == 0 || !strings.Contains(tr.Verification.Python, "hashlib.sha256") {
			t.Fatalf("transcript head = %+v with %d events", tr.Verification, len(tr.Events))
		}
		if problem := verifyTranscript(tr); problem != "" {
			t.Fatalf("recipe fails on an intact log: %s", problem)
		}
		// Any edit breaks it.
		tampered := tr
		tampered.Events = append([]models.ExportEvent(nil), tr.Events...)
		tampered.Events[3].Payload = strings.Replace(tampered.Events[3].Payload, "script", "strong", 1)
		if verifyTranscript(tampered) == "" {
			t.Fatal("recipe accepts a tampered payload")
		}
		tampered.Events = append(append([]models.ExportEvent(nil), tr.Events[:2]...), tr.Events[3:]...)
		if verifyTranscript(tampered) == "" {
			t.Fatal("recipe accepts a removed event")
		}
		if err := s.WriteTranscript(ctx, io.Discard, "ses_missing", "", nil); models.ErrorCode(err) != models.ENOTFOUND {
			t.Fatalf("unknown session: %v", err)
		}
	})
}

// bulkEvents inserts n events over sessions of perSession events each, with
// raw multi-row SQL on PostgreSQL: types cycle through ten, actors through
// fifty, tickets cover four sessions each, one second apart from 2026-01-01.
// The review.scored events (one in ten) carry a payload of payloadLen bytes,
// the others a small one.
//
// Speed: the events table of this private schema is made UNLOGGED (nothing
// references it and plans do not change), and, where the test role may, the
// foreign key trigger is skipped for the one INSERT (the generated session
// ids exist by construction).
func bulkEvents(t *testing.T, s *models.Store, n, perSession int, payloadLen int) {
	t.Helper()
	sessions := n / perSession
	payload := `{"note":"` + strings.Repeat("x", payloadLen) + `"}`
	if err := s.DB.Exec(`ALTER TABLE events SET UNLOGGED`).Error; err != nil {
		t.Fatalf("unlogged events: %v", err)
	}
	err := s.DB.Exec(`INSERT INTO sessions (id, ticket_ref, goal, status, priority, state_version, last_hash, created_at, updated_at)
SELECT 'ses_' || lpad(g::text, 8, '0'), 'T-' || (g / 4), 'bulk', 'completed', 3, ?, '', now(), now()
FROM generate_series(0, ? - 1) g`, perSession, sessions).Error
	if err == nil {
		err = s.DB.Exec(`INSERT INTO session_states (session_id, state) SELECT id, '{}' FROM sessions ON CONFLICT DO NOTHING`).Error
	}
	if err != nil {
		t.Fatalf("bulk sessions: %v", err)
	}
	insert := func(tx *gorm.DB) error {
		return tx.Exec(`INSERT INTO events (id, session_id, seq, type, actor, version_before, version_after, payload, prev_hash, hash, created_at)
SELECT 'evt_' || lpad(g::text, 10, '0'), 'ses_' || lpad((g % ?)::text, 8, '0'), g / ? + 1,
	(ARRAY['session.created','delegation.created','delegation.leased','result.completed','result.failed',
	       'session.paused','session.resumed','human.claimed','human.noted','review.scored'])[g % 10 + 1],
	'token:w' || (g % 50), g / ?, g / ? + 1, CASE WHEN g % 10 = 9 THEN ? ELSE '{}' END, '', 'h',
	timestamptz '2026-01-01 00:00:00+00' + g * interval '1 second'
FROM generate_series(0, ? - 1) g`, sessions, sessions, sessions, sessions, payload, n).Error
	}
	err = s.DB.Transaction(func(tx *gorm.DB) error {
		if err := tx.Exec(`SET LOCAL session_replication_role = replica`).Error; err != nil {
			return err
		}
		return insert(tx)
	})
	if err != nil {
		t.Logf("bulk insert without the foreign key trigger failed (%v); inserting with it", err)
		if err := insert(s.DB); err != nil {
			t.Fatalf("bulk events: %v", err)
		}
	}
	if err := s.DB.Exec(`ANALYZE sessions; ANALYZE events`).Error; err != nil {
		t.Fatal(err)
	}
}

// probe is an io.Writer that counts bytes and flushes and samples the heap
// as the export streams through it.
type probe struct {
	bytes, writes, flushes int64
	base, peak             uint64
	firstAt                int64 // bytes written before the first flush
}

func (p *probe) Write(b []byte) (int, error) {
	p.bytes += int64(len(b))
	p.writes++
	if p.writes%8 == 1 {
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		p.peak = max(p.peak, ms.HeapAlloc)
	}
	return len(b), nil
}

func (p *probe) Flush() {
	if p.flushes == 0 {
		p.firstAt = p.bytes
	}
	p.flushes++
}

// TestAuditAtScale fills one PostgreSQL schema with a million events and
// checks that every filtered page query of the audit trail is served by an
// index (no sequential scan of events), and that exporting a filter that
// matches 100,000 events streams in batches with bounded memory.
//
// It does not run in parallel: the heap is measured, and other tests'
// allocations would blur it.
func TestAuditAtScale(t *testing.T) {
	s := storetest.New(t, models.Postgres)
	ctx := context.Background()
	const total = 1_000_000
	start := time.Now()
	bulkEvents(t, s, total, 50, 400)
	t.Logf("inserted %d events in %v", total, time.Since(start).Round(time.Millisecond))
	u := mustUser(t, s, "ops@example.com", models.RoleAdmin)
	if err := s.DB.Exec(`UPDATE events SET actor = ? WHERE id = 'evt_0000000007'`, u.Actor()).Error; err != nil {
		t.Fatal(err)
	}

	from, to := time.Date(2026, 1, 3, 0, 0, 0, 0, time.UTC), time.Date(2026, 1, 4, 0, 0, 0, 0, time.UTC)
	for _, f := range []models.AuditFilter{
		{},
		{SessionID: "ses_00000042"},
		{TicketRef: "T-42"},
		{Actor: "token:w7"},
		{Actor: "ops@example.com"},
		{Type: models.EventHumanNoted},
		{From: from, To: to},
		{From: from},
		{Actor: "token:w7", Type: models.EventResultCompleted},
		{SessionID: "ses_00000042", Type: models.EventHumanNoted},
		{TicketRef: "T-42", Actor: "token:w3", From: from, To: to},
	} {
		for _, cursor := range []bool{false, true} {
			sql, err := s.AuditPageSQL(ctx, f, cursor)
			if err != nil {
				t.Fatal(err)
			}
			var plan []string
			if err := s.DB.Raw("EXPLAIN " + sql).Scan(&plan).Error; err != nil {
				t.Fatalf("explain %s: %v", sql, err)
			}
			text := strings.Join(plan, "\n")
			if strings.Contains(text, "Seq Scan on events") {
				t.Errorf("filter %+v (cursor %v) scans events sequentially:\n%s\n%s", f, cursor, sql, text)
			}
		}
	}

	// A filter matching 100,000 events (one type in ten) streams out.
	f := models.AuditFilter{Type: models.EventReviewScored}
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	p := &probe{base: ms.HeapAlloc, peak: ms.HeapAlloc}
	w := bufio.NewWriterSize(p, 4096) // a small client buffer, like a socket's
	n, err := s.ExportAuditCSV(ctx, struct {
		io.Writer
		flusher
	}{w, flusher{w, p}}, f)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	rows := total / 10
	if n != p.bytes || n < int64(rows)*400 {
		t.Fatalf("exported %d bytes (probe saw %d) for %d rows", n, p.bytes, rows)
	}
	growth := int64(p.peak) - int64(p.base)
	t.Logf("export: %d bytes, %d flushes, heap growth at peak %d bytes", n, p.flushes, growth)
	if growth > n/4 {
		t.Errorf("heap grew by %d bytes while exporting %d: the export is not streamed", growth, n)
	}
	// Streamed: flushed batch by batch, the first long before the end.
	if p.flushes < int64(rows/models.AuditExportBatch) || p.firstAt == 0 || p.firstAt > n/50 {
		t.Errorf("flushes = %d, first flush after %d of %d bytes", p.flushes, p.firstAt, n)
	}
}

// flusher forwards Flush to the buffered writer and records it in the probe.
type flusher struct {
	w *bufio.Writer
	p *probe
}

func (f flusher) Flush() {
	_ = f.w.Flush()
	f.p.Flush()
}
