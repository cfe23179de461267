// Package apicontract checks real API traffic against the OpenAPI document
// (handlers/openapi.json), so that the code and the document every client
// follows cannot drift apart. Tests wrap the server they talk to with Wrap
// (or start it with Server): every request under /api/v1 and its answer are
// then validated with kin-openapi's request and response validation, and a
// mismatch fails the test that sent the request.
//
// It is imported by tests only; the server binary does not link it.
package apicontract

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"

	"github.com/taskpilots/handoff/handlers"
)

// Prefix is where the API is served; the document's server URL says the same.
const Prefix = "/api/v1"

// maxBody bounds what is buffered of one request body for validation. The
// body-limit tests send more than the server accepts (1 MiB by default): the
// server refuses those with 413 before the document matters.
const maxBody = 8 << 20

// Validator validates exchanges against one OpenAPI document and counts the
// operations it has seen.
type Validator struct {
	doc    *openapi3.T
	router routers.Router

	mu   sync.Mutex
	seen map[string]int // operationId → exchanges validated
}

// New loads and validates an OpenAPI document.
func New(raw []byte) (*Validator, error) {
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(raw)
	if err != nil {
		return nil, fmt.Errorf("load openapi document: %w", err)
	}
	closeObjects(doc)
	// Examples are validated too: an example that contradicts its schema
	// would teach client authors the wrong shape.
	if err := doc.Validate(loader.Context, openapi3.EnableExamplesValidation()); err != nil {
		return nil, fmt.Errorf("openapi document is invalid: %w", err)
	}
	router, err := legacy.NewRouter(doc)
	if err != nil {
		return nil, fmt.Errorf("openapi router: %w", err)
	}
	return &Validator{doc: doc, router: router, seen: map[string]int{}}, nil
}

// closeObjects makes every object schema that lists its properties and says
// nothing of additionalProperties closed, in this validator's copy of the
// document only. OpenAPI leaves such objects open, so an answer carrying a
// field the document never mentions would pass; closed, it fails, and a
// field the server adds must be documented for clients to know it. Schemas
// that say additionalProperties (true, false or a schema) keep what they say.
func closeObjects(doc *openapi3.T) {
	seen := map[*openapi3.Schema]bool{}
	var walk func(ref *openapi3.SchemaRef)
	walk = func(ref *openapi3.SchemaRef) {
		if ref == nil || ref.Value == nil || seen[ref.Value] {
			return
		}
		s := ref.Value
		seen[s] = true
		if len(s.Properties) > 0 && s.AdditionalProperties.Has == nil && s.AdditionalProperties.Schema == nil {
			closed := false
			s.AdditionalProperties.Has = &closed
		}
		for _, p := range s.Properties {
			walk(p)
		}
		walk(s.Items)
		walk(s.AdditionalProperties.Schema)
		walk(s.Not)
		for _, list := range []openapi3.SchemaRefs{s.AllOf, s.AnyOf, s.OneOf} {
			for _, x := range list {
				walk(x)
			}
		}
	}
	for _, ref := range doc.Components.Schemas {
		walk(ref)
	}
	for _, item := range doc.Paths.Map() {
		for _, op := range item.Operations() {
			for _, r := range op.Responses.Map() {
				if r.Value != nil {
					for _, m := range r.Value.Content {
						walk(m.Schema)
					}
				}
			}
			if op.RequestBody != nil && op.RequestBody.Value != nil {
				for _, m := range op.RequestBody.Value.Content {
					walk(m.Schema)
				}
			}
		}
	}
}

// Default is the validator of the document the server embeds and serves.
var Default = sync.OnceValues(func() (*Validator, error) { return New(handlers.OpenAPIDocument()) })

// Doc returns the loaded document.
func (v *Validator) Doc() *openapi3.T { return v.doc }

// Seen returns how many exchanges of each operation were validated.
func (v *Validator) Seen() map[string]int {
	v.mu.Lock()
	defer v.mu.Unlock()
	out := make(map[string]int, len(v.seen))
	for k, n := range v.seen {
		out[k] = n
	}
	return out
}

// Operations lists the document's operations as operationId → "METHOD /path".
func (v *Validator) Operations() map[string]string {
	out := map[string]string{}
	for path, item := range v.doc.Paths.Map() {
		for method, op := range item.Operations() {
			out[op.OperationID] = method + " " + path
		}
	}
	return out
}

// Exchange is one request and the answer it got, bodies read in full.
type Exchange struct {
	Request      *http.Request
	RequestBody  []byte
	Status       int
	Header       http.Header
	ResponseBody []byte
}

// Check validates one exchange and returns the operationId it matched ("" for
// a path the document does not describe). The rules:
//
//   - The answer must be documented: its status, content type, headers and
//     body schema, whatever the request was.
//   - A request the document refuses (bad body, missing parameter, no token)
//     may only be answered with a 4xx: tests send such requests on purpose
//     and the server must refuse them too. A 2xx or 5xx means the server and
//     the document disagree on what is valid.
//   - A path or method the document does not describe may only be answered
//     with a 404 or 405.
func (v *Validator) Check(ctx context.Context, x Exchange) (string, error) {
	r := x.Request
	where := fmt.Sprintf("%s %s → %d", r.Method, r.URL.RequestURI(), x.Status)
	route, params, err := v.router.FindRoute(r)
	if err != nil {
		if x.Status == http.StatusNotFound || x.Status == http.StatusMethodNotAllowed {
			return "", nil
		}
		return "", fmt.Errorf("%s: the OpenAPI document has no such operation (%v); document it in handlers/openapi.json", where, err)
	}
	opID := route.Operation.OperationID
	v.mu.Lock()
	v.seen[opID]++
	v.mu.Unlock()

	opts := &openapi3filter.Options{
		MultiError:            true,
		IncludeResponseStatus: true,
		SkipSettingDefaults:   true,
		// The server checks tokens; the document only says which scheme.
		AuthenticationFunc: openapi3filter.NoopAuthenticationFunc,
	}
	vr := r.Clone(ctx)
	vr.Body = io.NopCloser(bytes.NewReader(x.RequestBody))
	in := &openapi3filter.RequestValidationInput{Request: vr, PathParams: params, Route: route, Options: opts}
	var problems []string
	if reqErr := openapi3filter.ValidateRequest(ctx, in); reqErr != nil {
		if x.Status < 400 || x.Status >= 500 {
			problems = append(problems, fmt.Sprintf("the document refuses the request, the server answered %d: %s", x.Status, flatten(reqErr)))
		} else if authMissing(reqErr) && x.Status != http.StatusUnauthorized {
			problems = append(problems, fmt.Sprintf("no bearer token, but the server answered %d, not 401", x.Status))
		}
	} else if undoc := undocumentedQuery(route, r); len(undoc) > 0 && x.Status < 400 {
		// kin-openapi lets unknown query parameters pass; a filter the
		// server honours must be documented for clients to know it.
		problems = append(problems, fmt.Sprintf("query parameters %v are not documented, the server answered %d", undoc, x.Status))
	} else if route.Operation.Security != nil && len(*route.Operation.Security) == 0 && (x.Status == http.StatusUnauthorized || x.Status == http.StatusForbidden) {
		problems = append(problems, "the document says the operation is public, the server asked for a token")
	}
	out := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in,
		Status:                 x.Status,
		Header:                 x.Header,
		Body:                   io.NopCloser(bytes.NewReader(x.ResponseBody)),
		Options:                opts,
	}
	if respErr := openapi3filter.ValidateResponse(ctx, out); respErr != nil {
		problems = append(problems, "response: "+flatten(respErr))
	}
	if len(problems) == 0 {
		return opID, nil
	}
	body := x.ResponseBody
	if len(body) > 600 {
		body = append(body[:600:600], "…"...)
	}
	return opID, fmt.Errorf("%s (operation %s) breaks the OpenAPI document:\n  %s\n  response body: %s\n  fix the code or handlers/openapi.json, whichever the API contract says is wrong",
		where, opID, strings.Join(problems, "\n  "), body)
}

// undocumentedQuery lists the request's query parameters the operation does
// not declare.
func undocumentedQuery(route *routers.Route, r *http.Request) []string {
	declared := map[string]bool{}
	for _, list := range []openapi3.Parameters{route.PathItem.Parameters, route.Operation.Parameters} {
		for _, p := range list {
			if p.Value != nil && p.Value.In == openapi3.ParameterInQuery {
				declared[p.Value.Name] = true
			}
		}
	}
	var out []string
	for name := range r.URL.Query() {
		if !declared[name] {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// authMissing reports whether request validation failed on security alone.
func authMissing(err error) bool {
	var se *openapi3filter.SecurityRequirementsError
	return errors.As(err, &se)
}

// flatten renders a (multi) validation error on one line per cause.
func flatten(err error) string {
	var me openapi3.MultiError
	if errors.As(err, &me) {
		parts := make([]string, 0, len(me))
		for _, e := range me {
			parts = append(parts, flatten(e))
		}
		sort.Strings(parts)
		return strings.Join(parts, "; ")
	}
	return strings.ReplaceAll(err.Error(), "\n", " ")
}

// Reporter is the part of testing.TB that Wrap reports through.
type Reporter interface {
	Helper()
	Errorf(format string, args ...any)
}

// Option adjusts Wrap.
type Option func(*wrapOpts)

type wrapOpts struct{ ignore []string }

// Ignore leaves paths with these prefixes unchecked: routes a test adds to
// the server to exercise middleware (a handler that panics, an echo), which
// are no part of the API.
func Ignore(prefixes ...string) Option {
	return func(o *wrapOpts) { o.ignore = append(o.ignore, prefixes...) }
}

// Wrap returns next with every /api/v1 exchange validated; violations are
// reported to t. The answer is buffered and validated before it is sent, so
// that a test never ends before its exchange was checked.
func (v *Validator) Wrap(t Reporter, next http.Handler, opts ...Option) http.Handler {
	var o wrapOpts
	for _, f := range opts {
		f(&o)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		skip := !strings.HasPrefix(r.URL.Path, Prefix+"/")
		for _, p := range o.ignore {
			skip = skip || strings.HasPrefix(r.URL.Path, p)
		}
		if skip {
			next.ServeHTTP(w, r)
			return
		}
		var reqBody []byte
		if r.Body != nil {
			b, err := io.ReadAll(io.LimitReader(r.Body, maxBody))
			if err != nil {
				t.Errorf("apicontract: read request body of %s %s: %v", r.Method, r.URL.Path, err)
			}
			reqBody = b
			// The server reads exactly what the client sent (and any rest
			// past maxBody), so body limits still apply.
			r.Body = struct {
				io.Reader
				io.Closer
			}{io.MultiReader(bytes.NewReader(b), r.Body), r.Body}
		}
		rec := &recorder{header: http.Header{}}
		next.ServeHTTP(rec, r)
		if rec.status == 0 {
			rec.status = http.StatusOK
		}
		// A caller that went away gets nothing; there is no answer to check.
		if r.Context().Err() == nil {
			vr := r.Clone(context.Background())
			if _, err := v.Check(context.Background(), Exchange{Request: vr, RequestBody: reqBody, Status: rec.status, Header: rec.header, ResponseBody: rec.body.Bytes()}); err != nil {
				t.Errorf("apicontract: %v", err)
			}
		}
		for k, vs := range rec.header {
			w.Header()[k] = vs
		}
		w.WriteHeader(rec.status)
		_, _ = w.Write(rec.body.Bytes())
	})
}

// recorder buffers an answer.
type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header { return r.header }
func (r *recorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
}
func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.body.Write(b)
}

// Server starts h behind the Default validator on a test server that closes
// when t ends.
func Server(t testing.TB, h http.Handler, opts ...Option) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(Handler(t, h, opts...))
	t.Cleanup(srv.Close)
	return srv
}

// Handler wraps h with the Default validator, failing t when the document
// does not load.
func Handler(t testing.TB, h http.Handler, opts ...Option) http.Handler {
	t.Helper()
	v, err := Default()
	if err != nil {
		t.Fatalf("apicontract: %v", err)
	}
	return v.Wrap(t, h, opts...)
}
