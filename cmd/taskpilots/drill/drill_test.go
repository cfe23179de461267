package drill

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/taskpilots/handoff/client"
	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
)

// TestLeaseLost checks how the drill reads a lost lease from the event log.
func TestLeaseLost(t *testing.T) {
	var seq, version int64
	ev := func(typ, payload string) client.Event {
		seq++
		e := client.Event{Seq: seq, Type: typ, VersionBefore: version, Payload: json.RawMessage(payload)}
		if models.VersionEffectOf(models.EventType(typ)) == models.MovesVersion {
			version++
		}
		e.VersionAfter = version
		return e
	}
	lease := func(worker string) client.Event {
		return ev("delegation.leased", `{"delegation_id":"dlg_1","attempt":1,"worker":"`+worker+`"}`)
	}
	for _, c := range []struct {
		name string
		evs  func() []client.Event
		seq  int64 // of the lease in question; 0: the worker's last
		want bool
	}{
		{"still held", func() []client.Event { return []client.Event{lease("w1")} }, 1, false},
		// An audit-only event before the lease: the packet's version (1)
		// is no longer the lease's seq (2).
		{"expired after an audit event", func() []client.Event {
			return []client.Event{ev("escalation.sla_breached", `{}`), lease("w1"), ev("delegation.lease_expired", `{"delegation_id":"dlg_1","attempt":1}`)}
		}, 1, true},
		{"expired", func() []client.Event {
			return []client.Event{lease("w1"), ev("delegation.lease_expired", `{"delegation_id":"dlg_1","attempt":1}`)}
		}, 1, true},
		{"paused", func() []client.Event { return []client.Event{lease("w1"), ev("session.paused", `{}`)} }, 1, true},
		{"its own result", func() []client.Event {
			return []client.Event{lease("w1"), ev("result.completed", `{"delegation_id":"dlg_1","attempt":1}`), ev("session.paused", `{}`)}
		}, 1, false},
		{"another worker's lease expired", func() []client.Event {
			return []client.Event{lease("w2"), ev("delegation.lease_expired", `{"delegation_id":"dlg_1","attempt":1}`)}
		}, 0, false},
		// A pause revoked the worker's first lease of the attempt; the
		// second lease of the same attempt is still live.
		{"leased again after a pause", func() []client.Event {
			return []client.Event{lease("w1"), ev("session.paused", `{}`), ev("session.resumed", `{}`), lease("w1")}
		}, 4, false},
		{"the first of two leases", func() []client.Event {
			return []client.Event{lease("w1"), ev("session.paused", `{}`), ev("session.resumed", `{}`), lease("w1")}
		}, 1, true},
		{"the worker's last lease", func() []client.Event {
			return []client.Event{lease("w1"), ev("session.paused", `{}`), ev("session.resumed", `{}`), lease("w1")}
		}, 0, false},
	} {
		seq, version = 0, 0
		if got := leaseLost(c.evs(), c.seq, "dlg_1", 1, "w1"); got != c.want {
			t.Errorf("%s: leaseLost = %t; want %t", c.name, got, c.want)
		}
	}
}

// TestLocalDatabase checks which databases --restart-db may restart.
func TestLocalDatabase(t *testing.T) {
	for url, want := range map[string]bool{
		"postgres://postgres@127.0.0.1:5432/x":         true,
		"postgres://localhost/x":                       true,
		"postgres://[::1]:5433/x":                      true,
		"postgres:///x?host=/var/run/postgresql":       true,
		"postgres://db.internal:5432/x":                false,
		"postgres://u:p@10.0.0.7/x?sslmode=require":    false,
		"postgresql://127.0.0.1/x?host=db.example.com": false,
	} {
		if got := localDatabase(url); got != want {
			t.Errorf("localDatabase(%q) = %t; want %t", url, got, want)
		}
	}
}

// TestCheckSession feeds the drill's per-session checks a real event log,
// then the same log tampered with, replayed out of order and with a result
// applied twice: each must be caught.
func TestCheckSession(t *testing.T) {
	ctx := context.Background()
	s := storetest.New(t, models.SQLite)
	id, did := storetest.Delegated(ctx, t, s, "drill")
	l, err := s.Claim(ctx, "drill", "w1", "token:w", "")
	if err != nil || l == nil {
		t.Fatalf("claim: %v %v", l, err)
	}
	if _, err := s.SubmitResult(ctx, did, "token:w", "k1", models.ResultInput{LeaseToken: l.LeaseToken, SessionID: id,
		Step: "check-eligibility", ResultType: "completed", Evidence: []models.Evidence{{Claim: "checked"}}}); err != nil {
		t.Fatal(err)
	}
	row, err := s.GetSession(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	mevs, err := s.ListEvents(ctx, id, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	sess := client.Session{SessionID: id, Status: string(row.Status), StateVersion: row.StateVersion, State: json.RawMessage(row.State)}
	events := func() []client.Event {
		var out []client.Event
		for _, e := range mevs {
			out = append(out, client.Event{Seq: e.Seq, Type: string(e.Type), Actor: e.Actor, VersionBefore: e.VersionBefore,
				VersionAfter: e.VersionAfter, Payload: json.RawMessage(e.Payload), IdempotencyKey: e.IdempotencyKey,
				Hash: e.Hash, PrevHash: e.PrevHash, CreatedAt: e.CreatedAt.Time})
		}
		return out
	}
	if c := checkSession(id, sess, events(), map[string]int{}); len(c.problems) > 0 || !c.consistent {
		t.Fatalf("an untouched session: %v (consistent %t)", c.problems, c.consistent)
	}

	evs := events()
	evs[3].Payload = json.RawMessage(strings.Replace(string(evs[3].Payload), `"checked"`, `"forged"`, 1))
	if c := checkSession(id, sess, evs, map[string]int{}); c.chain == 0 || c.replay == 0 {
		t.Errorf("a tampered payload: chain %d, replay %d problems; want both", c.chain, c.replay)
	}

	evs = events()
	evs[1], evs[2] = evs[2], evs[1]
	if c := checkSession(id, sess, evs, map[string]int{}); c.chain == 0 || c.replay == 0 {
		t.Errorf("events out of order: chain %d, replay %d problems; want both", c.chain, c.replay)
	}

	evs = events()
	evs = append(evs, evs[len(evs)-1])
	keys := map[string]int{}
	if c := checkSession(id, sess, evs, keys); c.double == 0 || keys["token:w k1"] != 2 {
		t.Errorf("a result applied twice: %d double, keys %v", c.double, keys)
	}

	running := sess
	running.Status = string(models.StatusRunning)
	if c := checkSession(id, running, events(), map[string]int{}); c.consistent || c.replay == 0 {
		t.Errorf("a projection claiming running without a delegation: consistent %t, replay %d", c.consistent, c.replay)
	}
}
