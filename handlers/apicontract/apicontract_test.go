package apicontract_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/taskpilots/handoff/handlers/apicontract"
)

// TestDocumentIsValid: the served document passes kin-openapi's validation
// of OpenAPI 3.0, examples included.
func TestDocumentIsValid(t *testing.T) {
	if _, err := apicontract.Default(); err != nil {
		t.Fatal(err)
	}
}

// reporter collects what Wrap reports instead of failing the test.
type reporter struct {
	mu   sync.Mutex
	errs []string
}

func (r *reporter) Helper() {}
func (r *reporter) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

const validSession = `{"session_id":"ses_1","parent_id":null,"ticket_ref":"T-1","goal":"g","status":"open",
	"state_version":1,"current_step":"","state":{},"created_at":"2026-11-30T09:00:00Z","updated_at":"2026-11-30T09:00:00Z"}`

// TestWrapCatchesDrift serves deliberately wrong answers behind the
// validator and checks each is reported, while the right answer is not.
func TestWrapCatchesDrift(t *testing.T) {
	v, err := apicontract.Default()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, method, path, body string
		status                   int
		ctype, answer            string
		want                     string // in the report; "" for none
	}{
		{"valid session", "GET", "/api/v1/sessions/ses_1", "", 200, "application/json", validSession, ""},
		{"wrong field type", "GET", "/api/v1/sessions/ses_1", "", 200, "application/json",
			strings.Replace(validSession, `"state_version":1`, `"state_version":"1"`, 1), "state_version"},
		{"missing required field", "GET", "/api/v1/sessions/ses_1", "", 200, "application/json",
			strings.Replace(validSession, `"goal":"g",`, ``, 1), "goal"},
		{"undocumented field", "GET", "/api/v1/sessions/ses_1", "", 200, "application/json",
			strings.Replace(validSession, `"goal":"g",`, `"goal":"g","mood":"calm",`, 1), "mood"},
		{"undocumented status", "GET", "/api/v1/sessions/ses_1", "", 418, "application/json", `{}`, "status is not supported"},
		{"undocumented content type", "GET", "/api/v1/sessions/ses_1", "", 200, "text/html", `<p>hi</p>`, "text/html"},
		{"problem that is not problem+json", "GET", "/api/v1/sessions/ses_1", "", 404, "application/json", `{}`, "application/json"},
		{"undocumented query parameter", "GET", "/api/v1/sessions/ses_1?verbose=1", "", 200, "application/json", validSession, "verbose"},
		{"refused request accepted", "POST", "/api/v1/sessions", `{"ticket_ref":"T-1"}`, 201, "application/json",
			`{"session_id":"ses_1","status":"open","state_version":1}`, "the document refuses the request"},
		{"refused request refused", "POST", "/api/v1/sessions", `{"ticket_ref":"T-1"}`, 422, "application/problem+json",
			`{"type":"about:blank","title":"t","status":422,"detail":"d","errors":[{"field":"goal","message":"is required"}]}`, ""},
		{"undocumented route", "GET", "/api/v1/nowhere", "", 200, "application/json", `{}`, "no such operation"},
		{"unknown route 404", "GET", "/api/v1/nowhere", "", 404, "application/problem+json", `{}`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep := &reporter{}
			h := v.Wrap(rep, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.ReadAll(r.Body)
				w.Header().Set("Content-Type", tc.ctype)
				w.WriteHeader(tc.status)
				_, _ = io.WriteString(w, tc.answer)
			}))
			req := httptest.NewRequest(tc.method, tc.path, strings.NewReader(tc.body))
			req.Header.Set("Authorization", "Bearer tpk_x")
			if tc.body != "" {
				req.Header.Set("Content-Type", "application/json")
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != tc.status || rec.Body.String() != tc.answer {
				t.Fatalf("the wrapper changed the answer: %d %q", rec.Code, rec.Body)
			}
			got := strings.Join(rep.errs, "\n")
			switch {
			case tc.want == "" && got != "":
				t.Fatalf("reported a valid exchange:\n%s", got)
			case tc.want != "" && !strings.Contains(got, tc.want):
				t.Fatalf("report %q does not mention %q", got, tc.want)
			}
		})
	}
}

// TestWrongDocumentIsRefused: a document that breaks OpenAPI 3.0 (a 3.1
// type list, an example contradicting its schema) does not load.
func TestWrongDocumentIsRefused(t *testing.T) {
	for name, doc := range map[string]string{
		"type list": `{"openapi":"3.0.3","info":{"title":"x","version":"1"},"paths":{},
			"components":{"schemas":{"A":{"type":["string","null"]}}}}`,
		"example against schema": `{"openapi":"3.0.3","info":{"title":"x","version":"1"},"paths":{},
			"components":{"schemas":{"A":{"type":"integer","example":"seven"}}}}`,
	} {
		if _, err := apicontract.New([]byte(doc)); err == nil {
			t.Errorf("%s: loaded", name)
		}
	}
}

// BenchmarkCheck is what validation adds to one exchange of a test.
func BenchmarkCheck(b *testing.B) {
	v, err := apicontract.Default()
	if err != nil {
		b.Fatal(err)
	}
	req := httptest.NewRequest("GET", "/api/v1/sessions/ses_1", nil)
	req.Header.Set("Authorization", "Bearer tpk_x")
	h := http.Header{"Content-Type": {"application/json"}}
	for b.Loop() {
		if _, err := v.Check(b.Context(), apicontract.Exchange{Request: req, Status: 200, Header: h, ResponseBody: []byte(validSession)}); err != nil {
			b.Fatal(err)
		}
	}
}
