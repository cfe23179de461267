package clienttest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sort"
	"testing"
	"time"

	"github.com/taskpilots/handoff/client"
	"github.com/taskpilots/handoff/handlers"
	"github.com/taskpilots/handoff/handlers/apicontract"
	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
	"github.com/taskpilots/handoff/web"
)

// opFixture is what the calls of clientCalls share: clients of each role on
// one server, and the ids earlier calls produced.
type opFixture struct {
	t                         *testing.T
	s                         *models.Store
	admin, controller, worker *client.Client
	receiver                  string // a webhook receiver that answers 204

	session   client.Outcome // open, then delegated, leased and answered
	other     client.Outcome // paused, resumed, escalated, cancelled
	lease     *client.Lease
	webhookID string
	eventID   string
}

// clientCalls maps every operationId of the OpenAPI document
// (handlers/openapi.json) to the Go client method that calls it, in an order
// where each call finds what it needs. An operation added to the document
// needs a method in client/ and an entry here: TestClientCoversEveryOperation
// names the missing ones.
var clientCalls = []struct {
	op   string
	call func(ctx context.Context, f *opFixture) error
}{
	{"getOpenAPI", func(ctx context.Context, f *opFixture) error {
		_, err := client.New(f.admin.BaseURL(), "").OpenAPI(ctx)
		return err
	}},
	{"createSession", func(ctx context.Context, f *opFixture) (err error) {
		f.session, err = f.controller.CreateSession(ctx, client.CreateSessionInput{Goal: "Refund order 1182 if eligible", TicketRef: "T-1182",
			Constraints: []string{"refunds over 200 EUR need a human"}, Resources: []client.Resource{{Name: "orders-db", URI: "db://orders"}},
			DoneCriteria: []string{"refund issued or denial explained"}, Facts: map[string]any{"order_total": "240 EUR"}, Priority: 2})
		if err == nil {
			f.other, err = f.controller.CreateSession(ctx, client.CreateSessionInput{Goal: "Replace the blender", TicketRef: "T-2001"})
		}
		return err
	}},
	{"getSession", func(ctx context.Context, f *opFixture) error {
		_, err := f.worker.GetSession(ctx, f.session.SessionID)
		return err
	}},
	{"listSessions", func(ctx context.Context, f *opFixture) error {
		_, err := f.worker.ListSessions(ctx, client.ListSessionsOptions{Statuses: []string{"open"}, Q: "refund", Limit: 20})
		return err
	}},
	{"addNote", func(ctx context.Context, f *opFixture) (err error) {
		f.session, err = f.controller.AddNote(ctx, f.session.SessionID, client.NoteInput{Text: "Customer is a VIP: refund without the usual photo proof."})
		return err
	}},
	{"pauseSession", func(ctx context.Context, f *opFixture) (err error) {
		f.other, err = f.controller.Snooze(ctx, f.other.SessionID, time.Now().Add(time.Hour), client.TransitionInput{ExpectedVersion: f.other.StateVersion, Reason: "customer asked us to wait"})
		return err
	}},
	{"resumeSession", func(ctx context.Context, f *opFixture) (err error) {
		f.other, err = f.controller.Resume(ctx, f.other.SessionID, client.TransitionInput{ExpectedVersion: f.other.StateVersion})
		return err
	}},
	{"escalateSession", func(ctx context.Context, f *opFixture) (err error) {
		f.other, err = f.controller.Escalate(ctx, f.other.SessionID, client.TransitionInput{ExpectedVersion: f.other.StateVersion, Question: "Replace or refund?"})
		return err
	}},
	{"cancelSession", func(ctx context.Context, f *opFixture) (err error) {
		f.other, err = f.controller.Cancel(ctx, f.other.SessionID, client.TransitionInput{ExpectedVersion: f.other.StateVersion, Reason: "duplicate ticket"})
		return err
	}},
	{"bulkSessions", func(ctx context.Context, f *opFixture) error {
		// f.other is cancelled now: the bulk skips it and says why.
		res, err := f.controller.Bulk(ctx, client.BulkInput{Action: client.BulkCancel, SessionIDs: []string{f.other.SessionID}, Reason: "duplicate ticket"})
		if err == nil && (res.Matched != 1 || len(res.Skipped) != 1 || len(res.Applied) != 0) {
			err = fmt.Errorf("bulk answer %+v", res)
		}
		return err
	}},
	{"createDelegation", func(ctx context.Context, f *opFixture) error {
		d, err := f.controller.Delegate(ctx, f.session.SessionID, client.DelegateInput{Queue: "refunds", Step: "check-eligibility", ExpectedVersion: f.session.StateVersion})
		f.session.StateVersion = d.StateVersion
		return err
	}},
	{"leaseWork", func(ctx context.Context, f *opFixture) (err error) {
		f.lease, err = f.worker.Lease(ctx, "refunds", client.LeaseInput{Worker: "w-1", WaitSeconds: 1})
		if err == nil && f.lease == nil {
			err = errors.New("nothing leased")
		}
		return err
	}},
	{"expireLeases", func(ctx context.Context, f *opFixture) error {
		_, err := f.admin.ExpireLeases(ctx, "quiet-queue", 0.5)
		return err
	}},
	{"heartbeat", func(ctx context.Context, f *opFixture) error {
		_, err := f.worker.Heartbeat(ctx, f.lease.DelegationID, f.lease.LeaseToken)
		return err
	}},
	{"getSessionPacket", func(ctx context.Context, f *opFixture) error {
		if _, err := f.worker.Packet(ctx, f.session.SessionID); err != nil {
			return err
		}
		_, err := f.worker.PacketPrompt(ctx, f.session.SessionID)
		return err
	}},
	{"submitResult", func(ctx context.Context, f *opFixture) (err error) {
		l := f.lease
		f.session, err = f.worker.Result(ctx, l.DelegationID, client.ResultInput{LeaseToken: l.LeaseToken, SessionID: l.SessionID, Step: l.Step,
			ResultType: client.ResultNeedsInput, Question: "Was the order paid by card?"})
		return err
	}},
	{"submitResults", func(ctx context.Context, f *opFixture) error {
		// The lease was answered just above: its token is fenced now, so
		// the batch answers 200 with the result's own 409.
		l := f.lease
		entries, err := f.worker.SubmitResults(ctx, []client.ResultItem{{DelegationID: l.DelegationID, ResultInput: client.ResultInput{
			LeaseToken: l.LeaseToken, SessionID: l.SessionID, Step: l.Step, ResultType: client.ResultNeedsInput, Question: "Again?"}}})
		if err != nil {
			return err
		}
		if len(entries) != 1 || entries[0].Status != http.StatusConflict || !client.IsConflict(entries[0].Err) {
			return fmt.Errorf("batch of one fenced result = %+v", entries)
		}
		return nil
	}},
	{"provideInput", func(ctx context.Context, f *opFixture) (err error) {
		f.session, err = f.controller.ProvideInput(ctx, f.session.SessionID, client.InputInput{ExpectedVersion: f.session.StateVersion,
			Answer: "paid by card", Delegate: &client.InputDelegate{Queue: "refunds", Step: "issue-refund", DelaySeconds: 3600}})
		return err
	}},
	{"listSessionEvents", func(ctx context.Context, f *opFixture) error {
		_, err := f.worker.Events(ctx, f.session.SessionID, 0, 10)
		return err
	}},
	{"getSessionStateAt", func(ctx context.Context, f *opFixture) error {
		_, err := f.worker.StateAt(ctx, f.session.SessionID, 2)
		return err
	}},
	{"spawnChildren", func(ctx context.Context, f *opFixture) error {
		p, err := f.controller.CreateSession(ctx, client.CreateSessionInput{Goal: "Refund and reship order 9"})
		if err != nil {
			return err
		}
		_, err = f.controller.SpawnChildren(ctx, p.SessionID, client.SpawnChildrenInput{ExpectedVersion: p.StateVersion,
			Join:     client.JoinInput{Policy: "all", TimeoutSeconds: 600},
			Children: []client.ChildInput{{Goal: "Refund order 9", Queue: "refunds", Step: "refund"}}})
		return err
	}},
	{"putQueue", func(ctx context.Context, f *opFixture) error {
		n := 50
		_, err := f.admin.PutQueue(ctx, "refunds", client.QueueFlowInput{MaxInFlight: &n})
		return err
	}},
	{"getQueue", func(ctx context.Context, f *opFixture) error {
		_, err := f.worker.GetQueue(ctx, "refunds")
		return err
	}},
	{"listQueues", func(ctx context.Context, f *opFixture) error {
		_, err := f.worker.Queues(ctx)
		return err
	}},
	{"putRoute", func(ctx context.Context, f *opFixture) error {
		_, err := f.controller.PutRoute(ctx, "issue-refund", client.RouteInput{Queue: "refunds", Instructions: "Refund in full."})
		return err
	}},
	{"getRoute", func(ctx context.Context, f *opFixture) error {
		_, err := f.worker.GetRoute(ctx, "issue-refund")
		return err
	}},
	{"listRoutes", func(ctx context.Context, f *opFixture) error {
		_, err := f.worker.Routes(ctx)
		return err
	}},
	{"drainRoute", func(ctx context.Context, f *opFixture) error {
		_, err := f.controller.DrainRoute(ctx, "issue-refund", 10)
		return err
	}},
	{"deleteRoute", func(ctx context.Context, f *opFixture) error {
		return f.controller.DeleteRoute(ctx, "issue-refund")
	}},
	{"getProductMetrics", func(ctx context.Context, f *opFixture) error {
		_, err := f.worker.Metrics(ctx, client.MetricsOptions{Window: "7d", Queue: "refunds"})
		return err
	}},
	{"createWebhook", func(ctx context.Context, f *opFixture) error {
		w, err := f.admin.CreateWebhook(ctx, client.WebhookInput{URL: f.receiver, Types: []string{"session.created"}, Description: "New sessions to the triage bot"})
		f.webhookID = w.ID
		if err != nil {
			return err
		}
		// One session created from now on, delivered once, for redeliver.
		if _, err := f.controller.CreateSession(ctx, client.CreateSessionInput{Goal: "Delivered"}); err != nil {
			return err
		}
		if _, err := f.s.SequenceFeed(ctx); err != nil {
			return err
		}
		_, err = (&web.Dispatcher{Store: f.s, Log: slog.New(slog.DiscardHandler)}).Pass(ctx)
		return err
	}},
	{"listFeedEvents", func(ctx context.Context, f *opFixture) error {
		_, err := f.controller.Feed(ctx, client.FeedOptions{Types: []string{"session.created"}, Limit: 10})
		return err
	}},
	{"listWebhooks", func(ctx context.Context, f *opFixture) error {
		_, err := f.admin.Webhooks(ctx)
		return err
	}},
	{"listWebhookDeliveries", func(ctx context.Context, f *opFixture) error {
		ds, err := f.admin.WebhookDeliveries(ctx, f.webhookID, 10)
		if err == nil && len(ds) == 0 {
			err = errors.New("no delivery")
		}
		if err == nil {
			f.eventID = ds[0].EventID
		}
		return err
	}},
	{"redeliverWebhook", func(ctx context.Context, f *opFixture) error {
		return f.admin.RedeliverWebhook(ctx, f.webhookID, f.eventID)
	}},
	{"rotateWebhookSecret", func(ctx context.Context, f *opFixture) error {
		_, err := f.admin.RotateWebhookSecret(ctx, f.webhookID)
		return err
	}},
	{"deleteWebhook", func(ctx context.Context, f *opFixture) error {
		return f.admin.DeleteWebhook(ctx, f.webhookID)
	}},
}

// TestClientCoversEveryOperation checks that every operation of the OpenAPI
// document has a Go client method, by calling each through the client
// against the real server behind a validator of its own: the call must
// succeed, reach that very operation and pass the document.
func TestClientCoversEveryOperation(t *testing.T) {
	t.Parallel()
	v, err := apicontract.New(handlers.OpenAPIDocument())
	if err != nil {
		t.Fatal(err)
	}
	documented := v.Operations()
	listed := map[string]bool{}
	for _, c := range clientCalls {
		if listed[c.op] {
			t.Errorf("clientCalls lists %s twice", c.op)
		}
		listed[c.op] = true
		if _, ok := documented[c.op]; !ok {
			t.Errorf("clientCalls lists %s, which handlers/openapi.json does not document (renamed?)", c.op)
		}
	}
	var missing []string
	for op, route := range documented {
		if !listed[op] {
			missing = append(missing, op+" ("+route+")")
		}
	}
	sort.Strings(missing)
	for _, m := range missing {
		t.Errorf("operation %s has no Go client method: add one in client/ and its call to clientCalls in clienttest/operations_test.go", m)
	}

	s := storetest.New(t, models.Postgres)
	ctx := context.Background()
	h, err := web.NewServer(s, web.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(v.Wrap(t, h))
	t.Cleanup(srv.Close)
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	t.Cleanup(recv.Close)
	f := &opFixture{t: t, s: s, receiver: recv.URL}
	for role, c := range map[models.Role]**client.Client{models.RoleAdmin: &f.admin, models.RoleController: &f.controller, models.RoleWorker: &f.worker} {
		tok, _, err := s.CreateToken(ctx, string(role), role)
		if err != nil {
			t.Fatal(err)
		}
		*c = client.New(srv.URL, tok, client.WithRetries(0))
	}
	for _, c := range clientCalls {
		before := v.Seen()[c.op]
		if err := c.call(ctx, f); err != nil {
			t.Fatalf("%s: %v", c.op, err)
		}
		if v.Seen()[c.op] == before {
			t.Errorf("the client call listed for %s did not reach %s (%s)", c.op, c.op, documented[c.op])
		}
	}
}
