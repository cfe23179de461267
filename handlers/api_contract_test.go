package handlers_test

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/taskpilots/handoff/handlers"
	"github.com/taskpilots/handoff/handlers/apicontract"
	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
	"github.com/taskpilots/handoff/web"
)

// collected gathers what a validator reports instead of failing the test.
type collected struct {
	mu   sync.Mutex
	errs []string
}

func (c *collected) Helper() {}
func (c *collected) Errorf(format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.errs = append(c.errs, fmt.Sprintf(format, args...))
}

func (c *collected) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return strings.Join(c.errs, "\n")
}

// TestContractCatchesADriftedDocument runs the real server behind a
// validator of a deliberately wrong document (a field's type changed, a
// status left out) and checks that real answers are reported against it,
// while the true document passes the same exchanges.
func TestContractCatchesADriftedDocument(t *testing.T) {
	t.Parallel()
	s := storetest.New(t, models.SQLite)
	h, err := web.NewServer(s, web.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	token, _, err := s.CreateToken(t.Context(), "ctl", models.RoleController)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(handlers.OpenAPIDocument(), &doc); err != nil {
		t.Fatal(err)
	}
	at := func(v any, path ...string) map[string]any {
		for _, p := range path {
			v = v.(map[string]any)[p]
		}
		return v.(map[string]any)
	}
	at(doc, "components", "schemas", "Session", "properties", "state_version")["type"] = "string"
	// The example would contradict the drifted schema, and the document
	// would not load at all.
	delete(at(doc, "paths", "/sessions/{id}", "get", "responses", "200", "content", "application/json"), "example")
	delete(at(doc, "paths", "/sessions/{id}", "get", "responses"), "404")
	drifted, _ := json.Marshal(doc)
	wrong, err := apicontract.New(drifted)
	if err != nil {
		t.Fatal(err)
	}
	right, err := apicontract.New(handlers.OpenAPIDocument())
	if err != nil {
		t.Fatal(err)
	}

	exchange := func(v *apicontract.Validator) string {
		rep := &collected{}
		srv := httptest.NewServer(v.Wrap(rep, h))
		defer srv.Close()
		call := func(method, path, body string) []byte {
			req, _ := http.NewRequest(method, srv.URL+"/api/v1"+path, strings.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+token)
			if body != "" {
				req.Header.Set("Content-Type", "application/json")
			}
			resp, err := srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var m map[string]any
			_ = json.NewDecoder(resp.Body).Decode(&m)
			b, _ := json.Marshal(m)
			return b
		}
		var created struct {
			SessionID string `json:"session_id"`
		}
		_ = json.Unmarshal(call("POST", "/sessions", `{"goal":"Refund order 1182"}`), &created)
		call("GET", "/sessions/"+created.SessionID, "")
		call("GET", "/sessions/ses_unknown", "")
		return rep.String()
	}
	if got := exchange(right); got != "" {
		t.Fatalf("the true document reported:\n%s", got)
	}
	got := exchange(wrong)
	for _, want := range []string{
		"GET /api/v1/sessions/ses_", "state_version", // the answer's integer against the drifted string
		"GET /api/v1/sessions/ses_unknown → 404", "status is not supported",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("report does not mention %q:\n%s", want, got)
		}
	}
}
