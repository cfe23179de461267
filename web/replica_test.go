package web

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
)

// TestReadReplicaHTTP runs the server on a real primary and standby with
// the standby's replay paused: an API token's write stays visible to that
// token (its floor in memory) and not to another token; a browser's write
// sets the floor cookie, which then shows it what the standby has not
// replayed, and the cookie goes once the standby catches up.
func TestReadReplicaHTTP(t *testing.T) {
	pair := storetest.StartReplicaPair(t)
	ctx := context.Background()
	s, err := models.Open(ctx, pair.PrimaryURL, models.OpenOpts{Logger: slog.New(slog.DiscardHandler), ReadURL: pair.StandbyURL})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.MigrateUp(ctx); err != nil {
		t.Fatal(err)
	}
	s.ReplicaTimings(20*time.Millisecond, time.Second, time.Minute)
	e := testEcho(t, s, Config{})
	srv, browser := serve(t, e)
	tokA, _, err := s.CreateToken(ctx, "a", models.RoleController)
	if err != nil {
		t.Fatal(err)
	}
	tokB, _, err := s.CreateToken(ctx, "b", models.RoleController)
	if err != nil {
		t.Fatal(err)
	}
	login(t, s, browser, srv.URL, models.RoleAdmin)
	base, _ := url.Parse(srv.URL)
	floorCookie := func() string {
		for _, c := range browser.Jar.Cookies(base) {
			if c.Name == ReadFloorCookie {
				return c.Value
			}
		}
		return ""
	}
	if floorCookie() == "" {
		t.Fatal("the login (a write) set no floor cookie")
	}
	pair.WaitReplayed(ctx)
	time.Sleep(30 * time.Millisecond)
	if resp, _ := do(t, browser, http.MethodGet, srv.URL+"/console/sessions", nil); resp.StatusCode != http.StatusOK || floorCookie() != "" {
		t.Fatalf("a read after the standby caught up: %d, floor cookie %q, want it deleted", resp.StatusCode, floorCookie())
	}

	standby := pair.Standby()
	if _, err := standby.ExecContext(ctx, `SELECT pg_wal_replay_pause()`); err != nil {
		t.Fatal(err)
	}
	defer standby.ExecContext(ctx, `SELECT pg_wal_replay_resume()`)

	resp, body := do(t, browser, http.MethodPost, srv.URL+"/api/v1/sessions", strings.NewReader(`{"goal":"Refund order 1182 if eligible"}`),
		"Authorization", "Bearer "+tokA, "Content-Type", "application/json")
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("create: %d %s", resp.StatusCode, body)
	}
	var created struct {
		SessionID string `json:"session_id"`
	}
	if err := json.Unmarshal([]byte(body), &created); err != nil || created.SessionID == "" {
		t.Fatalf("create answer %s: %v", body, err)
	}
	get := func(tok string) int {
		resp, _ := do(t, browser, http.MethodGet, srv.URL+"/api/v1/sessions/"+created.SessionID, nil, "Authorization", "Bearer "+tok)
		return resp.StatusCode
	}
	if code := get(tokA); code != http.StatusOK {
		t.Fatalf("the writer's token reads its session: %d, want 200", code)
	}
	if code := get(tokB); code != http.StatusNotFound {
		t.Fatalf("another token during paused replay: %d, want 404 (the standby has not replayed it)", code)
	}
	page := func() int {
		resp, _ := do(t, browser, http.MethodGet, srv.URL+"/console/sessions/"+created.SessionID, nil)
		return resp.StatusCode
	}
	if code := page(); code != http.StatusNotFound {
		t.Fatalf("the browser, no floor, during paused replay: %d, want 404", code)
	}
	// A write of the browser's own: the floor cookie now covers the session.
	resp, body = postForm(t, browser, srv.URL+"/console/account/time-zone",
		url.Values{"time_zone": {"Europe/Paris"}, "_csrf": {csrfOf(t, browser, srv.URL+"/console/account/password")}})
	if resp.StatusCode != http.StatusSeeOther || floorCookie() == "" {
		t.Fatalf("time zone: %d, floor cookie %q\n%s", resp.StatusCode, floorCookie(), body)
	}
	if code := page(); code != http.StatusOK {
		t.Fatalf("the browser after its own write: %d, want 200 from the primary", code)
	}

	if _, err := standby.ExecContext(ctx, `SELECT pg_wal_replay_resume()`); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for get(tokB) != http.StatusOK {
		if time.Now().After(deadline) {
			t.Fatal("the other token never saw the session")
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(30 * time.Millisecond)
	if code := page(); code != http.StatusOK || floorCookie() != "" {
		t.Fatalf("after replay: %d, floor cookie %q, want it deleted", code, floorCookie())
	}
	if st := s.ReplicaStats(); st.Standby == 0 || st.Primary == 0 {
		t.Fatalf("stats %+v: want reads on both", st)
	}
	m := scrape(t, e)
	if m[`taskpilots_read_replica_reads_total{target="standby"}`] == 0 || m[`taskpilots_read_replica_reads_total{target="primary"}`] == 0 ||
		m["taskpilots_read_replica_down"] != 0 {
		t.Fatalf("replica metrics: standby %v, primary %v, down %v", m[`taskpilots_read_replica_reads_total{target="standby"}`],
			m[`taskpilots_read_replica_reads_total{target="primary"}`], m["taskpilots_read_replica_down"])
	}
}
