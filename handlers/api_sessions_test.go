package handlers_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
)

func TestAPICreateAndGetSession(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		e := newAPIEnv(t, s)
		r := wantStatus(t, e.post(e.controller, "/sessions", `{"goal": "Refund order 1182 if eligible", "ticket_ref": "T-1182",
			"constraints": ["refunds over 200 EUR need a human"], "resources": [{"name": "orders-db", "uri": "db://orders"}],
			"done_criteria": ["refund issued or denial explained"], "facts": {"order_total": "240 EUR", "items": 12345678901234567890},
			"priority": 2}`), http.StatusCreated)
		m := r.JSON(t)
		sid, _ := m["session_id"].(string)
		if !strings.HasPrefix(sid, "ses_") || m["status"] != "open" || jsonInt(t, m, "state_version") != 1 {
			t.Fatalf("created %s", r.Body)
		}
		if loc := r.Header.Get("Location"); loc != "/api/v1/sessions/"+sid {
			t.Fatalf("Location %q", loc)
		}

		g := wantStatus(t, e.get(e.worker, "/sessions/"+sid), http.StatusOK).JSON(t)
		for _, k := range []string{"session_id", "parent_id", "ticket_ref", "goal", "status", "state_version", "current_step", "state", "created_at", "updated_at"} {
			if _, ok := g[k]; !ok {
				t.Fatalf("GET session lacks %s: %v", k, g)
			}
		}
		if g["session_id"] != sid || g["parent_id"] != nil || g["ticket_ref"] != "T-1182" || g["goal"] != "Refund order 1182 if eligible" ||
			g["status"] != "open" || jsonInt(t, g, "state_version") != 1 || g["current_step"] != "" || jsonInt(t, g, "priority") != 2 {
			t.Fatalf("GET session = %v", g)
		}
		rfc3339UTC(t, g["created_at"].(string))
		rfc3339UTC(t, g["updated_at"].(string))
		st := g["state"].(map[string]any)
		facts := st["facts"].(map[string]any)
		// Numbers keep their exact text through the API and the event log.
		if st["goal"] != "Refund order 1182 if eligible" || facts["items"].(json.Number).String() != "12345678901234567890" {
			t.Fatalf("state = %v", st)
		}

		wantProblem(t, e.get(e.worker, "/sessions/ses_unknown"), http.StatusNotFound)
	})
}

func TestAPIMalformedBodies(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		e := newAPIEnv(t, s)
		sid := e.createSession(nil)
		noWrites(t, s, func() {
			for _, path := range []string{"/sessions", "/sessions/" + sid + "/pause", "/sessions/" + sid + "/delegations", "/queues/q/lease"} {
				for _, body := range []string{"", "  \n", `{"goal": `, `{"goal": "a"} {"goal": "b"}`, `{'goal': 'a'}`, `[]`, `"goal"`, `null`, `42`} {
					r := e.post(e.admin, path, body)
					p := wantProblem(t, r, http.StatusBadRequest)
					if len(p.Errors) != 0 && body != "" {
						t.Errorf("%s %q: errors %v", path, body, p.Errors)
					}
				}
			}
		})
		p := wantProblem(t, e.post(e.controller, "/sessions", `{"goal": "a",}`), http.StatusBadRequest)
		if !strings.Contains(p.Detail, "not valid JSON") {
			t.Fatalf("detail %q", p.Detail)
		}
	})
}

func TestAPIValidationListsEveryField(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		e := newAPIEnv(t, s)
		noWrites(t, s, func() {
			// Every unknown field, at any depth, in one answer.
			p := wantProblem(t, e.post(e.controller, "/sessions",
				`{"goal": "g", "colour": "red", "Goal": "x", "resources": [{"name": "db", "url": "db://x"}], "extra": {"a": 1}}`),
				http.StatusUnprocessableEntity)
			wantFields(t, p, "colour", "Goal", "resources[0].url", "extra")
			if got := fmt.Sprint(fieldsOf(p)); got != "[colour Goal resources[0].url extra]" {
				t.Fatalf("fields in %s, want the order of the body", got)
			}

			// Wrong types name the field; a mistyped field is not also "required".
			p = wantProblem(t, e.post(e.controller, "/sessions",
				`{"goal": 5, "priority": "high", "constraints": "x", "resources": [{"name": 7}], "facts": [1]}`),
				http.StatusUnprocessableEntity)
			wantFields(t, p, "goal", "priority", "constraints", "resources[0].name", "facts")
			for _, f := range p.Errors {
				if f.Field == "goal" && f.Message != "must be a string" {
					t.Fatalf("goal: %q", f.Message)
				}
			}
			p = wantProblem(t, e.post(e.controller, "/sessions", `{"goal": "g", "priority": 2.5}`), http.StatusUnprocessableEntity)
			wantFields(t, p, "priority")

			// Validation errors from models list every field.
			p = wantProblem(t, e.post(e.controller, "/sessions", `{"priority": 9, "constraints": ["", "ok"], "resources": [{"uri": "x"}]}`),
				http.StatusUnprocessableEntity)
			wantFields(t, p, "goal", "priority", "constraints[0]", "resources[0].name")
			if p.Type != "https://taskpilots.dev/problems/invalid" {
				t.Fatalf("type %q", p.Type)
			}

			// Unknown fields and model validation together.
			p = wantProblem(t, e.post(e.controller, "/sessions", `{"priority": 9, "typo": 1}`), http.StatusUnprocessableEntity)
			wantFields(t, p, "typo", "goal", "priority")

			// An unusable Idempotency-Key is a field too.
			long := strings.Repeat("k", 201)
			p = wantProblem(t, e.post(e.controller, "/sessions", `{"goal": "g"}`, "Idempotency-Key", long), http.StatusUnprocessableEntity)
			wantFields(t, p, "Idempotency-Key")
			p = wantProblem(t, e.post(e.controller, "/sessions", `{"goal": ""}`, "Idempotency-Key", long), http.StatusUnprocessableEntity)
			wantFields(t, p, "Idempotency-Key", "goal")
		})
		// 200 characters is still a key.
		wantStatus(t, e.post(e.controller, "/sessions", `{"goal": "g"}`, "Idempotency-Key", strings.Repeat("k", 200)), http.StatusCreated)
	})
}

func TestAPICreateIdempotent(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		e := newAPIEnv(t, s)
		body := `{"goal": "Refund order 7", "ticket_ref": "T-7"}`
		first := wantStatus(t, e.post(e.controller, "/sessions", body, "Idempotency-Key", "create-7"), http.StatusCreated)
		sid := first.JSON(t)["session_id"].(string)
		// The session moves on; the repeat still answers what the create did.
		e.delegate(sid, 1, "idem", nil)
		noWrites(t, s, func() {
			again := wantStatus(t, e.post(e.controller, "/sessions", body, "Idempotency-Key", "create-7"), http.StatusCreated)
			if !bytes.Equal(again.Body, first.Body) {
				t.Fatalf("repeat body %s, first %s", again.Body, first.Body)
			}
			if again.Header.Get("Idempotent-Replayed") != "true" {
				t.Fatalf("repeat not marked as replayed")
			}
			p := wantProblem(t, e.post(e.controller, "/sessions", `{"goal": "Refund order 8"}`, "Idempotency-Key", "create-7"), http.StatusUnprocessableEntity)
			if p.Type != "https://taskpilots.dev/problems/idempotency" {
				t.Fatalf("type %q", p.Type)
			}
		})
		if n := countRows(t, s, "sessions", "1 = 1"); n != 1 {
			t.Fatalf("%d sessions, want 1", n)
		}
		// Keys are scoped to the caller: another token may use the same key.
		other := e.token("ctl2", models.RoleController)
		r := wantStatus(t, e.post(other, "/sessions", body, "Idempotency-Key", "create-7"), http.StatusCreated)
		if r.JSON(t)["session_id"] == sid {
			t.Fatalf("another caller got the first caller's session")
		}
	})
}

func TestAPIEventsStatePacket(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		e := newAPIEnv(t, s)
		sid := e.createSession(map[string]any{"goal": "Refund order 1182", "constraints": []string{"ask above 200 EUR"}})
		e.delegate(sid, 1, "reads", map[string]any{"facts": map[string]any{"order": "1182"}})
		wantStatus(t, e.post(e.controller, "/sessions/"+sid+"/pause", map[string]any{"expected_version": 2, "reason": "lunch"}, "Idempotency-Key", "p-1"), http.StatusOK)

		page := wantStatus(t, e.get(e.worker, "/sessions/"+sid+"/events?limit=2"), http.StatusOK).JSON(t)
		evs := page["events"].([]any)
		if len(evs) != 2 || jsonInt(t, page, "next_after_seq") != 2 {
			t.Fatalf("page 1 = %v", page)
		}
		first := evs[0].(map[string]any)
		for _, k := range []string{"seq", "type", "actor", "version_before", "version_after", "payload", "idempotency_key", "hash", "prev_hash", "created_at"} {
			if _, ok := first[k]; !ok {
				t.Fatalf("event lacks %s: %v", k, first)
			}
		}
		if first["type"] != "session.created" || jsonInt(t, first, "seq") != 1 || jsonInt(t, first, "version_before") != 0 ||
			jsonInt(t, first, "version_after") != 1 || first["idempotency_key"] != nil || first["prev_hash"] != "" {
			t.Fatalf("first event = %v", first)
		}
		if p, ok := first["payload"].(map[string]any); !ok || p["goal"] != "Refund order 1182" {
			t.Fatalf("payload is %T %v, want an object", first["payload"], first["payload"])
		}
		rfc3339UTC(t, first["created_at"].(string))
		if evs[1].(map[string]any)["prev_hash"] != first["hash"] {
			t.Fatalf("hash chain broken: %v", evs)
		}

		page = wantStatus(t, e.get(e.worker, "/sessions/"+sid+"/events?after_seq=2"), http.StatusOK).JSON(t)
		evs = page["events"].([]any)
		last := evs[0].(map[string]any)
		if len(evs) != 1 || jsonInt(t, page, "next_after_seq") != 3 || last["type"] != "session.paused" || last["idempotency_key"] != "p-1" {
			t.Fatalf("page 2 = %v", page)
		}
		page = wantStatus(t, e.get(e.worker, "/sessions/"+sid+"/events?after_seq=3"), http.StatusOK).JSON(t)
		if len(page["events"].([]any)) != 0 || jsonInt(t, page, "next_after_seq") != 3 {
			t.Fatalf("page 3 = %v", page)
		}

		for q, fields := range map[string][]string{
			"after_seq=-1":         {"after_seq"},
			"after_seq=x":          {"after_seq"},
			"limit=0":              {"limit"},
			"limit=1001":           {"limit"},
			"limit=2.5&after_seq=": {"limit"},
			"limit=x&after_seq=-2": {"after_seq", "limit"},
		} {
			wantFields(t, wantProblem(t, e.get(e.worker, "/sessions/"+sid+"/events?"+q), http.StatusUnprocessableEntity), fields...)
		}
		wantProblem(t, e.get(e.worker, "/sessions/ses_nope/events"), http.StatusNotFound)

		// State at each version, rebuilt by replay.
		for v, status := range map[int]string{1: "open", 2: "queued", 3: "paused"} {
			st := wantStatus(t, e.get(e.worker, fmt.Sprintf("/sessions/%s/state?version=%d", sid, v)), http.StatusOK).JSON(t)
			if st["status"] != status || jsonInt(t, st, "version") != int64(v) || st["session_id"] != sid {
				t.Fatalf("state at %d = %v", v, st)
			}
		}
		cur := wantStatus(t, e.get(e.worker, "/sessions/"+sid+"/state?version=3"), http.StatusOK)
		var stored struct {
			State json.RawMessage `json:"state"`
		}
		wantStatus(t, e.get(e.worker, "/sessions/"+sid), http.StatusOK).Decode(t, &stored)
		if !bytes.Equal(bytes.TrimSpace(cur.Body), stored.State) {
			t.Fatalf("replayed state %s\nstored state %s", cur.Body, stored.State)
		}
		for _, q := range []string{"", "?version=0", "?version=4", "?version=x", "?version=-1", "?version=1.5"} {
			wantFields(t, wantProblem(t, e.get(e.worker, "/sessions/"+sid+"/state"+q), http.StatusUnprocessableEntity), "version")
		}
		wantProblem(t, e.get(e.worker, "/sessions/ses_nope/state?version=1"), http.StatusNotFound)

		// The packet of the current state.
		var pk models.Packet
		wantStatus(t, e.get(e.worker, "/sessions/"+sid+"/packet"), http.StatusOK).Decode(t, &pk)
		if pk.SessionID != sid || pk.BasedOnVersion != 3 || pk.Goal != "Refund order 1182" || pk.Step != "check-eligibility" ||
			pk.Instructions != "Check the order." || len(pk.Constraints) != 1 || pk.ConfirmedFacts["order"] != "1182" || len(pk.PrefixHash) != 64 {
			t.Fatalf("packet = %+v", pk)
		}
		wantProblem(t, e.get(e.worker, "/sessions/ses_nope/packet"), http.StatusNotFound)
	})
}

func TestAPITransitions(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		e := newAPIEnv(t, s)
		sid := e.createSession(nil)
		path := "/sessions/" + sid
		tr := func(verb string, v int64, headers ...string) apiResponse {
			return e.post(e.controller, path+"/"+verb, map[string]any{"expected_version": v, "reason": "because"}, headers...)
		}
		wantWritten := func(r apiResponse, status string, v int64) {
			t.Helper()
			m := wantStatus(t, r, http.StatusOK).JSON(t)
			if len(m) != 3 || m["session_id"] != sid || m["status"] != status || jsonInt(t, m, "state_version") != v {
				t.Fatalf("answer %s, want %s at %d", r.Body, status, v)
			}
		}
		wantWritten(tr("pause", 1, "Idempotency-Key", "pause-1"), "paused", 2)

		noWrites(t, s, func() {
			// A repeat answers the same, writes nothing.
			again := tr("pause", 1, "Idempotency-Key", "pause-1")
			wantWritten(again, "paused", 2)
			// Stale version: 409 with the current version.
			p := wantProblem(t, tr("resume", 1), http.StatusConflict)
			if p.CurrentVersion == nil || *p.CurrentVersion != 2 {
				t.Fatalf("409 without current_version 2: %+v", p)
			}
			// Illegal from paused: 422.
			p = wantProblem(t, tr("pause", 2), http.StatusUnprocessableEntity)
			if p.Type != "https://taskpilots.dev/problems/illegal" {
				t.Fatalf("type %q", p.Type)
			}
			wantFields(t, wantProblem(t, e.post(e.controller, path+"/pause", `{"reason": "r"}`), http.StatusUnprocessableEntity), "expected_version")
			wantFields(t, wantProblem(t, e.post(e.controller, path+"/pause", `{"expected_version": 0}`), http.StatusUnprocessableEntity), "expected_version")
			wantFields(t, wantProblem(t, e.post(e.controller, path+"/pause", `{"expected_version": "2"}`), http.StatusUnprocessableEntity), "expected_version")
			wantProblem(t, e.post(e.controller, "/sessions/ses_nope/pause", map[string]any{"expected_version": 1}), http.StatusNotFound)
		})

		wantWritten(tr("resume", 2), "open", 3)
		noWrites(t, s, func() {
			wantProblem(t, tr("resume", 3), http.StatusUnprocessableEntity)
		})
		wantWritten(e.post(e.controller, path+"/escalate", map[string]any{"expected_version": 3, "reason": "unsure", "question": "Refund anyway?"}), "escalated", 4)
		g := wantStatus(t, e.get(e.worker, path), http.StatusOK).JSON(t)
		esc := g["state"].(map[string]any)["escalation"].(map[string]any)
		if esc["question"] != "Refund anyway?" {
			t.Fatalf("escalation = %v", esc)
		}
		wantWritten(tr("cancel", 4), "cancelled", 5)
		noWrites(t, s, func() {
			for _, verb := range []string{"pause", "resume", "escalate", "cancel"} {
				wantProblem(t, tr(verb, 5), http.StatusUnprocessableEntity)
			}
		})
	})
}
