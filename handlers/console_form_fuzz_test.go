package handlers_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/taskpilots/handoff/handlers"
	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
	"github.com/taskpilots/handoff/web"
)

// FuzzConsoleForm posts arbitrary url-encoded bodies to every takeover form
// of the console, through the whole server (routing, login cookie, CSRF,
// roles), as an admin who holds an escalated session. The form binder and
// the validators must never panic or fail with a 5xx; a refused form writes
// nothing and shows why (inline field errors, the form error, the conflict
// banner or the problem banner); an accepted one writes exactly one event,
// and only when it named the current version.
//
// Every input starts from the same database: each run works inside a
// transaction that is rolled back (the store's handle is swapped for the
// transaction's while the request runs).
func FuzzConsoleForm(f *testing.F) {
	ctx := context.Background()
	s := storetest.New(f, models.SQLite)
	h, err := web.NewServer(s, web.Config{Logger: slog.New(slog.DiscardHandler), SessionKey: "fuzz-session-key-0123456789abcdefghijklmnop"})
	if err != nil {
		f.Fatal(err)
	}
	// The metrics observer flushes rejections from a timer goroutine, which
	// would use the swapped handle concurrently.
	s.Observer = nil
	admin, err := s.CreateUser(ctx, models.CreateUserInput{Email: "fuzz@example.com", Name: "Fuzz Admin", Role: models.RoleAdmin, Password: testPassword})
	if err != nil {
		f.Fatal(err)
	}
	id := storetest.Session(ctx, f, s, nil)
	v := int64(1)
	if _, err := s.Transition(ctx, id, models.EventSessionEscalated, "token:controller", "", models.TransitionInput{ExpectedVersion: &v, Reason: "fuzz"}); err != nil {
		f.Fatal(err)
	}
	v = 2
	if _, err := s.ClaimEscalation(ctx, id, admin, "", models.ClaimInput{ExpectedVersion: &v}); err != nil {
		f.Fatal(err)
	}
	const version = 3

	// Log in through the form: a CSRF cookie and token, then the login cookie.
	var cookies []*http.Cookie
	serve := func(method, path, body string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(method, path, strings.NewReader(body))
		if body != "" {
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		}
		for _, c := range cookies {
			req.AddCookie(c)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	keep := func(rec *httptest.ResponseRecorder) {
		cookies = append(cookies, rec.Result().Cookies()...)
	}
	rec := serve(http.MethodGet, "/login", "")
	keep(rec)
	m := regexp.MustCompile(`name="csrf-token" content="([^"]+)"`).FindStringSubmatch(rec.Body.String())
	if m == nil {
		f.Fatalf("no CSRF token on the login page")
	}
	token := m[1]
	rec = serve(http.MethodPost, "/login", url.Values{"email": {"fuzz@example.com"}, "password": {testPassword}, "_csrf": {token}}.Encode())
	if rec.Code != http.StatusSeeOther {
		f.Fatalf("login: %d\n%s", rec.Code, rec.Body)
	}
	keep(rec)

	actions := handlers.ConsoleActions()
	// The forms the holder is offered; an invalid post to one of them must
	// show its errors. (The others, claim and force release, are refused
	// without writing, but the page has no form to show their errors in.)
	row, err := s.GetSession(ctx, id)
	if err != nil {
		f.Fatal(err)
	}
	st, err := row.Decode()
	if err != nil {
		f.Fatal(err)
	}
	offered := map[models.TakeoverAction]bool{}
	for _, a := range models.TakeoverActions(st, admin) {
		offered[a] = true
	}
	for i, body := range []string{
		"state_version=3",
		"state_version=2",
		"state_version=abc",
		"state_version=",
		"state_version=3&reason=going+home",
		"state_version=3&text=called+the+customer&evidence_claim=paid&evidence_source=orders-db",
		"state_version=3&text=&evidence_source=only+a+source",
		"state_version=3&question=Which+card%3F",
		"state_version=3&queue=refunds&step=check&instructions=again&facts=order%3D1182%0Anot+a+fact",
		"state_version=3&queue=bad+queue!&step=",
		"state_version=3&queue=",
		"state_version=3&resolution=refunded",
		"state_version=3&resolution=+++",
		"state_version=3&reason=",
		"state_version=%zz&reason=%",
		"state_version=3&state_version=4&idempotency_key=k1",
		"state_version=99999999999999999999&_csrf=forged",
	} {
		f.Add(uint8(i%len(actions)), body)
		f.Add(uint8((i+3)%len(actions)), body)
	}

	countEvents := func(t *testing.T) int64 {
		var n int64
		if err := s.DB.Model(&models.Event{}).Where("session_id = ?", id).Count(&n).Error; err != nil {
			t.Fatal(err)
		}
		return n
	}
	f.Fuzz(func(t *testing.T, action uint8, body string) {
		a := actions[int(action)%len(actions)]
		base := s.DB
		tx := base.Begin()
		if tx.Error != nil {
			t.Fatal(tx.Error)
		}
		s.DB = tx
		defer func() {
			s.DB = base
			tx.Rollback()
		}()
		before := countEvents(t)
		full := "_csrf=" + url.QueryEscape(token) + "&" + body
		rec := serve(http.MethodPost, "/console/sessions/"+id+"/"+string(a), full)
		written := countEvents(t) - before
		page := rec.Body.String()

		// What the server read: the first value of each field, as r.FormValue.
		form, _ := url.ParseQuery(full)
		sv, verr := strconv.ParseInt(strings.TrimSpace(form.Get("state_version")), 10, 64)

		switch rec.Code {
		case http.StatusSeeOther:
			if written != 1 {
				t.Fatalf("%s accepted (%s) but wrote %d events", a, body, written)
			}
			if verr != nil || sv != version {
				t.Fatalf("%s accepted with state_version %q; the session is at %d", a, form.Get("state_version"), version)
			}
			return
		case http.StatusConflict, http.StatusUnprocessableEntity, http.StatusForbidden, http.StatusRequestEntityTooLarge:
		default:
			t.Fatalf("%s with %q: status %d\n%s", a, body, rec.Code, page)
		}
		if written != 0 {
			t.Fatalf("%s refused with %d but wrote %d events", a, rec.Code, written)
		}
		if verr != nil && rec.Code != http.StatusUnprocessableEntity && rec.Code != http.StatusForbidden {
			t.Fatalf("%s with a state_version that is not a number (%q): status %d; want 422", a, form.Get("state_version"), rec.Code)
		}
		switch rec.Code {
		case http.StatusConflict:
			if verr == nil && sv == version {
				t.Fatalf("%s refused as stale although it named the current version", a)
			}
			if !strings.Contains(page, `data-testid="conflict`) {
				t.Fatalf("%s refused as stale without the conflict banner:\n%s", a, page)
			}
		case http.StatusUnprocessableEntity:
			if offered[a] && verr != nil && !strings.Contains(page, "The version must be a whole number") {
				t.Fatalf("%s refused an unreadable version without saying so:\n%s", a, page)
			}
			// A form the page does not offer says why in the banner.
			if !strings.Contains(page, `data-testid="field-error"`) && !strings.Contains(page, `class="form-error"`) &&
				!strings.Contains(page, `data-testid="action-problem"`) {
				t.Fatalf("%s refused (422) without showing why:\n%s", a, page)
			}
		}
	})
}
