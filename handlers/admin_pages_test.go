package handlers_test

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/PuerkitoBio/goquery"

	"github.com/taskpilots/handoff/handlers"
	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
	"github.com/taskpilots/handoff/web"
)

func TestAdminUsersPage(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		b := newBrowser(t, s, web.Config{})
		root, rootUser := agent(t, b, "Root Admin", models.RoleAdmin)

		// A typed password: redirect with a banner, nothing secret shown.
		p := root.submit("/console/admin/users", "/console/admin/users", url.Values{
			"email": {"ana@example.com"}, "name": {"Ana"}, "role": {"agent"}, "password": {testPassword}})
		if p.StatusCode != http.StatusSeeOther {
			t.Fatalf("create: %d\n%s", p.StatusCode, p.Body)
		}
		// No password: one is generated and shown once.
		p = root.submit("/console/admin/users", "/console/admin/users", url.Values{
			"email": {"rita@example.com"}, "name": {"Rita"}, "role": {"reviewer"}})
		secret := squash(p.Doc(t).Find(`[data-testid="secret-value"]`))
		if p.StatusCode != http.StatusOK || len(secret) < 20 {
			t.Fatalf("create with a generated password: %d, secret %q", p.StatusCode, secret)
		}
		rita := b.fresh()
		rita.mustLogin("rita@example.com", secret)
		// Invalid input: 422 with inline errors and the typed values kept.
		p = root.submit("/console/admin/users", "/console/admin/users", url.Values{
			"email": {"not-an-email"}, "name": {"X"}, "role": {"owner"}, "password": {"short"}})
		doc := p.Doc(t)
		if p.StatusCode != http.StatusUnprocessableEntity || doc.Find(`[data-testid="field-error"]`).Length() != 3 {
			t.Fatalf("invalid user: %d, %d errors", p.StatusCode, doc.Find(`[data-testid="field-error"]`).Length())
		}
		if v, _ := doc.Find(`#new-email`).Attr("value"); v != "not-an-email" {
			t.Errorf("typed email lost: %q", v)
		}

		users, _ := s.ListUsers(context.Background())
		var anaID, ritaID string
		for _, u := range users {
			switch u.Email {
			case "ana@example.com":
				anaID = u.ID
			case "rita@example.com":
				ritaID = u.ID
			}
		}
		// Disable Ana: she can no longer log in.
		p = root.submit("/console/admin/users", "/console/admin/users/"+anaID+"/disable", nil)
		if p.StatusCode != http.StatusSeeOther {
			t.Fatalf("disable: %d", p.StatusCode)
		}
		if p := b.fresh().login("ana@example.com", testPassword); p.StatusCode == http.StatusSeeOther {
			t.Fatal("a disabled user logged in")
		}
		p = root.submit("/console/admin/users", "/console/admin/users/"+anaID+"/enable", nil)
		if p.StatusCode != http.StatusSeeOther {
			t.Fatalf("enable: %d", p.StatusCode)
		}
		b.fresh().mustLogin("ana@example.com", testPassword)

		// Rita becomes an admin; her open login sees it on the next page.
		p = root.submit("/console/admin/users", "/console/admin/users/"+ritaID+"/role", url.Values{"role": {"admin"}})
		if p.StatusCode != http.StatusSeeOther {
			t.Fatalf("role: %d", p.StatusCode)
		}
		getDoc(rita, "/console/admin/users")
		// Reset Rita's password: the new one is shown once and works.
		p = root.submit("/console/admin/users", "/console/admin/users/"+ritaID+"/reset-password", nil)
		pw := squash(p.Doc(t).Find(`[data-testid="secret-value"]`))
		if p.StatusCode != http.StatusOK || pw == "" || pw == secret {
			t.Fatalf("reset: %d %q", p.StatusCode, pw)
		}
		b.fresh().mustLogin("rita@example.com", pw)
		// Nobody changes their own account here.
		p = root.submit("/console/admin/users", "/console/admin/users/"+rootUser.ID+"/disable", nil)
		if p.StatusCode != http.StatusForbidden || p.Doc(t).Find(`[data-testid="admin-problem"]`).Length() != 1 {
			t.Fatalf("self-disable: %d", p.StatusCode)
		}
		if p := root.submit("/console/admin/users", "/console/admin/users/usr_missing/disable", nil); p.StatusCode != http.StatusNotFound {
			t.Fatalf("unknown user: %d", p.StatusCode)
		}

		// Every action is in the admin log, with the actor.
		doc = getDoc(root, "/console/admin/audit")
		var actions []string
		doc.Find(`[data-testid="admin-log-row"]`).Each(func(_ int, r *goquery.Selection) {
			a, _ := r.Attr("data-action")
			actions = append(actions, a)
		})
		want := "user.reset_password,user.role,user.enable,user.disable,user.create,user.create"
		if strings.Join(actions, ",") != want {
			t.Fatalf("admin log = %v, want %s", actions, want)
		}
		if !strings.Contains(squash(doc.Find(`[data-testid="admin-log-row"]`).First()), "Root Admin") {
			t.Error("the admin log does not name the actor")
		}
	})
}

func TestAdminTokensPage(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		b := newBrowser(t, s, web.Config{})
		root, _ := agent(t, b, "Root Admin", models.RoleAdmin)
		p := root.submit("/console/admin/tokens", "/console/admin/tokens", url.Values{"name": {"billing-ctl"}, "role": {"controller"}})
		secret := squash(p.Doc(t).Find(`[data-testid="secret-value"]`))
		if p.StatusCode != http.StatusOK || !strings.HasPrefix(secret, models.TokenPrefix) {
			t.Fatalf("create token: %d %q", p.StatusCode, secret)
		}
		api := func() int {
			req, _ := http.NewRequest(http.MethodGet, b.srv.URL+"/api/v1/metrics", nil)
			req.Header.Set("Authorization", "Bearer "+secret)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			return resp.StatusCode
		}
		if got := api(); got != http.StatusOK {
			t.Fatalf("new token on the API: %d", got)
		}
		// The secret is not on the list page.
		doc := getDoc(root, "/console/admin/tokens")
		if strings.Contains(doc.Text(), secret) {
			t.Fatal("the token list shows the secret")
		}
		id, _ := doc.Find(`[data-testid="token-row"][data-name="billing-ctl"]`).Attr("data-token-id")
		p = root.submit("/console/admin/tokens", "/console/admin/tokens/"+id+"/revoke", nil)
		if p.StatusCode != http.StatusSeeOther {
			t.Fatalf("revoke: %d", p.StatusCode)
		}
		if got := api(); got != http.StatusUnauthorized {
			t.Fatalf("revoked token on the API: %d", got)
		}
		p = root.submit("/console/admin/tokens", "/console/admin/tokens", url.Values{"name": {"bad name"}, "role": {"agent"}})
		if p.StatusCode != http.StatusUnprocessableEntity || p.Doc(t).Find(`[data-testid="field-error"]`).Length() != 2 {
			t.Fatalf("invalid token: %d", p.StatusCode)
		}
	})
}

func TestAuditTrailPage(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		b := newBrowser(t, s, web.Config{})
		root, rootUser := agent(t, b, "Root Admin", models.RoleAdmin)
		_, ana := agent(t, b, "Ana Agent", models.RoleAgent)
		id := decidedBy(t, s, ana)
		other := escalate(t, s, 3, "T-9")

		doc := getDoc(root, "/console/audit")
		if n := doc.Find(`[data-testid="audit-row"]`).Length(); n != 8 {
			t.Fatalf("unfiltered rows = %d, want 8", n)
		}
		doc = getDoc(root, "/console/audit?actor=ana.agent@example.com")
		if got := attrs(doc.Find(`[data-testid="audit-row"]`), "data-type"); strings.Join(got, ",") != "human.completed,human.claimed" {
			t.Fatalf("by email = %v", got)
		}
		doc = getDoc(root, "/console/audit?ticket=T-9&type=session.escalated")
		rows := doc.Find(`[data-testid="audit-row"]`)
		if rows.Length() != 1 || attrs(rows, "data-session-id")[0] != other {
			t.Fatalf("by ticket and type = %v", attrs(rows, "data-session-id"))
		}
		var ev map[string]any
		if err := json.Unmarshal([]byte(rows.Find(`[data-testid="audit-json"]`).Text()), &ev); err != nil || ev["hash"] == "" || ev["payload"] == nil {
			t.Fatalf("row json = %v, %v", ev, err)
		}
		future := time.Now().UTC().Add(48 * time.Hour).Format("2006-01-02T15:04")
		if n := getDoc(root, "/console/audit?from="+future).Find(`[data-testid="audit-row"]`).Length(); n != 0 {
			t.Errorf("rows from the future = %d", n)
		}
		p := root.get("/console/audit?type=nope&from=yesterday")
		if p.StatusCode != http.StatusUnprocessableEntity || p.Doc(t).Find(`[data-testid="field-error"]`).Length() != 2 {
			t.Fatalf("bad filter: %d", p.StatusCode)
		}

		// The export link carries the filter.
		doc = getDoc(root, "/console/audit?session="+id)
		href, _ := doc.Find(`[data-testid="export-csv"]`).Attr("href")
		p = root.get(href)
		if p.StatusCode != http.StatusOK || !strings.HasPrefix(p.Header.Get("Content-Type"), "text/csv") ||
			!strings.Contains(p.Header.Get("Content-Disposition"), "attachment") {
			t.Fatalf("csv: %d %q %q", p.StatusCode, p.Header.Get("Content-Type"), p.Header.Get("Content-Disposition"))
		}
		recs, err := csv.NewReader(strings.NewReader(p.Body)).ReadAll()
		if err != nil || len(recs) != 7 || recs[1][2] != id || recs[1][4] != "human.completed" {
			t.Fatalf("csv records = %d %v (%v)", len(recs), recs[:min(2, len(recs))], err)
		}
		p = root.get("/console/audit/export.jsonl?type=human.claimed")
		if p.StatusCode != http.StatusOK || strings.Count(p.Body, "\n") != 1 {
			t.Fatalf("jsonl: %d %q", p.StatusCode, p.Body)
		}

		// The transcript of a session.
		p = root.get("/console/audit/sessions/" + id + "/transcript.json")
		var tr models.Transcript
		if p.StatusCode != http.StatusOK || json.Unmarshal([]byte(p.Body), &tr) != nil || len(tr.Events) != 6 || tr.ExportedBy != rootUser.Actor() {
			t.Fatalf("transcript: %d, %d events", p.StatusCode, len(tr.Events))
		}
		if p := root.get("/console/audit/sessions/ses_missing/transcript.json"); p.StatusCode != http.StatusNotFound {
			t.Fatalf("unknown transcript: %d", p.StatusCode)
		}
		doc = getDoc(root, "/console/admin/audit")
		if got := attrs(doc.Find(`[data-testid="admin-log-row"]`), "data-action"); strings.Join(got, ",") != "audit.transcript,audit.export,audit.export" {
			t.Fatalf("admin log = %v", got)
		}
	})
}

func TestAdminVerifyPage(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		b := newBrowser(t, s, web.Config{})
		root, _ := agent(t, b, "Root Admin", models.RoleAdmin)
		_, ana := agent(t, b, "Ana Agent", models.RoleAgent)
		bad := decidedBy(t, s, ana)
		if err := s.DB.Exec(`UPDATE events SET actor = 'user:someone-else' WHERE session_id = ? AND seq = 5`, bad).Error; err != nil {
			t.Fatal(err)
		}
		if st, _ := getDoc(root, "/console/admin/verify").Find(`[data-testid="verify-status"]`).Attr("data-state"); st != "idle" {
			t.Fatalf("fresh state = %q", st)
		}
		p := root.submit("/console/admin/verify", "/console/admin/verify", nil)
		if p.StatusCode != http.StatusSeeOther {
			t.Fatalf("start: %d", p.StatusCode)
		}
		// Poll the fragment as htmx does, until the run is over.
		var state string
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			frag := getDoc(root, "/console/admin/verify/status", "HX-Request", "true")
			state, _ = frag.Find(`[data-testid="verify-status"]`).Attr("data-state")
			if state != "running" {
				if frag.Find("h1").Length() != 0 {
					t.Fatal("the status fragment is a whole page")
				}
				rows := frag.Find(`[data-testid="verify-broken"] [data-testid="problem"]`)
				if rows.Length() != 1 || attrs(rows, "data-session-id")[0] != bad {
					t.Fatalf("broken chains = %v", attrs(rows, "data-session-id"))
				}
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if state != "problems" {
			t.Fatalf("final state = %q", state)
		}
	})
}

func TestMetricsDashboard(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		// Windows end at the current second; the clock moves on a little
		// after the data is written, so that it falls inside them.
		var skew atomic.Int64
		s.Now = func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
		b := newBrowser(t, s, web.Config{Reviews: models.ReviewPolicy{DoubleShare: -1}})
		root, _ := agent(t, b, "Root Admin", models.RoleAdmin)
		rita, ritaUser := agent(t, b, "Rita Reviewer", models.RoleReviewer)
		_, ana := agent(t, b, "Ana Agent", models.RoleAgent)
		id := decidedBy(t, s, ana)
		ctx := context.Background()
		if _, err := s.SyncReviewItems(ctx, models.ReviewPolicy{}); err != nil {
			t.Fatal(err)
		}
		scores := map[string]int{}
		for _, c := range models.Rubric {
			scores[c.Key] = 4
		}
		if _, err := s.ScoreReview(ctx, ritaUser, "", models.ScoreInput{Key: models.ReviewKey{SessionID: id, AtVersion: 4}, Scores: scores}); err != nil {
			t.Fatal(err)
		}
		skew.Store(int64(2 * time.Second))

		for window, points := range map[string]int{"": 12, "24h": 12, "7d": 7, "30d": 10} {
			path := "/console/admin/metrics"
			if window != "" {
				path += "?window=" + window
			}
			doc := getDoc(root, path)
			metrics := doc.Find(`[data-testid="metric"]`)
			if got := attrs(metrics, "data-metric"); strings.Join(got, ",") != "handoff_success,rework,infra_retries,recovery,human_wait,state_conflicts,escalation_clarity,prompt_cache" {
				t.Fatalf("%s: metrics = %v", path, got)
			}
			doc.Find(`[data-testid="line-chart"]`).Each(func(_ int, c *goquery.Selection) {
				if n, _ := c.Attr("data-points"); n != strconv.Itoa(points) {
					t.Errorf("%s: chart %s has %s points, want %d", path, attrOf(c, "data-chart"), n, points)
				}
			})
			cur := doc.Find(`[data-testid="metrics-windows"] a[aria-current="true"]`)
			want := window
			if want == "" {
				want = "24h"
			}
			if attrOf(cur, "data-window") != want {
				t.Errorf("%s: current window = %q", path, attrOf(cur, "data-window"))
			}
			if doc.Find("svg").Length() < 5 || doc.Find("script:not([src])").Length() != 0 {
				t.Errorf("%s: %d charts, inline scripts %d", path, doc.Find("svg").Length(), doc.Find("script:not([src])").Length())
			}
		}
		doc := getDoc(rita, "/console/admin/metrics?window=7d")
		clarity := doc.Find(`[data-metric="escalation_clarity"]`)
		if v := squash(clarity.Find(`[data-testid="metric-value"]`)); v != "4.00 / 5" {
			t.Errorf("clarity headline = %q", v)
		}
		if clarity.Find(`[data-testid="bar-chart"] [data-testid="bar"][data-label="refunds"]`).Length() != 1 {
			t.Error("no per-queue bar for refunds")
		}
		if clarity.Find(`[data-testid="line-chart"] [data-testid="point"]`).Length() != 1 {
			t.Errorf("clarity points = %d, want the one bucket with a review", clarity.Find(`[data-testid="point"]`).Length())
		}
		if doc.Find(`[data-metric="state_conflicts"] [data-testid="bar-chart"] [data-testid="bar"][data-label="refunds"]`).Length() != 1 {
			t.Error("no per-queue conflict-rate bar for refunds")
		}
		// One queue: the charts narrow to it, the conflict rate included
		// (refunds' writes committed, none rejected).
		doc = getDoc(root, "/console/admin/metrics?window=7d&queue=refunds")
		if v := squash(doc.Find(`[data-metric="state_conflicts"] [data-testid="metric-value"]`)); v != "0.0 ‰" {
			t.Errorf("per-queue conflict headline = %q", v)
		}
		// Many queues (46, as a seeded database of 1 M events has): the
		// bars show the busiest MetricsBarQueues (refunds, the one with
		// sessions, first) and link to all of them; the page stays under
		// 150 KB.
		for i := range 45 {
			if err := s.RecordRejections(ctx, []models.Rejection{{At: time.Now(), Reason: models.RejectStale,
				Queue: fmt.Sprintf("extra-%02d", i), Count: int64(i + 1)}}); err != nil {
				t.Fatal(err)
			}
		}
		for _, w := range []string{"24h", "7d", "30d"} {
			if p := root.get("/console/admin/metrics?window=" + w); p.StatusCode != http.StatusOK || len(p.Body) > 150*1024 {
				t.Errorf("metrics page %s with 46 queues: status %d, %d bytes, want at most 150 KB", w, p.StatusCode, len(p.Body))
			}
		}
		doc = getDoc(root, "/console/admin/metrics?window=7d")
		doc.Find(`[data-testid="bar-chart"]`).Each(func(_ int, c *goquery.Selection) {
			bars := c.Find(`[data-testid="bar"]`)
			if bars.Length() != handlers.MetricsBarQueues || attrOf(bars.First(), "data-label") != "refunds" {
				t.Errorf("chart %s: %d bars, first %q; want %d, refunds first", attrOf(c, "data-chart"), bars.Length(),
					attrOf(bars.First(), "data-label"), handlers.MetricsBarQueues)
			}
		})
		all := doc.Find(`[data-testid="metrics-all-queues"]`)
		if href, _ := all.Attr("href"); !strings.Contains(href, "queues=all") {
			t.Fatalf("no link to every queue's bars: %q", href)
		}
		href, _ := all.Attr("href")
		doc = getDoc(root, href)
		queues := doc.Find(`#metrics-queue option`).Length() - 1
		if n := doc.Find(`[data-metric="rework"] [data-testid="bar"]`).Length(); n != queues || n < handlers.MetricsBarQueues+2 {
			t.Errorf("all queues: %d bars, want %d", n, queues)
		}
		if doc.Find(`[data-testid="metrics-all-queues"]`).Length() != 0 {
			t.Error("all queues shown, and still a link to show them all")
		}
		// A custom range: the same figures as the API's for it.
		from, to := time.Now().Add(-36*time.Hour).UTC().Truncate(time.Second), time.Now().Add(time.Hour).UTC().Truncate(time.Second)
		rangeQ := "from=" + url.QueryEscape(from.Format(time.RFC3339)) + "&to=" + url.QueryEscape(to.Format(time.RFC3339))
		doc = getDoc(root, "/console/admin/metrics?"+rangeQ)
		if n := doc.Find(`[data-metric="rework"] [data-testid="line-chart"]`).AttrOr("data-points", ""); n != "12" {
			t.Errorf("custom range: %s points, want 12", n)
		}
		if v, _ := doc.Find(`[data-testid="metrics-queue-form"] input[name="from"]`).Attr("value"); v != from.Format(time.RFC3339) {
			t.Errorf("custom range: the queue form keeps from = %q", v)
		}
		for _, bad := range []string{"from=yesterday&to=now", "from=" + url.QueryEscape(to.Format(time.RFC3339)) + "&to=" + url.QueryEscape(from.Format(time.RFC3339))} {
			if p := root.get("/console/admin/metrics?" + bad); p.StatusCode != http.StatusUnprocessableEntity {
				t.Errorf("custom range %s: %d", bad, p.StatusCode)
			}
		}
		if p := root.get("/console/admin/metrics?window=1y"); p.StatusCode != http.StatusUnprocessableEntity {
			t.Errorf("bad window: %d", p.StatusCode)
		}
		agentB, _ := agent(t, b, "Al Agent", models.RoleAgent)
		if p := agentB.get("/console/admin/metrics"); p.StatusCode != http.StatusForbidden {
			t.Errorf("agent: %d", p.StatusCode)
		}
	})
}

func attrOf(s *goquery.Selection, name string) string {
	v, _ := s.Attr(name)
	return v
}
