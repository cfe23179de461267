package handlers_test

import (
	"context"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
)

type listedSession struct {
	SessionID    string    `json:"session_id"`
	TicketRef    string    `json:"ticket_ref"`
	Goal         string    `json:"goal"`
	Status       string    `json:"status"`
	Priority     int       `json:"priority"`
	StateVersion int64     `json:"state_version"`
	Queue        string    `json:"queue"`
	CurrentStep  string    `json:"current_step"`
	Assignee     string    `json:"assignee"`
	UpdatedAt    time.Time `json:"updated_at"`
}

type listedPage struct {
	Sessions   []listedSession `json:"sessions"`
	NextCursor *string         `json:"next_cursor"`
}

// listIDs follows next_cursor from query to the end as token and returns
// every session id in order, failing on a repeat.
func (e *apiEnv) listIDs(token string, query url.Values) []string {
	e.t.Helper()
	var ids []string
	seen := map[string]bool{}
	for range 100 {
		var p listedPage
		wantStatus(e.t, e.get(token, "/sessions?"+query.Encode()), http.StatusOK).Decode(e.t, &p)
		for _, s := range p.Sessions {
			if seen[s.SessionID] {
				e.t.Fatalf("%s listed twice", s.SessionID)
			}
			seen[s.SessionID] = true
			ids = append(ids, s.SessionID)
		}
		if p.NextCursor == nil {
			return ids
		}
		query.Set("cursor", *p.NextCursor)
	}
	e.t.Fatal("paging does not end")
	return nil
}

func TestAPIListSessions(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		e := newAPIEnv(t, s)
		refund := e.createSession(map[string]any{"goal": "Refund order 1182 if eligible", "ticket_ref": "T-1182"})
		blender := e.createSession(map[string]any{"goal": "Replace the damaged blender", "ticket_ref": "T-2001", "priority": 2})
		e.delegate(blender, 1, "shipping", nil)
		ledger := e.createSession(map[string]any{"goal": "Audit the ledger", "ticket_ref": "T-3000"})
		wantStatus(t, e.post(e.controller, "/sessions/"+ledger+"/escalate", map[string]any{"expected_version": 1, "reason": "ask"}), http.StatusOK)
		agent := newUser(t, s, "list-agent@example.com", models.RoleAgent)
		if _, err := s.AddNote(context.Background(), ledger, agent, "", models.NoteInput{ExpectedVersion: storetest.Ptr(int64(2)), Text: "Customer mentioned a chargeback."}); err != nil {
			t.Fatal(err)
		}

		// Every role that reads may list; newest updated first.
		for _, tok := range []string{e.controller, e.worker, e.admin} {
			if got := e.listIDs(tok, url.Values{}); !slices.Equal(got, []string{ledger, blender, refund}) {
				t.Fatalf("listing %v", got)
			}
		}
		var p listedPage
		wantStatus(t, e.get(e.worker, "/sessions?q=blender"), http.StatusOK).Decode(t, &p)
		want := listedSession{SessionID: blender, TicketRef: "T-2001", Goal: "Replace the damaged blender", Status: "queued",
			Priority: 2, StateVersion: 2, Queue: "shipping", CurrentStep: "check-eligibility"}
		if len(p.Sessions) != 1 || p.NextCursor != nil {
			t.Fatalf("page %+v", p)
		}
		got := p.Sessions[0]
		got.UpdatedAt = time.Time{}
		if got != want || p.Sessions[0].UpdatedAt.IsZero() {
			t.Fatalf("row %+v, want %+v", p.Sessions[0], want)
		}
		// The body has exactly the contract's fields, next_cursor null.
		raw := e.get(e.worker, "/sessions?q=blender").JSON(t)
		if v, ok := raw["next_cursor"]; !ok || v != nil {
			t.Errorf("next_cursor %v present=%v, want null", v, ok)
		}
		row := raw["sessions"].([]any)[0].(map[string]any)
		var keys []string
		for k := range row {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		if strings.Join(keys, ",") != "assignee,current_step,goal,priority,queue,session_id,state_version,status,ticket_ref,updated_at" {
			t.Errorf("row fields %v", keys)
		}

		for _, tc := range []struct {
			query string
			want  []string
		}{
			{"status=open", []string{refund}},
			{"status=open,queued", []string{blender, refund}},
			{"status=open&status=escalated", []string{ledger, refund}},
			{"queue=shipping", []string{blender}},
			{"ticket_ref=T-3000", []string{ledger}},
			{"parent_id=" + refund, nil},
			{"q=refund", []string{refund}},
			{"q=T-2001", []string{blender}},
			{"q=chargeback", []string{ledger}},
			{"q=chargeback&status=open", nil},
			{"updated_after=2000-01-01T00:00:00Z&limit=1", []string{ledger, blender, refund}},
			{"updated_after=2999-01-01T00:00:00%2B02:00", nil},
			{"queue=&ticket_ref=&q=", []string{ledger, blender, refund}},
		} {
			q, err := url.ParseQuery(tc.query)
			if err != nil {
				t.Fatal(err)
			}
			if got := e.listIDs(e.controller, q); !slices.Equal(got, tc.want) {
				t.Errorf("%s: %v, want %v", tc.query, got, tc.want)
			}
		}

		// Bad input: 422 naming every offending parameter; nothing written.
		noWrites(t, s, func() {
			for _, tc := range []struct {
				query  string
				fields []string
			}{
				{"limit=0", []string{"limit"}},
				{"limit=501", []string{"limit"}},
				{"limit=ten", []string{"limit"}},
				{"status=open,bogus", []string{"status"}},
				{"cursor=garbage", []string{"cursor"}},
				{"updated_after=yesterday", []string{"updated_after"}},
				{"updated_after=2026-11-30", []string{"updated_after"}},
				{"stauts=open", []string{"stauts"}},
				{"q=%21%21%21", []string{"q"}},
				{"queue=a&queue=b", []string{"queue"}},
				{"limit=0&status=nope&cursor=x&sort=goal&updated_after=soon", []string{"limit", "status", "cursor", "sort", "updated_after"}},
			} {
				p := wantProblem(t, e.get(e.controller, "/sessions?"+tc.query), http.StatusUnprocessableEntity)
				wantFields(t, p, tc.fields...)
			}
		})
		// Without a token: 401.
		wantProblem(t, e.get("", "/sessions"), http.StatusUnauthorized)
	})
}
