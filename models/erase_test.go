package models_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
	"gorm.io/gorm"
)

// secret is the personal data of the erased ticket; other is another
// ticket's, which must stay.
const (
	secret = "Zanzibarian"
	other  = "Quokkaberry"
)

// personalSession runs a session of ticket through a delegation with a
// leased packet (stored idempotent outcome), a worker's result with output
// and evidence, and a human note, every text carrying word.
func personalSession(ctx context.Context, t *testing.T, s *models.Store, ticket, word string, agent models.User) string {
	t.Helper()
	sid := storetest.Session(ctx, t, s, &storetest.SessionOpts{
		Goal: "Refund " + word + " order 1182", TicketRef: ticket, Facts: map[string]any{"customer": word + " Doe", "email": strings.ToLower(word) + "@example.com"},
	})
	v := int64(1)
	if _, err := s.Delegate(ctx, sid, "test:controller", "", models.DelegateInput{Queue: "refunds", Step: "check-eligibility",
		Instructions: "Call " + word + " back", ExpectedVersion: &v}); err != nil {
		t.Fatalf("delegate: %v", err)
	}
	l, err := s.Claim(ctx, "refunds", "w-1", "token:worker", "claim-"+sid)
	if err != nil || l == nil {
		t.Fatalf("claim: %v", err)
	}
	if _, err := s.AddNote(ctx, sid, agent, "", models.NoteInput{Text: word + " phoned about the refund", EvidenceClaim: word + " said so", EvidenceSource: "call"}); err != nil {
		t.Fatalf("note: %v", err)
	}
	if _, err := s.SubmitResult(ctx, l.DelegationID, "token:worker", "result-"+sid, models.ResultInput{
		LeaseToken: l.LeaseToken, SessionID: sid, Step: "check-eligibility", ResultType: "completed",
		Output:   json.RawMessage(`{"eligible": true, "card_holder": "` + word + `"}`),
		Evidence: []models.Evidence{{Claim: word + " paid", Source: "orders-db:1"}},
	}); err != nil {
		t.Fatalf("result: %v", err)
	}
	return sid
}

// dump is every row of the tables that hold session data, as text.
func dump(t *testing.T, s *models.Store) string {
	t.Helper()
	var b strings.Builder
	tables := []string{"events", "session_states", "sessions", "delegations", "idempotency_keys", "admin_audit", "session_erasures"}
	if s.Dialect == models.SQLite {
		tables = append(tables, "sessions_fts")
	}
	for _, table := range tables {
		rows, err := s.DB.Raw(`SELECT * FROM ` + table).Rows()
		if err != nil {
			t.Fatalf("dump %s: %v", table, err)
		}
		cols, _ := rows.Columns()
		for rows.Next() {
			vals := make([]any, len(cols))
			ptrs := make([]any, len(cols))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			if err := rows.Scan(ptrs...); err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(&b, "%s:", table)
			for _, v := range vals {
				if bs, ok := v.([]byte); ok {
					v = string(bs)
				}
				fmt.Fprintf(&b, " %v", v)
			}
			b.WriteByte('\n')
		}
		rows.Close()
	}
	return b.String()
}

func searchCount(ctx context.Context, t *testing.T, s *models.Store, q string) int {
	t.Helper()
	page, err := s.ListSessions(ctx, models.SessionQuery{Q: q})
	if err != nil {
		t.Fatalf("search %q: %v", q, err)
	}
	return len(page.Sessions)
}

type eventRow struct {
	ID, Payload, Hash string
}

func erasedEventsOf(t *testing.T, s *models.Store, sid string) []eventRow {
	t.Helper()
	var rows []eventRow
	if err := s.DB.Raw(`SELECT id, payload, hash FROM events WHERE session_id = ? ORDER BY seq`, sid).Scan(&rows).Error; err != nil {
		t.Fatal(err)
	}
	return rows
}

func stateOf(t *testing.T, s *models.Store, sid string) string {
	t.Helper()
	var st string
	if err := s.DB.Raw(`SELECT state FROM session_states WHERE session_id = ?`, sid).Scan(&st).Error; err != nil {
		t.Fatal(err)
	}
	return st
}

func verifyWithCheckpoints(ctx context.Context, t *testing.T, s *models.Store, cp *models.Checkpointer) models.VerifyReport {
	t.Helper()
	vr, err := s.Verify(ctx, models.VerifyOpts{Checkpoints: &models.CheckpointVerifyOpts{PublicKeys: cp.PublicKeys(), All: true}})
	if err != nil {
		t.Fatalf("verify: %v", err)
	}
	return vr
}

// TestEraseTicketKeepsTheChainVerifiable: erasing a ticket removes its text
// from every table and from the search index, keeps verify (chains,
// replay from the erasure's state, checkpoints) and the offline transcript
// clean, leaves another ticket alone, still catches hand-edits, and is
// idempotent; an event written after the erasure is erased by the next run.
func TestEraseTicketKeepsTheChainVerifiable(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		agent := mustUser(t, s, "ann@example.com", models.RoleAgent)
		erased := personalSession(ctx, t, s, "T-1182", secret, agent)
		_ = storetest.Session(ctx, t, s, &storetest.SessionOpts{Goal: "Second " + secret + " question", TicketRef: "T-1182"})
		kept := personalSession(ctx, t, s, "T-2000", other, agent)

		key, err := models.ParseCheckpointKey(mustGenerateKey(t))
		if err != nil {
			t.Fatal(err)
		}
		cp := &models.Checkpointer{Store: s, Key: key}
		if _, _, err := cp.Write(ctx, "test"); err != nil {
			t.Fatal(err)
		}
		if before := dump(t, s); !strings.Contains(before, secret) || !strings.Contains(strings.ToLower(before), strings.ToLower(secret)+"@example.com") {
			t.Fatal("the test data is not in the dump before the erasure; the dump checks nothing")
		}
		if n := searchCount(ctx, t, s, secret); n != 2 {
			t.Fatalf("search before erasure: %d sessions, want 2", n)
		}
		keptEvents, keptState := erasedEventsOf(t, s, kept), stateOf(t, s, kept)
		erasedHashes := erasedEventsOf(t, s, erased)

		// Bad input.
		var ve *models.ValidationError
		if _, err := s.EraseTicket(ctx, models.CLIOperator("ops"), " ", ""); !errors.As(err, &ve) || len(ve.Fields) != 2 {
			t.Fatalf("erase without ticket and reason: %v, want a validation error naming both", err)
		}
		if _, err := s.EraseTicket(ctx, models.CLIOperator("ops"), "T-404", "request 1"); !models.IsNotFound(err) {
			t.Fatalf("erase of an unknown ticket: %v, want not found", err)
		}

		rep, err := s.EraseTicket(ctx, models.CLIOperator("ops"), "T-1182", "GDPR request #88")
		if err != nil {
			t.Fatalf("erase: %v", err)
		}
		if len(rep.Sessions) != 2 || rep.Events != int64(len(erasedHashes))+1 || rep.Changed != 2 {
			t.Fatalf("erase report %+v, want 2 sessions and %d events", rep, len(erasedHashes)+1)
		}

		after := dump(t, s)
		if strings.Contains(strings.ToLower(after), strings.ToLower(secret)) {
			i := strings.Index(strings.ToLower(after), strings.ToLower(secret))
			t.Fatalf("erased text still in the database: …%s…", after[max(0, i-300):min(len(after), i+100)])
		}
		if !strings.Contains(after, other) {
			t.Fatal("the other ticket's text went too")
		}
		if n := searchCount(ctx, t, s, secret); n != 0 {
			t.Fatalf("search after erasure finds %d sessions", n)
		}
		if n := searchCount(ctx, t, s, other); n != 1 {
			t.Fatalf("search for the other ticket finds %d sessions, want 1", n)
		}
		got := erasedEventsOf(t, s, erased)
		for i, e := range got {
			if e.Hash != erasedHashes[i].Hash || !models.IsErasedPayload(e.Payload) {
				t.Fatalf("erased event %d: hash %s (was %s), payload %s", i+1, e.Hash, erasedHashes[i].Hash, e.Payload)
			}
		}
		if fmt.Sprint(erasedEventsOf(t, s, kept)) != fmt.Sprint(keptEvents) || stateOf(t, s, kept) != keptState {
			t.Fatal("the other ticket's events or state changed")
		}
		st := mustState(t, s, erased)
		if st.Status != models.StatusCompleted || st.Goal != models.ErasedText || st.Facts != nil || len(st.Notes) != 1 || st.Notes[0].Text != models.ErasedText {
			t.Fatalf("erased state: %+v", st)
		}

		// Verify: chains, replay from the erasure's state, checkpoints.
		if vr := verifyWithCheckpoints(ctx, t, s, cp); !vr.OK() {
			t.Fatalf("verify after erasure: %v", vr.Problems)
		}
		if _, _, err := cp.Write(ctx, "test"); err != nil {
			t.Fatalf("checkpoint after erasure: %v", err)
		}
		if vr := verifyWithCheckpoints(ctx, t, s, cp); !vr.OK() {
			t.Fatalf("verify after the next checkpoint: %v", vr.Problems)
		}
		// The transcript proves itself offline.
		var tr strings.Builder
		if err := s.WriteTranscript(ctx, &tr, erased, "test", nil); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(tr.String(), secret) {
			t.Fatal("the transcript of the erased session holds its text")
		}
		if rep, err := models.VerifyTranscript(strings.NewReader(tr.String()), nil); err != nil || !rep.OK() {
			t.Fatalf("transcript of the erased session: %+v, %v", rep, err)
		}
		// Replay of the erased history does not crash: it is refused
		// before the erasure, and works from its state on.
		if _, err := s.StateAt(ctx, erased, 2); !errors.As(err, &ve) {
			t.Fatalf("state at version 2 of an erased session: %v, want a validation error", err)
		}
		if got, err := s.StateAt(ctx, erased, st.Version); err != nil || got.Version != st.Version || got.Goal != models.ErasedText {
			t.Fatalf("state at the erasure's version: %+v, %v", got, err)
		}
		var evs []models.Event
		if err := s.DB.Where("session_id = ?", erased).Order("seq").Find(&evs).Error; err != nil {
			t.Fatal(err)
		}
		if _, err := models.Replay(evs); !errors.Is(err, models.ErrErasedEvent) {
			t.Fatalf("Replay of erased events: %v, want ErrErasedEvent", err)
		}

		// Idempotent.
		again, err := s.EraseTicket(ctx, models.CLIOperator("ops"), "T-1182", "GDPR request #88")
		if err != nil || again.Changed != 0 || again.Events != 0 || again.AlreadyErased != rep.Events {
			t.Fatalf("second erase: %+v, %v; want nothing changed", again, err)
		}
		if d := dump(t, s); d != after {
			t.Fatal("a second erase changed the database")
		}
		var audits int64
		s.DB.Raw(`SELECT count(*) FROM admin_audit WHERE action = ? AND target_id = ?`, models.AdminErase, "T-1182").Scan(&audits)
		if audits != 1 {
			t.Fatalf("%d erase entries in the admin log, want 1", audits)
		}

		// Hand-edits after the erasure are still caught.
		edits := []struct{ name, do, undo, kind string }{
			{"tombstone", `UPDATE events SET payload = replace(payload, '"chain_state":"', '"chain_state":"0') WHERE session_id = ? AND seq = 2`,
				`UPDATE events SET payload = replace(payload, '"chain_state":"0', '"chain_state":"') WHERE session_id = ? AND seq = 2`, models.ProblemHash},
			{"created_at", `UPDATE events SET created_at = '2001-01-01T00:00:00.000000Z' WHERE session_id = ? AND seq = 3`, "", models.ProblemHash},
			{"state", `UPDATE session_states SET state = replace(state, '"status":"completed"', '"status":"cancelled"') WHERE session_id = ?`,
				`UPDATE session_states SET state = replace(state, '"status":"cancelled"', '"status":"completed"') WHERE session_id = ?`, models.ProblemProjection},
			{"erasure record", `UPDATE session_erasures SET through_seq = through_seq - 1 WHERE session_id = ?`,
				`UPDATE session_erasures SET through_seq = through_seq + 1 WHERE session_id = ?`, ""},
			{"erasure record's session", `UPDATE session_erasures SET session_id = 'ses_gone' WHERE session_id = ?`,
				`UPDATE session_erasures SET session_id = ? WHERE session_id = 'ses_gone'`, models.ProblemErased},
		}
		for _, ed := range edits {
			var createdAt models.UTCTime
			if err := s.DB.Raw(`SELECT created_at FROM events WHERE session_id = ? AND seq = 3`, erased).Row().Scan(&createdAt); err != nil {
				t.Fatal(err)
			}
			if err := s.DB.Exec(ed.do, erased).Error; err != nil {
				t.Fatalf("%s: %v", ed.name, err)
			}
			vr := verifyWithCheckpoints(ctx, t, s, cp)
			found := false
			for _, p := range vr.Problems {
				found = found || (p.SessionID == erased && (ed.kind == "" || p.Kind == ed.kind))
			}
			if !found {
				t.Fatalf("hand-edit of the %s after erasure not reported (as %q): %v", ed.name, ed.kind, vr.Problems)
			}
			var undo *gorm.DB
			if ed.undo == "" {
				undo = s.DB.Exec(`UPDATE events SET created_at = ? WHERE session_id = ? AND seq = 3`, createdAt, erased)
			} else {
				undo = s.DB.Exec(ed.undo, erased)
			}
			if undo.Error != nil {
				t.Fatalf("undo %s: %v", ed.name, undo.Error)
			}
			if vr := verifyWithCheckpoints(ctx, t, s, cp); !vr.OK() {
				t.Fatalf("after undoing the %s edit: %v", ed.name, vr.Problems)
			}
		}

		// A note after the erasure is recorded, verifies, and the next
		// erasure run erases it.
		if _, err := s.AddNote(ctx, erased, agent, "", models.NoteInput{Text: "late " + secret + " call"}); err != nil {
			t.Fatalf("note after erasure: %v", err)
		}
		if vr := verifyWithCheckpoints(ctx, t, s, cp); !vr.OK() {
			t.Fatalf("verify with an event after the erasure: %v", vr.Problems)
		}
		third, err := s.EraseTicket(ctx, models.CLIOperator("ops"), "T-1182", "GDPR request #88, follow-up")
		if err != nil || third.Events != 1 || third.Changed != 1 {
			t.Fatalf("erase after a new event: %+v, %v; want 1 event", third, err)
		}
		if d := dump(t, s); strings.Contains(strings.ToLower(d), strings.ToLower(secret)) {
			t.Fatal("the late note's text is still in the database")
		}
		if vr := verifyWithCheckpoints(ctx, t, s, cp); !vr.OK() {
			t.Fatalf("verify after the second erasure: %v", vr.Problems)
		}
	})
}

// TestEraseRefusesATamperedChain: an erasure would hide a mismatch, so it
// refuses a session whose events do not verify and changes nothing.
func TestEraseRefusesATamperedChain(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		sid := storetest.Session(ctx, t, s, &storetest.SessionOpts{Goal: "Refund " + secret, TicketRef: "T-7"})
		if err := s.DB.Exec(`UPDATE events SET actor = 'someone:else' WHERE session_id = ?`, sid).Error; err != nil {
			t.Fatal(err)
		}
		before := dump(t, s)
		if _, err := s.EraseTicket(ctx, models.CLIOperator("ops"), "T-7", "request"); !errors.Is(err, models.ErrEraseRefused) {
			t.Fatalf("erase of a tampered session: %v, want ErrEraseRefused", err)
		}
		if dump(t, s) != before {
			t.Fatal("a refused erasure changed the database")
		}
	})
}
