package models_test

import (
	"context"
	"testing"
	"time"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
)

// TestVersionRule: every event type has a row in the rule, and exactly the
// score and the SLA marker are audit-only (invariant 10).
func TestVersionRule(t *testing.T) {
	t.Parallel()
	for _, et := range models.AllEventTypes {
		want := models.MovesVersion
		if et == models.EventReviewScored || et == models.EventEscalationSLABreached {
			want = models.AuditOnly
		}
		if got := models.VersionEffectOf(et); got != want {
			t.Errorf("%s: effect %d, want %d", et, got, want)
		}
	}
}

// auditedAfterVersion brings a session to an escalation at version 7 after
// whose version an SLA breach marker and a review score (of its earlier
// escalation, at version 4) were appended. It returns the session id.
func auditedAfterVersion(ctx context.Context, t *testing.T, s *models.Store) string {
	t.Helper()
	clk := setFanClock(s)
	s.Reviews = models.ReviewPolicy{DoubleShare: -1}
	agent := mustUser(t, s, "ann-"+models.NewID("u")[2:10]+"@example.com", models.RoleAgent)
	rita := mustUser(t, s, "rita-"+models.NewID("u")[2:10]+"@example.com", models.RoleReviewer)
	sid, _ := workerEscalated(ctx, t, s, "refunds")
	if _, err := s.ClaimEscalation(ctx, sid, agent, "", models.ClaimInput{ExpectedVersion: v64(4)}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ResumeAutomation(ctx, sid, agent, "", models.ResumeInput{ExpectedVersion: v64(5), Queue: "refunds", Step: "issue-refund"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Transition(ctx, sid, models.EventSessionEscalated, "test:controller", "", models.TransitionInput{ExpectedVersion: v64(6), Reason: "refund API down"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.SyncReviewItems(ctx, models.ReviewPolicy{DoubleShare: -1}); err != nil {
		t.Fatal(err)
	}
	clk.Add(100 * time.Hour)
	if r, err := s.Maintain(ctx); err != nil || r.SLABreaches != 1 {
		t.Fatalf("maintain %+v %v", r, err)
	}
	out, err := s.ScoreReview(ctx, rita, "", models.ScoreInput{Key: models.ReviewKey{SessionID: sid, AtVersion: 4}, Scores: allScores(4), Comment: "clear"})
	if err != nil {
		t.Fatalf("score: %v", err)
	}
	if out.StateVersion != 7 || out.Seq != 9 {
		t.Fatalf("score outcome: version %d seq %d, want version 7 seq 9", out.StateVersion, out.Seq)
	}
	row, err := s.GetSession(ctx, sid)
	if err != nil {
		t.Fatal(err)
	}
	if row.StateVersion != 7 || row.LastSeq != 9 {
		t.Fatalf("row at version %d seq %d, want 7 and 9", row.StateVersion, row.LastSeq)
	}
	for _, typ := range []models.EventType{models.EventEscalationSLABreached, models.EventReviewScored} {
		evs := eventsOf(ctx, t, s, sid, typ)
		if len(evs) != 1 || evs[0].VersionBefore != 7 || evs[0].VersionAfter != 7 || evs[0].Seq < 8 {
			t.Fatalf("%s events %+v", typ, evs)
		}
	}
	return sid
}

// TestAuditEventsKeepWritesCurrent: a write naming version 7 succeeds after
// an SLA breach marker and a review score were appended after version 7; a
// work event still makes a write naming its predecessor stale; and replay
// gives exactly the stored state.
func TestAuditEventsKeepWritesCurrent(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		sid := auditedAfterVersion(ctx, t, s)
		bob := mustUser(t, s, "bob@example.com", models.RoleAgent)

		out, err := s.ClaimEscalation(ctx, sid, bob, "", models.ClaimInput{ExpectedVersion: v64(7)})
		if err != nil {
			t.Fatalf("claim at version 7 after audit events: %v", err)
		}
		if out.StateVersion != 8 || out.Seq != 10 {
			t.Fatalf("claim outcome version %d seq %d, want 8 and 10", out.StateVersion, out.Seq)
		}
		// The claim is work: a write still naming 7 is stale now.
		_, err = s.Release(ctx, sid, bob, "", models.ReleaseInput{ExpectedVersion: v64(7)})
		if models.ErrorCode(err) != models.ECONFLICT {
			t.Fatalf("release at version 7 after a claim = %v, want a conflict", err)
		}

		// Replay equals the stored state, and the state at version 7 is
		// the escalation with its audit events.
		evs, err := s.ListEvents(ctx, sid, 0, 1000)
		if err != nil {
			t.Fatal(err)
		}
		st, err := models.Replay(evs)
		if err != nil {
			t.Fatal(err)
		}
		row, _ := s.GetSession(ctx, sid)
		enc, _ := models.EncodeState(st)
		if string(enc) != row.State || st.Version != 8 || row.LastSeq != 10 {
			t.Fatalf("replay v%d differs from the stored state v%d", st.Version, row.StateVersion)
		}
		at7, err := s.StateAt(ctx, sid, 7)
		if err != nil || at7.Version != 7 || at7.Status != models.StatusEscalated || at7.Reviews != 1 {
			t.Fatalf("state at 7: v%d %s reviews %d %v", at7.Version, at7.Status, at7.Reviews, err)
		}
		verifyAll(ctx, t, s)
	})
}

// TestLegacyAuditEventsReplay: audit-only events written before invariant
// 10 moved the version; they stay in the chain and must replay as written,
// but only where seq and version still agree.
func TestLegacyAuditEventsReplay(t *testing.T) {
	t.Parallel()
	mk := func(seq, before, after int64, typ models.EventType, payload string) models.Event {
		return models.Event{SessionID: "ses_l", Seq: seq, Type: typ, Actor: "test", VersionBefore: before, VersionAfter: after, Payload: payload}
	}
	created := mk(1, 0, 1, models.EventSessionCreated, `{"goal":"g","priority":3}`)
	// Before the rule: the score moved the version.
	legacy := []models.Event{created, mk(2, 1, 2, models.EventReviewScored, `{}`), mk(3, 2, 3, models.EventSessionPaused, `{}`)}
	st, err := models.Replay(legacy)
	if err != nil || st.Version != 3 {
		t.Fatalf("legacy chain: v%d %v", st.Version, err)
	}
	// Under the rule: it does not.
	current := []models.Event{created, mk(2, 1, 1, models.EventReviewScored, `{}`), mk(3, 1, 2, models.EventSessionPaused, `{}`)}
	if st, err = models.Replay(current); err != nil || st.Version != 2 || st.Reviews != 1 {
		t.Fatalf("current chain: v%d %v", st.Version, err)
	}
	// A work event must move it, and once seq ran ahead an audit event
	// cannot move it either.
	for name, evs := range map[string][]models.Event{
		"work without a move":         {created, mk(2, 1, 1, models.EventSessionPaused, `{}`)},
		"audit moving after an audit": {created, mk(2, 1, 1, models.EventReviewScored, `{}`), mk(3, 1, 2, models.EventReviewScored, `{}`)},
		"seq behind version":          {created, mk(2, 1, 3, models.EventSessionPaused, `{}`)},
	} {
		if _, err := models.Replay(evs); err == nil {
			t.Errorf("%s: replay accepted it", name)
		}
	}
}

// TestLastSeqBackfill: a session written before invariant 10, whose review
// score moved the version, gets last_seq from migration 00015 (the newest
// seq was the version then), verifies, and takes writes under the rule.
func TestLastSeqBackfill(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		id := storetest.Session(ctx, t, s, nil)
		row, err := s.GetSession(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		st, _ := row.Decode()
		payload, _ := models.Canonical(models.ReviewPayload{Reviewer: "user:old", AtVersion: 1, Scores: allScores(3)})
		legacy := models.Event{ID: models.NewID("evt"), SessionID: id, Seq: 2, Type: models.EventReviewScored, Actor: "user:old",
			VersionBefore: 1, VersionAfter: 2, Payload: string(payload), PrevHash: row.LastHash, CreatedAt: row.CreatedAt}
		legacy.Hash = models.ComputeHash(legacy)
		if st, err = models.Apply(st, legacy); err != nil {
			t.Fatal(err)
		}
		state, _ := models.EncodeState(st)
		if err := s.DB.Create(&legacy).Error; err != nil {
			t.Fatal(err)
		}
		if err := s.DB.Exec(`UPDATE session_states SET state = ? WHERE session_id = ?`, string(state), id).Error; err != nil {
			t.Fatal(err)
		}
		if err := s.DB.Exec(`UPDATE sessions SET state_version = 2, last_hash = ?, last_seq = 0 WHERE id = ?`,
			legacy.Hash, id).Error; err != nil {
			t.Fatal(err)
		}
		// Roll back through 00015 (later migrations first), then up again.
		for {
			v, err := s.MigrateDown(ctx)
			if err != nil || v < 15 {
				t.Fatalf("down rolled back %d, %v", v, err)
			}
			if v == 15 {
				break
			}
		}
		if _, err := s.MigrateUp(ctx); err != nil {
			t.Fatal(err)
		}
		if row, _ = s.GetSession(ctx, id); row.LastSeq != 2 || row.StateVersion != 2 {
			t.Fatalf("after 00015: seq %d version %d, want 2 and 2", row.LastSeq, row.StateVersion)
		}
		verifyAll(ctx, t, s)
		out, err := s.Transition(ctx, id, models.EventSessionPaused, "test:controller", "", models.TransitionInput{ExpectedVersion: v64(2)})
		if err != nil || out.StateVersion != 3 || out.Seq != 3 {
			t.Fatalf("pause at 2: %+v %v", out, err)
		}
		out, err = s.Execute(ctx, models.Command{SessionID: id, Type: models.EventReviewScored, Actor: "user:new",
			Payload: models.ReviewPayload{Reviewer: "user:new", AtVersion: 1, Scores: allScores(4)}})
		if err != nil || out.StateVersion != 3 || out.Seq != 4 {
			t.Fatalf("score under the rule: %+v %v", out, err)
		}
		verifyAll(ctx, t, s)
	})
}
