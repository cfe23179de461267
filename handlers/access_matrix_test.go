package handlers_test

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sort"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/taskpilots/handoff/handlers/apicontract"
	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
	"github.com/taskpilots/handoff/web"
)

// The access matrix: every route the server registers × every kind of
// caller → the status from an explicit table. A route missing from the table
// fails the test, so a new route cannot ship without deciding who may call
// it. Targets in paths are ids that do not exist, so that a caller who gets
// through sees the handler's own answer (404, 422…) and nothing is changed.

// caller is one kind of principal.
type caller string

const (
	anonymous  caller = "anonymous"
	agentUser  caller = "agent"
	reviewUser caller = "reviewer"
	adminUser  caller = "admin"
	ctlToken   caller = "controller-token"
	workToken  caller = "worker-token"
	adminToken caller = "admin-token"
)

var callers = []caller{anonymous, agentUser, reviewUser, adminUser, ctlToken, workToken, adminToken}

// access is the expected status per caller.
type access map[caller]int

// everyone answers code to every caller.
func everyone(code int) access {
	a := access{}
	for _, c := range callers {
		a[c] = code
	}
	return a
}

// page is a console GET: anonymous browsers and bearer callers (who have no
// login cookie) are sent to the login page; users get their role's answer.
func pageAccess(agent, reviewer, admin int) access {
	return access{anonymous: 303, agentUser: agent, reviewUser: reviewer, adminUser: admin, ctlToken: 303, workToken: 303, adminToken: 303}
}

// form is a console POST: anonymous browsers (with a valid CSRF token) are
// sent to log in; bearer callers have no CSRF cookie and are refused 403.
func formAccess(agent, reviewer, admin int) access {
	return access{anonymous: 303, agentUser: agent, reviewUser: reviewer, adminUser: admin, ctlToken: 403, workToken: 403, adminToken: 403}
}

// api is a bearer-token route: browsers without a token get 401.
func apiAccess(controller, worker, admin int) access {
	return access{anonymous: 401, agentUser: 401, reviewUser: 401, adminUser: 401, ctlToken: controller, workToken: worker, adminToken: admin}
}

// routeCase is how one route is called and what each caller gets.
type routeCase struct {
	path string // concrete path; "" means the route's own path
	want access
}

var (
	readAPI  = func(ok int) access { return apiAccess(ok, ok, ok) }
	ctlAPI   = func(ok int) access { return apiAccess(ok, 403, ok) }
	workAPI  = func(ok int) access { return apiAccess(403, ok, ok) }
	adminAPI = func(ok int) access { return apiAccess(403, 403, ok) }
	reviewed = func(ok int) access { return pageAccess(403, ok, ok) }
	admins   = func(ok int) access { return pageAccess(403, 403, ok) }
)

var accessMatrix = map[string]routeCase{
	// Operations and assets are public.
	"GET /healthz":  {want: everyone(200)},
	"GET /readyz":   {want: everyone(200)},
	"GET /metrics":  {want: everyone(200)},
	"GET /static/*": {path: "/static/app.css", want: everyone(200)},
	"GET /":         {want: everyone(302)},
	"GET /login":    {want: access{anonymous: 200, agentUser: 303, reviewUser: 303, adminUser: 303, ctlToken: 200, workToken: 200, adminToken: 200}},
	"POST /login":   {want: access{anonymous: 401, agentUser: 401, reviewUser: 401, adminUser: 401, ctlToken: 403, workToken: 403, adminToken: 403}},
	"POST /logout":  {want: formAccess(303, 303, 303)},

	// Your account: any signed-in user (an empty form is refused inline).
	"GET /console/account/password":             {want: pageAccess(200, 200, 200)},
	"POST /console/account/password":            {want: formAccess(422, 422, 422)},
	"POST /console/account/sign-out-everywhere": {want: formAccess(303, 303, 303)},
	"POST /console/account/time-zone":           {want: formAccess(303, 303, 303)},

	// The support console.
	"GET /console":                                     {want: pageAccess(200, 403, 200)},
	"GET /console/inbox":                               {want: pageAccess(200, 403, 200)},
	"GET /console/sessions":                            {want: pageAccess(200, 200, 200)},
	"GET /console/sessions/:id":                        {path: "/console/sessions/ses_missing", want: pageAccess(404, 404, 404)},
	"POST /console/sessions/bulk":                      {want: formAccess(422, 403, 422)},
	"GET /console/sessions/:id/changes":                {path: "/console/sessions/ses_missing/changes?version=1", want: pageAccess(404, 404, 404)},
	"POST /console/sessions/:id/claim":                 {path: "/console/sessions/ses_missing/claim", want: formAccess(404, 403, 404)},
	"POST /console/sessions/:id/release":               {path: "/console/sessions/ses_missing/release", want: formAccess(404, 403, 404)},
	"POST /console/sessions/:id/force-release":         {path: "/console/sessions/ses_missing/force-release", want: formAccess(403, 403, 404)},
	"POST /console/sessions/:id/accept-recommendation": {path: "/console/sessions/ses_missing/accept-recommendation", want: formAccess(404, 403, 404)},
	"POST /console/sessions/:id/pause":                 {path: "/console/sessions/ses_missing/pause", want: formAccess(403, 403, 404)},
	"POST /console/sessions/:id/unpause":               {path: "/console/sessions/ses_missing/unpause", want: formAccess(403, 403, 404)},
	"POST /console/sessions/:id/cancel":                {path: "/console/sessions/ses_missing/cancel", want: formAccess(403, 403, 404)},
	"POST /console/sessions/:id/reassign":              {path: "/console/sessions/ses_missing/reassign", want: formAccess(403, 403, 404)},
	"POST /console/sessions/:id/escalate":              {path: "/console/sessions/ses_missing/escalate", want: formAccess(403, 403, 404)},
	"POST /console/sessions/:id/note":                  {path: "/console/sessions/ses_missing/note", want: formAccess(404, 403, 404)},
	"POST /console/sessions/:id/request-input":         {path: "/console/sessions/ses_missing/request-input", want: formAccess(404, 403, 404)},
	"POST /console/sessions/:id/resume":                {path: "/console/sessions/ses_missing/resume", want: formAccess(404, 403, 404)},
	"POST /console/sessions/:id/hand-back":             {path: "/console/sessions/ses_missing/hand-back", want: formAccess(404, 403, 404)},
	"POST /console/sessions/:id/complete":              {path: "/console/sessions/ses_missing/complete", want: formAccess(404, 403, 404)},
	"POST /console/sessions/:id/reject":                {path: "/console/sessions/ses_missing/reject", want: formAccess(404, 403, 404)},
	"POST /console/sessions/:id/provide-input":         {path: "/console/sessions/ses_missing/provide-input", want: formAccess(404, 403, 404)},
	"GET /console/inbox/waiting":                       {want: pageAccess(200, 403, 200)},
	"GET /console/inbox/stalled":                       {want: pageAccess(200, 403, 200)},
	"POST /console/sessions/:id/resolve-risk":          {path: "/console/sessions/ses_missing/resolve-risk", want: formAccess(404, 403, 404)},

	// Reviews: reviewers and admins.
	"GET /console/reviews":                       {want: reviewed(200)},
	"GET /console/reviews/stats":                 {want: reviewed(200)},
	"GET /console/reviews/:id/:version":          {path: "/console/reviews/ses_missing/4", want: reviewed(404)},
	"POST /console/reviews/next":                 {want: formAccess(403, 303, 303)},
	"POST /console/reviews/:id/:version/claim":   {path: "/console/reviews/ses_missing/4/claim", want: formAccess(403, 404, 404)},
	"POST /console/reviews/:id/:version/release": {path: "/console/reviews/ses_missing/4/release", want: formAccess(403, 303, 303)},
	"POST /console/reviews/:id/:version/score":   {path: "/console/reviews/ses_missing/4/score", want: formAccess(403, 404, 404)},
	"GET /console/admin/metrics":                 {want: reviewed(200)},

	// Administration: admins only.
	"GET /console/audit":                              {want: admins(200)},
	"GET /console/audit/export.csv":                   {want: admins(200)},
	"GET /console/audit/export.jsonl":                 {want: admins(200)},
	"GET /console/audit/sessions/:id/transcript.json": {path: "/console/audit/sessions/ses_missing/transcript.json", want: admins(404)},
	"GET /console/admin":                              {want: admins(200)},
	"GET /console/admin/audit":                        {want: admins(200)},
	"GET /console/admin/verify":                       {want: admins(200)},
	"GET /console/admin/verify/status":                {want: admins(200)},
	"POST /console/admin/verify":                      {want: formAccess(403, 403, 303)},
	"POST /console/admin/checkpoints":                 {want: formAccess(403, 403, 303)},
	"POST /console/admin/erase":                       {want: formAccess(403, 403, 303)},
	"GET /console/admin/users":                        {want: admins(200)},
	"POST /console/admin/users":                       {want: formAccess(403, 403, 422)},
	"POST /console/admin/users/:id/disable":           {path: "/console/admin/users/usr_missing/disable", want: formAccess(403, 403, 404)},
	"POST /console/admin/users/:id/enable":            {path: "/console/admin/users/usr_missing/enable", want: formAccess(403, 403, 404)},
	"POST /console/admin/users/:id/role":              {path: "/console/admin/users/usr_missing/role", want: formAccess(403, 403, 422)},
	"POST /console/admin/users/:id/reset-password":    {path: "/console/admin/users/usr_missing/reset-password", want: formAccess(403, 403, 404)},
	"GET /console/admin/tokens":                       {want: admins(200)},
	"POST /console/admin/tokens":                      {want: formAccess(403, 403, 422)},
	"POST /console/admin/tokens/:id/revoke":           {path: "/console/admin/tokens/tok_missing/revoke", want: formAccess(403, 403, 404)},

	// The JSON API.
	"GET /api/v1/openapi.json":                 {want: everyone(200)},
	"GET /api/docs":                            {want: everyone(200)},
	"GET /api/v1/metrics":                      {want: readAPI(200)},
	"POST /api/v1/sessions":                    {want: ctlAPI(422)},
	"GET /api/v1/sessions":                     {want: readAPI(200)},
	"GET /api/v1/sessions/:id":                 {path: "/api/v1/sessions/ses_missing", want: readAPI(404)},
	"GET /api/v1/sessions/:id/events":          {path: "/api/v1/sessions/ses_missing/events", want: readAPI(404)},
	"GET /api/v1/sessions/:id/state":           {path: "/api/v1/sessions/ses_missing/state", want: readAPI(422)},
	"GET /api/v1/sessions/:id/packet":          {path: "/api/v1/sessions/ses_missing/packet", want: readAPI(404)},
	"POST /api/v1/sessions/:id/pause":          {path: "/api/v1/sessions/ses_missing/pause", want: ctlAPI(422)},
	"POST /api/v1/sessions/:id/resume":         {path: "/api/v1/sessions/ses_missing/resume", want: ctlAPI(422)},
	"POST /api/v1/sessions/:id/escalate":       {path: "/api/v1/sessions/ses_missing/escalate", want: ctlAPI(422)},
	"POST /api/v1/sessions/:id/cancel":         {path: "/api/v1/sessions/ses_missing/cancel", want: ctlAPI(422)},
	"POST /api/v1/sessions/bulk":               {want: ctlAPI(422)},
	"POST /api/v1/sessions/:id/delegations":    {path: "/api/v1/sessions/ses_missing/delegations", want: ctlAPI(422)},
	"POST /api/v1/sessions/:id/children":       {path: "/api/v1/sessions/ses_missing/children", want: ctlAPI(422)},
	"POST /api/v1/sessions/:id/input":          {path: "/api/v1/sessions/ses_missing/input", want: ctlAPI(422)},
	"POST /api/v1/sessions/:id/notes":          {path: "/api/v1/sessions/ses_missing/notes", want: ctlAPI(422)},
	"POST /api/v1/queues/:queue/lease":         {path: "/api/v1/queues/refunds/lease", want: workAPI(422)},
	"POST /api/v1/queues/:queue/expire-leases": {path: "/api/v1/queues/refunds/expire-leases", want: adminAPI(422)},
	"POST /api/v1/delegations/:id/heartbeat":   {path: "/api/v1/delegations/dlg_missing/heartbeat", want: workAPI(422)},
	"POST /api/v1/delegations/:id/result":      {path: "/api/v1/delegations/dlg_missing/result", want: workAPI(422)},
	"POST /api/v1/results":                     {want: workAPI(422)},
	"GET /api/v1/queues":                       {want: readAPI(200)},
	"GET /api/v1/queues/:queue":                {path: "/api/v1/queues/refunds", want: readAPI(200)},
	"PUT /api/v1/queues/:queue":                {path: "/api/v1/queues/refunds", want: adminAPI(200)},
	"GET /api/v1/routes":                       {want: readAPI(200)},
	"GET /api/v1/routes/:step":                 {path: "/api/v1/routes/missing-step", want: readAPI(404)},
	"PUT /api/v1/routes/:step":                 {path: "/api/v1/routes/missing-step", want: ctlAPI(422)},
	"DELETE /api/v1/routes/:step":              {path: "/api/v1/routes/missing-step", want: ctlAPI(404)},
	"POST /api/v1/routes/:step/drain":          {path: "/api/v1/routes/missing-step/drain", want: ctlAPI(404)},

	// The event feed: controllers and admins.
	"GET /api/v1/events": {want: ctlAPI(200)},

	// Webhooks: admin tokens on the API, admins in the console.
	"POST /api/v1/webhooks":                                           {want: adminAPI(422)},
	"GET /api/v1/webhooks":                                            {want: adminAPI(200)},
	"DELETE /api/v1/webhooks/:id":                                     {path: "/api/v1/webhooks/whk_missing", want: adminAPI(404)},
	"POST /api/v1/webhooks/:id/rotate-secret":                         {path: "/api/v1/webhooks/whk_missing/rotate-secret", want: adminAPI(404)},
	"GET /api/v1/webhooks/:id/deliveries":                             {path: "/api/v1/webhooks/whk_missing/deliveries", want: adminAPI(404)},
	"POST /api/v1/webhooks/:id/deliveries/:event_id/redeliver":        {path: "/api/v1/webhooks/whk_missing/deliveries/evt_missing/redeliver", want: adminAPI(404)},
	"GET /console/admin/queues":                                       {want: admins(200)},
	"POST /console/admin/queues":                                      {want: formAccess(403, 403, 422)},
	"GET /console/admin/webhooks":                                     {want: admins(200)},
	"POST /console/admin/webhooks":                                    {want: formAccess(403, 403, 422)},
	"GET /console/admin/webhooks/:id":                                 {path: "/console/admin/webhooks/whk_missing", want: admins(404)},
	"POST /console/admin/webhooks/:id/delete":                         {path: "/console/admin/webhooks/whk_missing/delete", want: formAccess(403, 403, 404)},
	"POST /console/admin/webhooks/:id/rotate-secret":                  {path: "/console/admin/webhooks/whk_missing/rotate-secret", want: formAccess(403, 403, 404)},
	"POST /console/admin/webhooks/:id/deliveries/:event_id/redeliver": {path: "/console/admin/webhooks/whk_missing/deliveries/evt_missing/redeliver", want: formAccess(403, 403, 404)},
}

// matrixEnv is a server with one browser per user role and one token per
// API role.
type matrixEnv struct {
	t       *testing.T
	e       *echo.Echo
	srv     *httptest.Server
	cookies map[caller]*browser
	csrf    map[caller]string
	tokens  map[caller]string
	emails  map[caller]string
}

// endsLogin reports the routes that end the caller's login; they run last,
// each after a fresh login (relogin).
func endsLogin(key string) bool {
	return key == "POST /logout" || key == "POST /console/account/sign-out-everywhere"
}

// relogin logs every user caller in again where their login ended.
func (m *matrixEnv) relogin() {
	m.t.Helper()
	for c, email := range m.emails {
		b := m.cookies[c]
		if b.get("/console/sessions").StatusCode != http.StatusOK {
			b.mustLogin(email, testPassword)
		}
		m.csrf[c] = b.csrf("/console/sessions")
	}
}

func newMatrixEnv(t *testing.T, s *models.Store) *matrixEnv {
	t.Helper()
	h, err := web.NewServer(s, web.Config{Logger: slog.New(slog.DiscardHandler), SessionKey: "test-session-key-0123456789abcdefghijklmnop"})
	if err != nil {
		t.Fatal(err)
	}
	e, ok := h.(*echo.Echo)
	if !ok {
		t.Fatalf("web.NewServer returned %T, not the *echo.Echo whose routes the matrix walks", h)
	}
	// API exchanges are validated against the OpenAPI document.
	srv := apicontract.Server(t, h)
	m := &matrixEnv{t: t, e: e, srv: srv, cookies: map[caller]*browser{}, csrf: map[caller]string{}, tokens: map[caller]string{}, emails: map[caller]string{}}
	base := &browser{t: t, s: s, srv: srv, client: newClient(t)}
	m.cookies[anonymous] = base
	m.csrf[anonymous] = base.csrf("/login")
	for c, role := range map[caller]models.Role{agentUser: models.RoleAgent, reviewUser: models.RoleReviewer, adminUser: models.RoleAdmin} {
		b, u := agent(t, base, "Matrix "+string(c), role)
		m.cookies[c], m.emails[c] = b, u.Email
		m.csrf[c] = b.csrf("/console/sessions")
	}
	for c, role := range map[caller]models.Role{ctlToken: models.RoleController, workToken: models.RoleWorker, adminToken: models.RoleAdmin} {
		secret, _, err := s.CreateToken(t.Context(), "matrix-"+string(c), role)
		if err != nil {
			t.Fatal(err)
		}
		m.tokens[c] = secret
	}
	return m
}

// call sends one request as c and returns the status. Browsers post forms
// with their CSRF token unless noCSRF; token callers send Bearer and, on
// the API, an empty JSON object with a POST or PUT.
func (m *matrixEnv) call(c caller, method, path string, noCSRF bool) int {
	m.t.Helper()
	var body io.Reader
	ctype := ""
	if method == http.MethodPost || method == http.MethodPut {
		if strings.HasPrefix(path, "/api/") {
			body, ctype = strings.NewReader(`{}`), "application/json"
		} else {
			form := url.Values{}
			if b := m.cookies[c]; b != nil && !noCSRF {
				form.Set("_csrf", m.csrf[c])
			}
			body, ctype = strings.NewReader(form.Encode()), "application/x-www-form-urlencoded"
		}
	}
	req, err := http.NewRequest(method, m.srv.URL+path, body)
	if err != nil {
		m.t.Fatal(err)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	client := newClient(m.t)
	if b := m.cookies[c]; b != nil {
		client = b.client
	} else {
		req.Header.Set("Authorization", "Bearer "+m.tokens[c])
	}
	resp, err := client.Do(req)
	if err != nil {
		m.t.Fatalf("%s %s as %s: %v", method, path, c, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// routes lists the server's routes as "METHOD path", without Echo's
// not-found catch-alls; logout and sign out everywhere come last, since
// they end the login.
func (m *matrixEnv) routes() []string {
	var out []string
	for _, r := range m.e.Routes() {
		if r.Method == echo.RouteNotFound {
			continue
		}
		out = append(out, r.Method+" "+r.Path)
	}
	sort.Slice(out, func(i, j int) bool {
		if endsLogin(out[i]) != endsLogin(out[j]) {
			return endsLogin(out[j])
		}
		return out[i] < out[j]
	})
	return out
}

func TestAccessMatrix(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		m := newMatrixEnv(t, s)
		routes := m.routes()
		seen := map[string]bool{}
		for _, key := range routes {
			seen[key] = true
			rc, ok := accessMatrix[key]
			if !ok {
				t.Errorf("route %s is not in the access matrix: decide who may call it", key)
				continue
			}
			method, path, _ := strings.Cut(key, " ")
			if rc.path != "" {
				path = rc.path
			}
			if endsLogin(key) {
				m.relogin()
			}
			for _, c := range callers {
				want, ok := rc.want[c]
				if !ok {
					t.Errorf("%s: no expectation for %s", key, c)
					continue
				}
				if got := m.call(c, method, path, false); got != want {
					t.Errorf("%s %s as %s: status %d, want %d", method, path, c, got, want)
				}
			}
		}
		for key := range accessMatrix {
			if !seen[key] {
				t.Errorf("the access matrix lists %s, which the server does not register", key)
			}
		}
	})
}

// TestConsoleFormsNeedCSRF: every state-changing browser route refuses a
// POST without the CSRF token, even from a logged-in admin, before doing
// anything.
func TestConsoleFormsNeedCSRF(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		m := newMatrixEnv(t, s)
		n := 0
		for _, key := range m.routes() {
			method, path, _ := strings.Cut(key, " ")
			if method != http.MethodPost || strings.HasPrefix(path, "/api/") {
				continue
			}
			if rc := accessMatrix[key]; rc.path != "" {
				path = rc.path
			}
			for _, c := range []caller{adminUser, anonymous} {
				if got := m.call(c, method, path, true); got != http.StatusForbidden {
					t.Errorf("POST %s as %s without a CSRF token: status %d, want 403", path, c, got)
				}
			}
			n++
		}
		if n < 20 {
			t.Fatalf("only %d form routes checked", n)
		}
		// Nothing was done: the admin is still logged in and no verification ran.
		if got := m.call(adminUser, http.MethodGet, "/console/admin/users", false); got != http.StatusOK {
			t.Fatalf("admin after the refused posts: %d", got)
		}
		if log, err := s.ListAdminAudit(t.Context(), models.AdminAuditOpts{}); err != nil || len(log.Rows) != 0 {
			t.Fatalf("admin log after refused posts = %d rows, %v", len(log.Rows), err)
		}
	})
}
