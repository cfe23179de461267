package handlers_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/PuerkitoBio/goquery"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
	"github.com/taskpilots/handoff/web"
)

// TestAdminTokenNameTaken: the console refuses a second token of a name
// (revoked or not) with a 422 and an inline error on the name field, the
// typed values kept, and stores nothing.
func TestAdminTokenNameTaken(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		b := newBrowser(t, s, web.Config{})
		root, _ := agent(t, b, "Root Admin", models.RoleAdmin)
		create := func() *goquery.Document {
			t.Helper()
			p := root.submit("/console/admin/tokens", "/console/admin/tokens", url.Values{"name": {"fleet"}, "role": {"worker"}})
			if p.StatusCode != http.StatusOK && p.StatusCode != http.StatusUnprocessableEntity {
				t.Fatalf("create: %d", p.StatusCode)
			}
			if p.StatusCode == http.StatusOK {
				return nil
			}
			return p.Doc(t)
		}
		if doc := create(); doc != nil {
			t.Fatal("the first token of a name was refused")
		}
		wantTaken := func(what string, doc *goquery.Document) {
			t.Helper()
			if doc == nil {
				t.Fatalf("%s: a second token named fleet was created", what)
			}
			errs := doc.Find(`[data-testid="field-error"][data-field="name"]`)
			if errs.Length() != 1 || !strings.Contains(errs.Text(), "already used by another token") {
				t.Fatalf("%s: name error %q", what, errs.Text())
			}
			if v, _ := doc.Find(`#new-name`).Attr("value"); v != "fleet" {
				t.Errorf("%s: typed name lost: %q", what, v)
			}
		}
		wantTaken("duplicate", create())
		ts, _ := s.ListTokens(context.Background())
		if len(ts) != 1 {
			t.Fatalf("%d tokens", len(ts))
		}
		if p := root.submit("/console/admin/tokens", "/console/admin/tokens/"+ts[0].ID+"/revoke", nil); p.StatusCode != http.StatusSeeOther {
			t.Fatalf("revoke: %d", p.StatusCode)
		}
		wantTaken("after revoking the first", create())
	})
}

// TestAdminLogShowsCLIChanges: user and token changes made with the CLI
// appear in the console's admin log, where the console's own changes are,
// with the cli:<os user> actor.
func TestAdminLogShowsCLIChanges(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		b := newBrowser(t, s, web.Config{})
		root, _ := agent(t, b, "Root Admin", models.RoleAdmin)
		op := models.CLIOperator("alice")
		u, _, err := s.AdminCreateUser(ctx, op, models.CreateUserInput{Email: "dana@example.com", Name: "Dana", Role: models.RoleAgent})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.SetUserDisabled(ctx, op, u.ID, true); err != nil {
			t.Fatal(err)
		}
		if _, _, err := s.AdminCreateToken(ctx, op, "fleet", models.RoleWorker); err != nil {
			t.Fatal(err)
		}
		if _, err := s.AdminRevokeToken(ctx, op, "fleet"); err != nil {
			t.Fatal(err)
		}
		doc := getDoc(root, "/console/admin/audit")
		rows := doc.Find(`[data-testid="admin-log-row"]`)
		if got := strings.Join(attrs(rows, "data-action"), ","); got != "token.revoke,token.create,user.disable,user.create" {
			t.Fatalf("admin log actions = %s", got)
		}
		rows.Each(func(_ int, r *goquery.Selection) {
			if !strings.Contains(squash(r), "cli:alice") {
				t.Errorf("row %q does not name cli:alice", squash(r))
			}
		})
		// The users and tokens pages link to it.
		for _, page := range []string{"/console/admin/users", "/console/admin/tokens"} {
			if getDoc(root, page).Find(`a[href="/console/admin/audit"]`).Length() == 0 {
				t.Errorf("%s has no link to the admin log", page)
			}
		}
	})
}

// TestAdminTokensPageLastUsed: a token that called the API shows when, in
// place of "never".
func TestAdminTokensPageLastUsed(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		b := newBrowser(t, s, web.Config{})
		root, _ := agent(t, b, "Root Admin", models.RoleAdmin)
		secret, tok, err := s.CreateToken(context.Background(), "fleet", models.RoleController)
		if err != nil {
			t.Fatal(err)
		}
		lastUsed := func() string {
			row := getDoc(root, "/console/admin/tokens").Find(`[data-testid="token-row"][data-token-id="` + tok.ID + `"]`)
			return squash(row.Find("td").Eq(3))
		}
		if got := lastUsed(); got != "never" {
			t.Fatalf("unused token: last used %q", got)
		}
		req, _ := http.NewRequest(http.MethodGet, b.srv.URL+"/api/v1/metrics", nil)
		req.Header.Set("Authorization", "Bearer "+secret)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("API call: %d", resp.StatusCode)
		}
		if got := lastUsed(); got == "never" || got == "" {
			t.Fatalf("used token: last used %q", got)
		}
	})
}
