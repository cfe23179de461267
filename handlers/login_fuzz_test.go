package handlers_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/taskpilots/handoff/handlers"
	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
	"github.com/taskpilots/handoff/web"
)

// FuzzLoginForm decodes arbitrary bodies as the login form, and posts them
// through the whole server (CSRF, throttle, authentication). Decoding never
// panics; the email comes out trimmed and lower-cased, next is always a
// same-site path (or empty); the server answers every body without a 5xx,
// and logs in only with the right password.
func FuzzLoginForm(f *testing.F) {
	s := storetest.New(f, models.SQLite)
	if _, err := s.CreateUser(context.Background(), models.CreateUserInput{Email: "fuzz@example.com", Name: "Fuzz", Role: models.RoleAgent, Password: testPassword}); err != nil {
		f.Fatal(err)
	}
	h, err := web.NewServer(s, web.Config{Logger: slog.New(slog.DiscardHandler), SessionKey: "fuzz-session-key-0123456789abcdefghijklmnop",
		// Enough free failures that the fuzzer keeps reaching authentication.
		LoginFailuresPerAccount: 1 << 30, LoginFailuresPerAddress: 1 << 30})
	if err != nil {
		f.Fatal(err)
	}
	// The anonymous CSRF cookie and its token, from the login page.
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/login", nil))
	cookies := rec.Result().Cookies()
	m := regexp.MustCompile(`name="_csrf" value="([^"]+)"`).FindStringSubmatch(rec.Body.String())
	if m == nil {
		f.Fatal("no CSRF token on the login page")
	}
	token := m[1]

	f.Add("email=fuzz%40example.com&password=correct+horse+battery&next=%2Fconsole", "application/x-www-form-urlencoded")
	f.Add("email=+FUZZ%40Example.com+&password=wrong&next=%2F%2Fevil.example", "application/x-www-form-urlencoded")
	f.Add("email=a%00b&password=%00&next=%2Fa%0D%0Ab", "application/x-www-form-urlencoded")
	f.Add(`{"email":"fuzz@example.com","password":"correct horse battery"}`, "application/json")
	f.Add("--x\r\nContent-Disposition: form-data; name=\"email\"\r\n\r\nfuzz@example.com\r\n--x--\r\n", "multipart/form-data; boundary=x")
	f.Add("%zz=1&email=;;&next=javascript:alert(1)", "application/x-www-form-urlencoded")
	f.Fuzz(func(t *testing.T, body, ctype string) {
		// Decoding alone.
		e := echo.New()
		req := httptest.NewRequest(http.MethodPost, "/login", strings.NewReader(body))
		req.Header.Set("Content-Type", ctype)
		c := e.NewContext(req, httptest.NewRecorder())
		in, err := handlers.DecodeLoginForm(c)
		if err == nil {
			if in.Email != strings.ToLower(in.TypedEmail) || in.TypedEmail != strings.TrimSpace(in.TypedEmail) {
				t.Fatalf("email %q / typed %q: not normalised", in.Email, in.TypedEmail)
			}
			if in.Next != "" && (handlers.SafeNext(in.Next, "") != in.Next || !strings.HasPrefix(in.Next, "/") || strings.HasPrefix(in.Next, "//")) {
				t.Fatalf("next %q is not a same-site path", in.Next)
			}
		} else {
			var he *echo.HTTPError
			if !errors.As(err, &he) || he.Code >= 500 {
				t.Fatalf("decode error %v is not a 4xx", err)
			}
		}

		// Through the server, with a valid CSRF token in the header (the
		// body may not be a form).
		req = httptest.NewRequest(http.MethodPost, "/login", strings.NewReader(body))
		req.Header.Set("Content-Type", ctype)
		req.Header.Set("X-CSRF-Token", token)
		for _, ck := range cookies {
			req.AddCookie(ck)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code >= 500 {
			t.Fatalf("status %d for %q (%s):\n%s", rec.Code, body, ctype, rec.Body)
		}
		loggedIn := false
		for _, ck := range rec.Result().Cookies() {
			loggedIn = loggedIn || (ck.Name == handlers.LoginCookieName && ck.MaxAge > 0)
		}
		if loggedIn && (err != nil || in.Email != "fuzz@example.com" || in.Password != testPassword) {
			t.Fatalf("logged in by %q (%s)", body, ctype)
		}
	})
}

// FuzzCSRFToken: the token comes from the X-CSRF-Token header or the body's
// _csrf field, never from the query string (a request with one there is
// refused outright); and the check lets a state-changing request through
// only with exactly the browser's token.
func FuzzCSRFToken(f *testing.F) {
	const want = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFG"
	auth := &handlers.Auth{Log: slog.New(slog.DiscardHandler)}
	e := echo.New()
	e.HTTPErrorHandler = func(error, echo.Context) {}
	f.Add("", "", "_csrf="+want)
	f.Add("_csrf="+want, "", "")
	f.Add("x=1", want, "")
	f.Add("_csrf=", "", "_csrf="+want+"&_csrf=other")
	f.Add("", "", "_csrf=%zz&_csrf="+want)
	f.Add("a=1;_csrf="+want, "", "b=2;_csrf="+want)
	f.Fuzz(func(t *testing.T, query, header, body string) {
		target := "/x"
		if query != "" {
			target += "?" + query
		}
		newReq := func() *http.Request {
			req := httptest.NewRequest(http.MethodPost, "/x", strings.NewReader(body))
			if u, err := url.Parse(target); err == nil {
				req.URL = u
			}
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			if header != "" && !strings.ContainsAny(header, "\r\n\x00") {
				req.Header.Set("X-CSRF-Token", header)
			}
			return req
		}
		req := newReq()
		got, err := handlers.CSRFTokenFrom(req)
		inQuery := req.URL.Query().Has("_csrf")
		switch {
		case inQuery:
			if err == nil {
				t.Fatalf("token %q read with _csrf in the query %q", got, req.URL.RawQuery)
			}
		case err != nil:
			t.Fatalf("error %v without _csrf in the query", err)
		case req.Header.Get("X-CSRF-Token") != "":
			if got != req.Header.Get("X-CSRF-Token") {
				t.Fatalf("token %q, want the header's", got)
			}
		default:
			vs, _ := url.ParseQuery(body)
			if got != vs.Get("_csrf") {
				t.Fatalf("token %q, want the body's %q", got, vs.Get("_csrf"))
			}
		}

		// The whole check, for an anonymous browser whose token is want.
		req = newReq()
		req.AddCookie(&http.Cookie{Name: handlers.AnonCSRFCookieName, Value: want})
		passed := false
		c := e.NewContext(req, httptest.NewRecorder())
		_ = auth.CSRF()(func(echo.Context) error { passed = true; return nil })(c)
		if passed != (!inQuery && got == want) {
			t.Fatalf("passed=%v with token %q (query %q)", passed, got, req.URL.RawQuery)
		}
	})
}
