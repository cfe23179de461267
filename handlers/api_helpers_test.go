package handlers_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/taskpilots/handoff/handlers"
	"github.com/taskpilots/handoff/handlers/apicontract"
	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/web"
)

// apiEnv is a real server on a fresh database with one token per role.
type apiEnv struct {
	t                         *testing.T
	s                         *models.Store
	h                         http.Handler
	srv                       *httptest.Server
	admin, controller, worker string
}

func newAPIEnv(t *testing.T, s *models.Store) *apiEnv {
	t.Helper()
	// The real assembly, so that the body limit, the error handler and the
	// rest of the middleware are exercised as they run in production.
	h, err := web.NewServer(s, web.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatalf("web.NewServer: %v", err)
	}
	// Every exchange is validated against the OpenAPI document, so each API
	// test also checks that the code answers as the document says.
	h = apicontract.Handler(t, h)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	e := &apiEnv{t: t, s: s, h: h, srv: srv}
	e.admin = e.token("admin", models.RoleAdmin)
	e.controller = e.token("ctl", models.RoleController)
	e.worker = e.token("w", models.RoleWorker)
	return e
}

func (e *apiEnv) token(name string, role models.Role) string {
	e.t.Helper()
	secret, _, err := e.s.CreateToken(context.Background(), name, role)
	if err != nil {
		e.t.Fatalf("create token: %v", err)
	}
	return secret
}

// apiResponse is one HTTP answer, read in full.
type apiResponse struct {
	Status int
	Header http.Header
	Body   []byte
}

// JSON decodes the body into a generic value (numbers as json.Number).
func (r apiResponse) JSON(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	dec := json.NewDecoder(bytes.NewReader(r.Body))
	dec.UseNumber()
	if err := dec.Decode(&m); err != nil {
		t.Fatalf("decode %d body %q: %v", r.Status, r.Body, err)
	}
	return m
}

// Decode decodes the body into v.
func (r apiResponse) Decode(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal(r.Body, v); err != nil {
		t.Fatalf("decode %d body %q: %v", r.Status, r.Body, err)
	}
}

// apiReq is one request: a body given as a string is sent as is, anything else
// as JSON; headers come in name, value pairs.
type apiReq struct {
	method, path, token string
	body                any
	headers             []string
}

func (e *apiEnv) do(r apiReq) apiResponse {
	e.t.Helper()
	return e.doCtx(context.Background(), r)
}

func (e *apiEnv) doCtx(ctx context.Context, r apiReq) apiResponse {
	e.t.Helper()
	var body io.Reader
	switch b := r.body.(type) {
	case nil:
	case string:
		body = strings.NewReader(b)
	case []byte:
		body = bytes.NewReader(b)
	default:
		j, err := json.Marshal(b)
		if err != nil {
			e.t.Fatalf("encode body: %v", err)
		}
		body = bytes.NewReader(j)
	}
	hr, err := http.NewRequestWithContext(ctx, r.method, e.srv.URL+"/api/v1"+r.path, body)
	if err != nil {
		e.t.Fatalf("new request: %v", err)
	}
	if body != nil {
		hr.Header.Set("Content-Type", "application/json")
	}
	if r.token != "" {
		hr.Header.Set("Authorization", "Bearer "+r.token)
	}
	for i := 0; i+1 < len(r.headers); i += 2 {
		hr.Header.Set(r.headers[i], r.headers[i+1])
	}
	resp, err := e.srv.Client().Do(hr)
	if err != nil {
		e.t.Fatalf("%s %s: %v", r.method, r.path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatalf("%s %s: read body: %v", r.method, r.path, err)
	}
	return apiResponse{Status: resp.StatusCode, Header: resp.Header, Body: b}
}

func (e *apiEnv) post(token, path string, body any, headers ...string) apiResponse {
	e.t.Helper()
	return e.do(apiReq{method: http.MethodPost, path: path, token: token, body: body, headers: headers})
}

func (e *apiEnv) get(token, path string) apiResponse {
	e.t.Helper()
	return e.do(apiReq{method: http.MethodGet, path: path, token: token})
}

// wantStatus fails unless r has the status; it returns r for chaining.
func wantStatus(t *testing.T, r apiResponse, status int) apiResponse {
	t.Helper()
	if r.Status != status {
		t.Fatalf("status %d, want %d; body %s", r.Status, status, r.Body)
	}
	return r
}

// wantProblem checks that r is a problem+json answer with status and returns it.
func wantProblem(t *testing.T, r apiResponse, status int) handlers.Problem {
	t.Helper()
	wantStatus(t, r, status)
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, handlers.ProblemContentType) {
		t.Fatalf("content type %q, want %s; body %s", ct, handlers.ProblemContentType, r.Body)
	}
	var p handlers.Problem
	r.Decode(t, &p)
	if p.Status != status || p.Title == "" || p.Detail == "" || p.Type == "" || p.Errors == nil {
		t.Fatalf("problem body %s", r.Body)
	}
	return p
}

// fieldsOf lists the field names of a problem's errors, in order.
func fieldsOf(p handlers.Problem) []string {
	out := make([]string, len(p.Errors))
	for i, f := range p.Errors {
		out[i] = f.Field
	}
	return out
}

// wantFields fails unless the problem names exactly these fields (any order).
func wantFields(t *testing.T, p handlers.Problem, fields ...string) {
	t.Helper()
	got := map[string]int{}
	for _, f := range p.Errors {
		got[f.Field]++
		if f.Message == "" {
			t.Errorf("field %s has no message", f.Field)
		}
	}
	wantSet := map[string]int{}
	for _, f := range fields {
		wantSet[f]++
	}
	if fmt.Sprint(got) != fmt.Sprint(wantSet) {
		t.Fatalf("problem fields %v, want %v; body %+v", fieldsOf(p), fields, p)
	}
}

// apiSnapshot renders every row of the tables a write touches, so a test can
// assert that a refused request wrote nothing at all (not even an update).
func apiSnapshot(t *testing.T, s *models.Store) string {
	t.Helper()
	var b strings.Builder
	for _, q := range []struct{ table, order string }{
		{"sessions", "id"}, {"events", "session_id, seq"}, {"delegations", "id"}, {"idempotency_keys", "scope, key"},
		{"routes", "step"}, {"admin_audit", "id"}, {"webhooks", "id"}, {"webhook_deliveries", "webhook_id, event_id"},
		{"queue_flow", "queue"},
	} {
		var rows []map[string]any
		if err := s.DB.Table(q.table).Order(q.order).Find(&rows).Error; err != nil {
			t.Fatalf("snapshot %s: %v", q.table, err)
		}
		fmt.Fprintf(&b, "%s: %d rows\n", q.table, len(rows))
		for _, r := range rows {
			fmt.Fprintf(&b, "  %v\n", r)
		}
	}
	return b.String()
}

// noWrites runs fn and fails if it changed any row.
func noWrites(t *testing.T, s *models.Store, fn func()) {
	t.Helper()
	before := apiSnapshot(t, s)
	fn()
	if after := apiSnapshot(t, s); after != before {
		t.Fatalf("a refused request wrote to the database:\nbefore:\n%s\nafter:\n%s", before, after)
	}
}

// countRows counts rows of a table matching a condition.
func countRows(t *testing.T, s *models.Store, table, where string, args ...any) int64 {
	t.Helper()
	var n int64
	if err := s.DB.Table(table).Where(where, args...).Count(&n).Error; err != nil {
		t.Fatalf("count %s: %v", table, err)
	}
	return n
}

// createSession creates a session through the API and returns its id.
func (e *apiEnv) createSession(body any) string {
	e.t.Helper()
	if body == nil {
		body = map[string]any{"goal": "Refund order 1182 if eligible", "ticket_ref": "T-1182"}
	}
	m := wantStatus(e.t, e.post(e.controller, "/sessions", body), http.StatusCreated).JSON(e.t)
	return m["session_id"].(string)
}

// delegate queues a step of a session at version v and returns the
// delegation id.
func (e *apiEnv) delegate(sessionID string, v int64, queue string, extra map[string]any) string {
	e.t.Helper()
	body := map[string]any{"queue": queue, "step": "check-eligibility", "instructions": "Check the order.", "expected_version": v}
	for k, x := range extra {
		body[k] = x
	}
	m := wantStatus(e.t, e.post(e.controller, "/sessions/"+sessionID+"/delegations", body), http.StatusCreated).JSON(e.t)
	return m["delegation_id"].(string)
}

// apiLease is the 200 answer of a lease.
type apiLease struct {
	DelegationID   string        `json:"delegation_id"`
	SessionID      string        `json:"session_id"`
	Step           string        `json:"step"`
	Attempt        int           `json:"attempt"`
	LeaseToken     string        `json:"lease_token"`
	LeaseExpiresAt string        `json:"lease_expires_at"`
	Packet         models.Packet `json:"packet"`
}

func (e *apiEnv) lease(queue, worker string, wait int) apiLease {
	e.t.Helper()
	var l apiLease
	wantStatus(e.t, e.post(e.worker, "/queues/"+queue+"/lease", map[string]any{"worker": worker, "wait_seconds": wait}), http.StatusOK).Decode(e.t, &l)
	return l
}

// completedResult is a valid completed result for a lease.
func completedResult(l apiLease) map[string]any {
	return map[string]any{
		"lease_token": l.LeaseToken, "session_id": l.SessionID, "step": l.Step, "result_type": "completed",
		"output":      map[string]any{"eligible": true},
		"evidence":    []any{map[string]any{"claim": "order paid 2026-11-20", "source": "orders-db:1182"}},
		"uncertainty": map[string]any{"level": 0.1, "notes": "currency conversion assumed"},
		"failure":     nil,
	}
}

// rfc3339UTC parses an API time and checks it is RFC 3339 in UTC.
func rfc3339UTC(t *testing.T, s string) time.Time {
	t.Helper()
	ts, err := time.Parse(time.RFC3339Nano, s)
	if err != nil || !strings.HasSuffix(s, "Z") {
		t.Fatalf("time %q is not RFC 3339 UTC (%v)", s, err)
	}
	return ts
}

// sessionState reads a session's version and status through the API.
func (e *apiEnv) sessionState(id string) (int64, string) {
	e.t.Helper()
	m := wantStatus(e.t, e.get(e.worker, "/sessions/"+id), http.StatusOK).JSON(e.t)
	v, _ := m["state_version"].(json.Number).Int64()
	return v, m["status"].(string)
}

// jsonInt reads a JSON number from a generic map.
func jsonInt(t *testing.T, m map[string]any, key string) int64 {
	t.Helper()
	n, ok := m[key].(json.Number)
	if !ok {
		t.Fatalf("%s is %T (%v), want a number", key, m[key], m[key])
	}
	v, err := n.Int64()
	if err != nil {
		t.Fatalf("%s: %v", key, err)
	}
	return v
}
