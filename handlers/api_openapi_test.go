package handlers_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/taskpilots/handoff/handlers"
	"github.com/taskpilots/handoff/handlers/apicontract"
	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
)

type openAPIDoc struct {
	OpenAPI    string                                `json:"openapi"`
	Paths      map[string]map[string]openAPIOp       `json:"paths"`
	Components map[string]map[string]json.RawMessage `json:"components"`
	Security   []map[string][]string                 `json:"security"`
}

type openAPIOp struct {
	OperationID string                     `json:"operationId"`
	Security    *[]map[string][]string     `json:"security"`
	Parameters  []json.RawMessage          `json:"parameters"`
	RequestBody json.RawMessage            `json:"requestBody"`
	Responses   map[string]json.RawMessage `json:"responses"`
}

var (
	echoParam = regexp.MustCompile(`:([A-Za-z_]+)`)
	httpVerbs = map[string]bool{"get": true, "put": true, "post": true, "delete": true, "options": true, "head": true, "patch": true, "trace": true}
)

func loadOpenAPI(t *testing.T) openAPIDoc {
	t.Helper()
	var doc openAPIDoc
	if err := json.Unmarshal(handlers.OpenAPIDocument(), &doc); err != nil {
		t.Fatalf("openapi.json: %v", err)
	}
	return doc
}

// TestOpenAPIDocumentsEveryRoute walks the routes Register adds and checks
// the document describes each one, and that every documented operation is
// served (answers something other than a routing 404/405).
func TestOpenAPIDocumentsEveryRoute(t *testing.T) {
	t.Parallel()
	doc := loadOpenAPI(t)

	documented := map[string]bool{}
	for path, ops := range doc.Paths {
		for method := range ops {
			if httpVerbs[method] {
				documented[strings.ToUpper(method)+" "+path] = true
			}
		}
	}

	e := echo.New()
	(&handlers.API{}).Register(e.Group("/api/v1"))
	served := map[string]bool{}
	for _, r := range e.Routes() {
		if !strings.HasPrefix(r.Path, "/api/v1/") || r.Method == echo.RouteNotFound {
			continue
		}
		served[r.Method+" "+echoParam.ReplaceAllString(strings.TrimPrefix(r.Path, "/api/v1"), "{$1}")] = true
	}
	var undocumented []string
	for k := range served {
		if !documented[k] {
			undocumented = append(undocumented, k)
		}
	}
	sort.Strings(undocumented)
	if len(undocumented) > 0 {
		t.Errorf("routes missing from openapi.json: %v", undocumented)
	}

	storetest.Each(t, func(t *testing.T, s *models.Store) {
		env := newAPIEnv(t, s)
		param := regexp.MustCompile(`\{[^}]+\}`)
		for k := range documented {
			method, path, _ := strings.Cut(k, " ")
			// Any id will do: an unknown one is a 404 problem from models,
			// which is not the router's 404.
			r := env.do(apiReq{method: method, path: param.ReplaceAllString(path, "x1"), token: env.admin, body: map[string]any{}})
			if r.Status == http.StatusMethodNotAllowed {
				t.Errorf("%s: 405 (documented but not served)", k)
				continue
			}
			if r.Status == http.StatusNotFound {
				var p handlers.Problem
				if err := json.Unmarshal(r.Body, &p); err != nil || !strings.HasSuffix(p.Type, "/not_found") {
					t.Errorf("%s: routing 404 (documented but not served): %s", k, r.Body)
				}
			}
		}
	})
}

// TestOpenAPIDocumentIsWellFormed checks what a generator or a validator
// would trip over: every $ref resolves, every operation has an id, responses
// and a known security scheme, path parameters are declared, and errors are
// problem+json.
func TestOpenAPIDocumentIsWellFormed(t *testing.T) {
	t.Parallel()
	raw := handlers.OpenAPIDocument()
	doc := loadOpenAPI(t)
	if !strings.HasPrefix(doc.OpenAPI, "3.") {
		t.Fatalf("openapi version %q", doc.OpenAPI)
	}
	var generic any
	if err := json.Unmarshal(raw, &generic); err != nil {
		t.Fatal(err)
	}
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			if ref, ok := x["$ref"].(string); ok {
				parts := strings.Split(strings.TrimPrefix(ref, "#/"), "/")
				if len(parts) != 3 || parts[0] != "components" {
					t.Errorf("$ref %q is not a components reference", ref)
				} else if _, ok := doc.Components[parts[1]][parts[2]]; !ok {
					t.Errorf("$ref %q does not resolve", ref)
				}
			}
			for _, y := range x {
				walk(y)
			}
		case []any:
			for _, y := range x {
				walk(y)
			}
		}
	}
	walk(generic)

	if _, ok := doc.Components["securitySchemes"]["bearerAuth"]; !ok || len(doc.Security) != 1 {
		t.Fatalf("bearerAuth security scheme missing")
	}
	ids := map[string]bool{}
	pathParam := regexp.MustCompile(`\{([^}]+)\}`)
	for path, ops := range doc.Paths {
		for method, op := range ops {
			if !httpVerbs[method] {
				continue
			}
			where := strings.ToUpper(method) + " " + path
			if op.OperationID == "" || ids[op.OperationID] {
				t.Errorf("%s: missing or duplicate operationId %q", where, op.OperationID)
			}
			ids[op.OperationID] = true
			if len(op.Responses) == 0 {
				t.Errorf("%s: no responses", where)
			}
			public := op.Security != nil && len(*op.Security) == 0
			if !public {
				for _, code := range []string{"401", "403"} {
					if _, ok := op.Responses[code]; !ok {
						t.Errorf("%s: %s not documented", where, code)
					}
				}
			}
			if method == "post" {
				for _, code := range []string{"400", "413", "422"} {
					if _, ok := op.Responses[code]; !ok {
						t.Errorf("%s: %s not documented", where, code)
					}
				}
				if len(op.RequestBody) == 0 {
					t.Errorf("%s: no request body", where)
				}
			}
			declared := map[string]bool{}
			for _, p := range op.Parameters {
				var ref struct {
					Ref  string `json:"$ref"`
					Name string `json:"name"`
					In   string `json:"in"`
				}
				_ = json.Unmarshal(p, &ref)
				if ref.Ref != "" {
					_ = json.Unmarshal(doc.Components["parameters"][ref.Ref[strings.LastIndex(ref.Ref, "/")+1:]], &ref)
				}
				if ref.In == "path" {
					declared[ref.Name] = true
				}
			}
			for _, m := range pathParam.FindAllStringSubmatch(path, -1) {
				if !declared[m[1]] {
					t.Errorf("%s: path parameter %s not declared", where, m[1])
				}
			}
		}
	}
	for name, r := range doc.Components["responses"] {
		if !strings.Contains(string(r), `"application/problem+json"`) {
			t.Errorf("apiResponse %s is not problem+json", name)
		}
	}
}

// TestOpenAPIRequestSchemasMatchModels keeps the documented request bodies
// in step with the structs the strict decoder accepts: a field added to a
// models input must be documented, and nothing undocumented is accepted.
func TestOpenAPIRequestSchemasMatchModels(t *testing.T) {
	t.Parallel()
	doc := loadOpenAPI(t)
	for name, v := range map[string]any{
		"CreateSessionRequest": models.CreateSessionInput{},
		"Resource":             models.Resource{},
		"TransitionRequest":    models.TransitionInput{},
		"DelegateRequest":      models.DelegateInput{},
		"LeaseRequest":         models.LeaseInput{},
		"HeartbeatRequest": struct {
			LeaseToken string `json:"lease_token"`
		}{},
		"ResultRequest":   models.ResultInput{},
		"Evidence":        models.Evidence{},
		"Uncertainty":     models.Uncertainty{},
		"Failure":         models.Failure{},
		"ChildrenRequest": models.SpawnInput{},
		"ChildSpec":       models.ChildInput{},
		"Join":            models.JoinInput{},
		// Answering a request for input (v1.1).
		"InputRequest":        models.InputInput{},
		"InputDelegate":       models.InputDelegate{},
		"Usage":               models.Usage{},
		"NoteRequest":         models.NoteRequest{},
		"RouteRequest":        models.RouteInput{},
		"DrainRequest":        models.DrainInput{},
		"ExpireLeasesRequest": models.ExpireLeasesInput{},
		"BulkRequest":         models.BulkInput{},
		"BulkFilter":          models.BulkFilter{},
		// Per-queue flow control.
		"QueueFlowRequest": models.QueueFlowInput{},
	} {
		var schema struct {
			Properties           map[string]json.RawMessage `json:"properties"`
			AdditionalProperties *bool                      `json:"additionalProperties"`
		}
		if err := json.Unmarshal(doc.Components["schemas"][name], &schema); err != nil {
			t.Fatalf("schema %s: %v", name, err)
		}
		if schema.AdditionalProperties == nil || *schema.AdditionalProperties {
			t.Errorf("schema %s: requests are decoded strictly; say additionalProperties: false", name)
		}
		var documented, accepted []string
		for k := range schema.Properties {
			documented = append(documented, k)
		}
		rt := reflect.TypeOf(v)
		for i := 0; i < rt.NumField(); i++ {
			tag, _, _ := strings.Cut(rt.Field(i).Tag.Get("json"), ",")
			if tag != "" && tag != "-" {
				accepted = append(accepted, tag)
			}
		}
		sort.Strings(documented)
		sort.Strings(accepted)
		if strings.Join(documented, ",") != strings.Join(accepted, ",") {
			t.Errorf("schema %s documents %v, the API accepts %v", name, documented, accepted)
		}
	}
}

// TestOpenAPIEveryOperationHasExamples: the rendered reference and client
// authors learn the API from examples, so every operation has them: its
// request body, every answer with a body (the shared problem answers
// included) and its path parameters. Loading the document checks each
// example against its schema.
func TestOpenAPIEveryOperationHasExamples(t *testing.T) {
	t.Parallel()
	v, err := apicontract.Default()
	if err != nil {
		t.Fatal(err)
	}
	var missing []string
	for path, item := range v.Doc().Paths.Map() {
		for method, op := range item.Operations() {
			where := fmt.Sprintf("%s %s (%s)", method, path, op.OperationID)
			if rb := op.RequestBody; rb != nil && rb.Value != nil {
				for ct, m := range rb.Value.Content {
					if m.Example == nil && len(m.Examples) == 0 {
						missing = append(missing, fmt.Sprintf("%s: the request body (%s) has no example", where, ct))
					}
				}
			}
			for code, r := range op.Responses.Map() {
				if r.Value == nil {
					continue
				}
				for ct, m := range r.Value.Content {
					if m.Example == nil && len(m.Examples) == 0 {
						name := "its " + code + " answer"
						if r.Ref != "" {
							name = "the shared answer " + r.Ref
						}
						missing = append(missing, fmt.Sprintf("%s: %s (%s) has no example", where, name, ct))
					}
				}
			}
			for _, p := range append(item.Parameters, op.Parameters...) {
				if p.Value != nil && p.Value.In == "path" && p.Value.Example == nil && len(p.Value.Examples) == 0 {
					missing = append(missing, fmt.Sprintf("%s: the path parameter %s has no example", where, p.Value.Name))
				}
			}
		}
	}
	sort.Strings(missing)
	missing = slices.Compact(missing)
	for _, m := range missing {
		t.Errorf("%s; add an \"example\" next to its schema in handlers/openapi.json (it is checked against the schema)", m)
	}
}

// TestAPIDocsPage: /api/docs is a public page that loads the vendored Redoc
// bundle from /static/ (no CDN) and points it at the document the API
// serves; its relaxed style policy stays on that page alone.
func TestAPIDocsPage(t *testing.T) {
	t.Parallel()
	e := newAPIEnv(t, storetest.New(t, models.SQLite))
	get := func(path string) (*http.Response, string) {
		t.Helper()
		resp, err := e.srv.Client().Get(e.srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	resp, body := get("/api/docs")
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("GET /api/docs: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	script := regexp.MustCompile(`<script src="(/static/redoc\.standalone\.js\?v=[0-9a-f]+)"></script>`).FindStringSubmatch(body)
	if script == nil || !strings.Contains(body, `<redoc spec-url="/api/v1/openapi.json"></redoc>`) {
		t.Fatalf("the page does not load the vendored Redoc on the served document:\n%s", body)
	}
	if regexp.MustCompile(`(?i)(src|href)="(https?:)?//`).MatchString(body) || strings.Contains(body, "<script>") {
		t.Fatalf("the page loads something from another origin or has an inline script:\n%s", body)
	}
	csp := resp.Header.Get("Content-Security-Policy")
	if csp != handlers.APIDocsCSP {
		t.Fatalf("CSP %q, want %q", csp, handlers.APIDocsCSP)
	}
	if strings.Contains(csp, "unsafe-eval") || strings.Contains(csp, "script-src") {
		t.Fatalf("the page's policy relaxes scripts: %q", csp)
	}
	resp, js := get(script[1])
	if resp.StatusCode != http.StatusOK || !strings.Contains(resp.Header.Get("Content-Type"), "javascript") || !strings.Contains(js, "ReDoc") {
		t.Fatalf("the vendored bundle: %d %s, %d bytes", resp.StatusCode, resp.Header.Get("Content-Type"), len(js))
	}
	resp, doc := get("/api/v1/openapi.json")
	if resp.StatusCode != http.StatusOK || doc != string(handlers.OpenAPIDocument()) {
		t.Fatalf("the document the page renders: %d", resp.StatusCode)
	}
	// Every other page keeps the strict policy.
	resp, _ = get("/login")
	if got := resp.Header.Get("Content-Security-Policy"); strings.Contains(got, "unsafe-inline") || strings.Contains(got, "blob:") {
		t.Fatalf("/login has the docs page's policy: %q", got)
	}
}
