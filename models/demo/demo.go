// Package demo seeds a realistic customer-support data set through the real
// write path: every session, event, delegation and lease in it was made by
// the same commands the API and the console use (CreateSession, Delegate,
// Claim, SubmitResult, RescueExpired, Transition, the takeover actions,
// ProvideInput, SpawnChildren, and the reviewer's ClaimNextReview and
// ScoreReview), so the seeded database verifies clean and the console shows
// what the product really produces.
//
// The seed runs on a demo clock: Store.Now is moved through the past six
// days while the stories are played, and restored afterwards. Seed must
// therefore run before the store is shared with anything else (it is called
// at serve start, before the background loops).
package demo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/taskpilots/handoff/models"
)

// The demo console users. Each gets a random password when Seed creates it,
// returned once in Result.Accounts for serve to print beside the first
// admin's: a published password would open every demo database left
// reachable, and serve seeds only a new embedded SQLite database.
const (
	AgentEmail    = "agent@demo.local"
	ReviewerEmail = "reviewer@demo.local"
)

// Account is a demo console user that Seed created, with its password,
// which is stored only as a hash and cannot be shown again.
type Account struct {
	Email    string
	Name     string
	Role     models.Role
	Password string
}

// Result is what Seed created.
type Result struct {
	Sessions int
	// Accounts are the demo users created by this call; a user that
	// already existed is used as it is and not listed.
	Accounts []Account
}

// Queues are the queues the demo sessions delegate to, directly or through
// Routes; the demo worker (`taskpilots worker`) works them.
var Queues = []string{"refunds", "shipping", "accounts", "billing", "notifications"}

// Routes are the demo's step routes: a worker's completed result naming one
// of these steps is delegated on at once (check-eligibility →
// issue-refund → notify-customer). UnroutedStep deliberately has none, so
// the console's Stalled view has something to show.
var Routes = map[string]models.RouteInput{
	"issue-refund": {Queue: "refunds",
		Instructions: "Refund the approved amount to the original payment method."},
	"notify-customer": {Queue: "notifications",
		Instructions: "Tell the customer in plain words what was done and what happens next."},
	"issue-credit-note": {Queue: "billing",
		Instructions: "Issue the credit note the review approved."},
}

// UnroutedStep is a step the demo names without a route: the claims team
// files carrier claims by hand, so sessions wait on it (stalled).
const UnroutedStep = "file-carrier-claim"

// Actors of the demo's API writes, as API tokens appear in events.
const (
	controller = "token:demo-controller"
	worker     = "token:demo-worker"
)

// span is how far back the demo history starts.
const span = 6 * 24 * time.Hour

// step is how far the demo clock moves for each write, so that the
// timeline of a session reads like real work rather than one instant.
const step = 15 * time.Second

// Seed creates the demo users and sessions when the database has no
// sessions, and returns what it created (nothing when there were sessions
// already). Whether a database should get demo data at all is the caller's
// decision (serve: only a new embedded SQLite database).
func Seed(ctx context.Context, s *models.Store) (Result, error) {
	var res Result
	some, err := s.ListSessions(ctx, models.SessionQuery{Limit: 1})
	if err != nil {
		return res, fmt.Errorf("demo: check for sessions: %w", err)
	}
	if len(some.Sessions) > 0 {
		return res, nil
	}
	orig := s.Now
	defer func() { s.Now = orig }()
	now := orig().UTC()
	d := &seeder{ctx: ctx, s: s, now: now, clock: now.Add(-span)}
	s.Now = func() time.Time { return d.clock }

	if d.agent, err = demoUser(ctx, s, &res, AgentEmail, "Alex Agent", models.RoleAgent); err != nil {
		return res, err
	}
	if d.reviewer, err = demoUser(ctx, s, &res, ReviewerEmail, "Riley Reviewer", models.RoleReviewer); err != nil {
		return res, err
	}
	if err := seedRoutes(ctx, s); err != nil {
		return res, err
	}
	d.play()
	res.Sessions = d.created
	if d.err != nil {
		return res, fmt.Errorf("demo: %w", d.err)
	}
	return res, nil
}

// seedRoutes creates the demo routes that do not exist yet; a route an
// operator made is kept as it is.
func seedRoutes(ctx context.Context, s *models.Store) error {
	steps := make([]string, 0, len(Routes))
	for st := range Routes {
		steps = append(steps, st)
	}
	sort.Strings(steps)
	for _, st := range steps {
		_, err := s.GetRoute(ctx, st)
		if err == nil {
			continue
		}
		if models.ErrorCode(err) != models.ENOTFOUND {
			return fmt.Errorf("demo: route %s: %w", st, err)
		}
		if _, err := s.PutRoute(ctx, controller, "", st, Routes[st]); err != nil {
			return fmt.Errorf("demo: route %s: %w", st, err)
		}
	}
	return nil
}

// demoUser returns the demo user with this email, creating it with a random
// password if needed (added to res.Accounts, the one place it is kept).
func demoUser(ctx context.Context, s *models.Store, res *Result, email, name string, role models.Role) (models.User, error) {
	var users []models.User
	if err := s.DB.WithContext(ctx).Where("email = ?", email).Limit(1).Find(&users).Error; err != nil {
		return models.User{}, fmt.Errorf("demo: find user %s: %w", email, err)
	}
	if len(users) == 1 {
		return users[0], nil
	}
	// As generated passwords elsewhere: 20 URL-safe characters.
	password := models.RandomSecret(15)
	u, err := s.CreateUser(ctx, models.CreateUserInput{Email: email, Name: name, Role: role, Password: password})
	if err != nil {
		return models.User{}, fmt.Errorf("demo: create user %s: %w", email, err)
	}
	res.Accounts = append(res.Accounts, Account{Email: email, Name: name, Role: role, Password: password})
	return u, nil
}

// seeder plays the stories. It keeps the first error and turns every later
// call into a no-op, so that the stories read as plain sequences.
type seeder struct {
	ctx      context.Context
	s        *models.Store
	now      time.Time // the real time when seeding started
	clock    time.Time // the demo clock
	agent    models.User
	reviewer models.User
	created  int
	err      error
}

func (d *seeder) fail(what string, err error) {
	if d.err == nil && err != nil {
		d.err = fmt.Errorf("%s: %w", what, err)
	}
}

// at moves the demo clock to ago before the real start time; it never
// moves it back, so that times stay in order.
func (d *seeder) at(ago time.Duration) {
	if t := d.now.Add(-ago); t.After(d.clock) {
		d.clock = t
	}
}

// wait moves the demo clock forward, e.g. while a human is away.
func (d *seeder) wait(dur time.Duration) { d.clock = d.clock.Add(dur) }

// story is one session being played.
type story struct {
	d     *seeder
	id    string
	ref   string
	v     int64
	queue string
	lease *models.Lease
}

func (st *story) ok() bool { return st.d.err == nil }

// wait lets time pass in the story (a human away, a worker that died).
func (st *story) wait(dur time.Duration) *story {
	st.d.wait(dur)
	return st
}

// took records an outcome (and moves the clock on).
func (st *story) took(what string, out models.Outcome, err error) {
	if err != nil {
		st.d.fail(st.ref+": "+what, err)
		return
	}
	st.v = out.StateVersion
	st.d.wait(step)
}

func (d *seeder) session(ago time.Duration, prio int, in models.CreateSessionInput) *story {
	st := &story{d: d, ref: in.TicketRef}
	if d.err != nil {
		return st
	}
	d.at(ago)
	in.Priority = &prio
	out, err := d.s.CreateSession(d.ctx, controller, "", in)
	st.took("create", out, err)
	if err == nil {
		st.id = out.SessionID
		d.created++
	}
	return st
}

type delegation struct {
	maxAttempts  int
	leaseSeconds int
	facts        map[string]any
}

func (st *story) delegate(queue, stepName, instructions string, o delegation) *story {
	if !st.ok() {
		return st
	}
	v := st.v
	in := models.DelegateInput{Queue: queue, Step: stepName, Instructions: instructions, ExpectedVersion: &v, Facts: o.facts}
	if o.maxAttempts > 0 {
		in.MaxAttempts = &o.maxAttempts
	}
	if o.leaseSeconds > 0 {
		in.LeaseSeconds = &o.leaseSeconds
	}
	out, err := st.d.s.Delegate(st.d.ctx, st.id, controller, "", in)
	st.queue = queue
	st.took("delegate "+stepName, out, err)
	return st
}

// claim leases the story's delegation. The stories are ordered so that no
// other delegation is available on the queue at that moment; a lease for
// another session would mean the script is wrong.
func (st *story) claim(workerName string) *story {
	if !st.ok() {
		return st
	}
	l, err := st.d.s.Claim(st.d.ctx, st.queue, workerName, worker, "")
	switch {
	case err != nil:
		st.d.fail(st.ref+": lease", err)
		return st
	case l == nil:
		st.d.fail(st.ref+": lease", errors.New("no delegation available on "+st.queue))
		return st
	case l.SessionID != st.id:
		st.d.fail(st.ref+": lease", fmt.Errorf("queue %s handed out session %s", st.queue, l.SessionID))
		return st
	}
	st.lease = l
	st.took("lease", models.Outcome{StateVersion: l.Packet.BasedOnVersion}, nil)
	return st
}

func (st *story) heartbeat() *story {
	if !st.ok() {
		return st
	}
	_, err := st.d.s.Heartbeat(st.d.ctx, st.lease.DelegationID, st.lease.LeaseToken)
	st.d.fail(st.ref+": heartbeat", err)
	return st
}

// result reports the return contract for the story's current lease.
func (st *story) result(in models.ResultInput) *story {
	if !st.ok() {
		return st
	}
	in.LeaseToken, in.SessionID, in.Step = st.lease.LeaseToken, st.id, st.lease.Step
	out, err := st.d.s.SubmitResult(st.d.ctx, st.lease.DelegationID, worker, "", in)
	st.took("result "+in.ResultType, out, err)
	return st
}

// routed checks that the last result was delegated on by its route, to
// queue, and makes queue the story's queue for the next claim.
func (st *story) routed(queue string) *story {
	if !st.ok() {
		return st
	}
	row, err := st.d.s.GetSession(st.d.ctx, st.id)
	if err == nil && (row.Status != models.StatusQueued || row.Queue != queue) {
		err = fmt.Errorf("session is %s on %q, want routed to %s", row.Status, row.Queue, queue)
	}
	st.d.fail(st.ref+": routed", err)
	st.queue = queue
	return st
}

func (st *story) transition(et models.EventType, reason, question string) *story {
	if !st.ok() {
		return st
	}
	v := st.v
	out, err := st.d.s.Transition(st.d.ctx, st.id, et, controller, "", models.TransitionInput{ExpectedVersion: &v, Reason: reason, Question: question})
	st.took(string(et), out, err)
	return st
}

func (st *story) takeClaim() *story {
	if !st.ok() {
		return st
	}
	v := st.v
	out, err := st.d.s.ClaimEscalation(st.d.ctx, st.id, st.d.agent, "", models.ClaimInput{ExpectedVersion: &v})
	st.took("claim escalation", out, err)
	return st
}

func (st *story) note(text, claim, source string) *story {
	if !st.ok() {
		return st
	}
	v := st.v
	out, err := st.d.s.AddNote(st.d.ctx, st.id, st.d.agent, "", models.NoteInput{ExpectedVersion: &v, Text: text, EvidenceClaim: claim, EvidenceSource: source})
	st.took("note", out, err)
	return st
}

func (st *story) release(reason string) *story {
	if !st.ok() {
		return st
	}
	v := st.v
	out, err := st.d.s.Release(st.d.ctx, st.id, st.d.agent, "", models.ReleaseInput{ExpectedVersion: &v, Reason: reason})
	st.took("release", out, err)
	return st
}

func (st *story) requestInput(question string) *story {
	if !st.ok() {
		return st
	}
	v := st.v
	out, err := st.d.s.RequestInput(st.d.ctx, st.id, st.d.agent, "", models.RequestInputInput{ExpectedVersion: &v, Question: question})
	st.took("request input", out, err)
	return st
}

func (st *story) provide(answer string, facts map[string]any) *story {
	if !st.ok() {
		return st
	}
	v := st.v
	out, err := st.d.s.ProvideInput(st.d.ctx, st.id, controller, "", models.InputInput{ExpectedVersion: &v, Answer: answer, Facts: facts})
	st.took("provide input", out, err)
	return st
}

func (st *story) resume(in models.ResumeInput) *story {
	if !st.ok() {
		return st
	}
	v := st.v
	in.ExpectedVersion = &v
	out, err := st.d.s.ResumeAutomation(st.d.ctx, st.id, st.d.agent, "", in)
	st.queue = in.Queue
	st.took("resume automation", out, err)
	return st
}

func (st *story) handBack(note string) *story {
	if !st.ok() {
		return st
	}
	v := st.v
	out, err := st.d.s.HandBack(st.d.ctx, st.id, st.d.agent, "", models.HandBackInput{ExpectedVersion: &v, Note: note})
	st.took("hand back", out, err)
	return st
}

func (st *story) complete(resolution string) *story {
	if !st.ok() {
		return st
	}
	v := st.v
	out, err := st.d.s.CompleteHuman(st.d.ctx, st.id, st.d.agent, "", models.CompleteInput{ExpectedVersion: &v, Resolution: resolution})
	st.took("complete", out, err)
	return st
}

func (st *story) reject(reason string) *story {
	if !st.ok() {
		return st
	}
	v := st.v
	out, err := st.d.s.RejectHuman(st.d.ctx, st.id, st.d.agent, "", models.RejectInput{ExpectedVersion: &v, Reason: reason})
	st.took("reject", out, err)
	return st
}

// rescue runs the rescuer, as the maintenance pass would, and expects it to
// free exactly the story's lease.
func (st *story) rescue() *story {
	if !st.ok() {
		return st
	}
	n, err := st.d.s.RescueExpired(st.d.ctx, 100)
	if err == nil && n != 1 {
		err = fmt.Errorf("rescued %d leases, want 1", n)
	}
	st.d.fail(st.ref+": rescue", err)
	if err == nil {
		row, gerr := st.d.s.GetSession(st.d.ctx, st.id)
		st.d.fail(st.ref+": reload", gerr)
		st.v = row.StateVersion
		st.d.wait(step)
	}
	return st
}

func (st *story) spawn(in models.SpawnInput) *story {
	if !st.ok() {
		return st
	}
	v := st.v
	in.ExpectedVersion = &v
	out, err := st.d.s.SpawnChildren(st.d.ctx, st.id, controller, "", in)
	st.took("spawn children", out, err)
	if err == nil {
		st.d.created += len(in.Children)
	}
	return st
}

func ev(claim, source string) models.Evidence { return models.Evidence{Claim: claim, Source: source} }

func output(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic("demo: output does not marshal: " + err.Error())
	}
	return b
}

func ticket(ref, goal string, facts map[string]any, constraints ...string) models.CreateSessionInput {
	return models.CreateSessionInput{
		Goal: goal, TicketRef: ref, Facts: facts, Constraints: constraints,
		Resources: []models.Resource{
			{Name: "helpdesk", URI: "https://helpdesk.example.com/tickets/" + strings.TrimPrefix(ref, "T-")},
			{Name: "orders-db", URI: "postgres://orders.internal/orders"},
		},
		DoneCriteria: []string{"the customer has a clear answer", "every money movement is backed by evidence"},
	}
}

const refundPolicy = "refunds over 200 EUR need a human approval"

func uncertain(level float64, notes string) *models.Uncertainty {
	return &models.Uncertainty{Level: level, Notes: notes}
}

const hour = time.Hour
const day = 24 * time.Hour

// play runs the stories, oldest first. Stories that claim work come first;
// the ones that leave delegations waiting in a queue come last, so that no
// claim in the script can pick up another story's delegation.
func (d *seeder) play() {
	// T-1175: a small refund, three steps, done by automation: the
	// controller delegated the first; routes delegated the next two.
	d.session(6*day, 3, ticket("T-1175", "Refund order 1175: coffee mug arrived chipped", map[string]any{
		"order_id": "1175", "order_total": "19.90 EUR", "customer_email": "mila.novak@example.net"}, refundPolicy)).
		delegate("refunds", "check-eligibility", "Check the order against the refund policy.", delegation{}).
		claim("refunds-worker-1").
		result(models.ResultInput{ResultType: models.ResultCompleted, NextStep: "issue-refund",
			Output:      output(map[string]any{"eligible": true, "amount_eur": 19.90}),
			Evidence:    []models.Evidence{ev("order 1175 paid 19.90 EUR by card", "orders-db:1175"), ev("photo of the chipped mug attached", "helpdesk:T-1175#att-1")},
			Uncertainty: uncertain(0.05, "")}).
		routed("refunds").
		claim("refunds-worker-1").
		result(models.ResultInput{ResultType: models.ResultCompleted, NextStep: "notify-customer",
			Output:   output(map[string]any{"refund_id": "re_3PqT1175", "amount_eur": 19.90}),
			Evidence: []models.Evidence{ev("refund re_3PqT1175 succeeded", "payments-api:refunds/re_3PqT1175")}}).
		routed("notifications").
		claim("notifications-worker-1").
		result(models.ResultInput{ResultType: models.ResultCompleted,
			Output:   output(map[string]any{"message_id": "msg_1175", "channel": "email"}),
			Evidence: []models.Evidence{ev("refund confirmation sent to mila.novak@example.net", "mailer:msg_1175")}})

	// T-1178: where is my parcel.
	d.session(5*day+20*hour, 4, ticket("T-1178", "Tell the customer where parcel for order 1178 is", map[string]any{
		"order_id": "1178", "carrier": "DHL", "tracking_number": "JD014600006281178"})).
		delegate("shipping", "track-parcel", "Look the parcel up at the carrier and summarise.", delegation{}).
		claim("shipping-worker-1").
		result(models.ResultInput{ResultType: models.ResultCompleted,
			Output:   output(map[string]any{"status": "in delivery", "eta": "tomorrow before 12:00"}),
			Evidence: []models.Evidence{ev("carrier scan: out for delivery from Leipzig hub", "dhl-api:JD014600006281178")}})

	// T-1190: the first worker crashed without sending a result; its lease
	// ran out, the rescuer re-queued the delegation and attempt 2 completed.
	d.session(5*day, 3, ticket("T-1190", "Compensate late delivery of order 1190 (15 EUR voucher)", map[string]any{
		"order_id": "1190", "amount": "15.00 EUR", "promised_by": "2026-11-21"})).
		delegate("refunds", "issue-voucher", "Issue a 15 EUR voucher for the late delivery.", delegation{leaseSeconds: 60}).
		claim("refunds-worker-3").
		wait(3 * time.Minute).
		rescue().
		claim("refunds-worker-1").
		result(models.ResultInput{ResultType: models.ResultCompleted,
			Output:   output(map[string]any{"voucher": "LATE-15-1190", "attempt": 2}),
			Evidence: []models.Evidence{ev("voucher LATE-15-1190 created for 15.00 EUR", "vouchers-api:LATE-15-1190")}})

	// T-1193: escalated above the limit; an agent checked and refunded by hand.
	d.session(4*day+18*hour, 2, ticket("T-1193", "Refund cancelled sofa order 1193 (320 EUR)", map[string]any{
		"order_id": "1193", "order_total": "320.00 EUR"}, refundPolicy)).
		delegate("refunds", "check-eligibility", "Check the cancellation against the refund policy.", delegation{}).
		claim("refunds-worker-1").
		result(models.ResultInput{ResultType: models.ResultEscalated, NextStep: "issue-refund",
			Evidence:    []models.Evidence{ev("order 1193 cancelled before dispatch", "orders-db:1193")},
			Risks:       []string{"refund of 320.00 EUR exceeds the automatic limit"},
			Uncertainty: uncertain(0.2, ""), Question: "Approve the refund of 320.00 EUR?"}).
		wait(40*time.Minute).
		takeClaim().
		note("Cancellation came 3 days after purchase, inside the 14-day window.", "cancellation e-mail dated 2026-11-23", "helpdesk:T-1193#msg-4").
		complete("Approved and refunded 320.00 EUR through the payments console; customer informed.")

	// T-1196: escalated; the agent approved and gave it back to automation.
	d.session(4*day+10*hour, 2, ticket("T-1196", "Refund wrong-size boots from order 1196 (260 EUR)", map[string]any{
		"order_id": "1196", "order_total": "260.00 EUR"}, refundPolicy)).
		delegate("refunds", "check-eligibility", "Check the return against the refund policy.", delegation{}).
		claim("refunds-worker-2").
		result(models.ResultInput{ResultType: models.ResultEscalated, NextStep: "issue-refund",
			Evidence:    []models.Evidence{ev("return parcel received at the warehouse", "warehouse-api:returns/R-1196")},
			Risks:       []string{"refund of 260.00 EUR exceeds the automatic limit"},
			Uncertainty: uncertain(0.1, ""), Question: "Approve the refund of 260.00 EUR?"}).
		wait(25 * time.Minute).
		takeClaim().
		resume(models.ResumeInput{Queue: "refunds", Step: "issue-refund",
			Instructions: "Approved by support. Refund 260.00 EUR to the original payment method; do not charge return shipping.",
			Facts:        map[string]any{"approved_amount": "260.00 EUR", "approved_by_human": true},
			Note:         "Return received in good condition; approved."}).
		claim("refunds-worker-1").
		result(models.ResultInput{ResultType: models.ResultCompleted,
			Output:   output(map[string]any{"refund_id": "re_9XkA1196", "amount_eur": 260.00}),
			Evidence: []models.Evidence{ev("refund re_9XkA1196 succeeded", "payments-api:refunds/re_9XkA1196")}})

	// T-1199: a gift card refund; policy says no, a human confirmed.
	d.session(4*day, 3, ticket("T-1199", "Refund gift card bought with order 1199 (500 EUR)", map[string]any{
		"order_id": "1199", "order_total": "500.00 EUR", "product": "gift card"}, refundPolicy)).
		delegate("refunds", "check-eligibility", "Check the order against the refund policy.", delegation{}).
		claim("refunds-worker-3").
		result(models.ResultInput{ResultType: models.ResultFailed,
			Failure:  &models.Failure{Class: models.FailurePermanent, Message: "gift cards are not refundable (policy section 4.2)"},
			Evidence: []models.Evidence{ev("order 1199 is a gift card purchase", "orders-db:1199")}, Question: "Confirm the refusal to the customer?"}).
		wait(2 * time.Hour).
		takeClaim().
		reject("Gift cards are not refundable (policy 4.2); offered to extend the card's validity by a year instead.")

	// T-1201: a refund the worker refused on evidence.
	d.session(3*day+20*hour, 4, ticket("T-1201", "Refund order 1201: customer says it never arrived", map[string]any{
		"order_id": "1201", "order_total": "64.00 EUR", "tracking_number": "00340434161201"}, refundPolicy)).
		delegate("refunds", "check-eligibility", "Check delivery before refunding.", delegation{}).
		claim("refunds-worker-2").
		result(models.ResultInput{ResultType: models.ResultRejected,
			Output:   output(map[string]any{"eligible": false, "reason": "delivered and signed for"}),
			Evidence: []models.Evidence{ev("delivered 2026-11-24 10:42, signed by the customer", "dhl-api:00340434161201")}})

	// T-1205: a transient failure retried after its backoff, then completed.
	d.session(3*day+12*hour, 3, ticket("T-1205", "Correct invoice 1205: VAT charged twice", map[string]any{
		"invoice_id": "INV-2026-1205", "customer_id": "C-88412"})).
		delegate("billing", "correct-invoice", "Issue a corrected invoice without the duplicate VAT line.", delegation{}).
		claim("billing-worker-1").
		result(models.ResultInput{ResultType: models.ResultFailed,
			Failure: &models.Failure{Class: models.FailureTransient, Message: "billing-api timed out after 30s"}}).
		wait(10 * time.Minute).
		claim("billing-worker-2").
		result(models.ResultInput{ResultType: models.ResultCompleted,
			Output:   output(map[string]any{"credit_note": "CN-2026-0412", "corrected_invoice": "INV-2026-1205-C"}),
			Evidence: []models.Evidence{ev("credit note CN-2026-0412 cancels the duplicate VAT of 17.10 EUR", "billing-api:credit-notes/CN-2026-0412")}})

	// T-1207: account locked; the worker needs the sign-up e-mail.
	d.session(3*day+6*hour, 2, ticket("T-1207", "Unlock account locked after repeated password resets", map[string]any{
		"ticket_email": "k.meyer@example.com"}, "never reveal whether an e-mail address has an account")).
		delegate("accounts", "verify-identity", "Verify the requester owns the account before unlocking.", delegation{}).
		claim("accounts-worker-1").
		result(models.ResultInput{ResultType: models.ResultNeedsInput, NextStep: "verify-identity",
			Question: "Which e-mail address did the customer sign up with? The ticket came from a different address.",
			Evidence: []models.Evidence{ev("no account registered for the ticket's e-mail", "accounts-db:lookup")}})

	// T-1210: the new address was rejected as bad input.
	d.session(3*day, 3, ticket("T-1210", "Change delivery address for order 1210", map[string]any{
		"order_id": "1210", "address": "Hauptstr. 5, 1234X Berlin"})).
		delegate("shipping", "update-address", "Update the address before the parcel leaves the warehouse.", delegation{}).
		claim("shipping-worker-2").
		result(models.ResultInput{ResultType: models.ResultFailed,
			Failure: &models.Failure{Class: models.FailureBadInput, Message: "postcode 1234X is not a valid German postcode"}})

	// T-1212: a disputed renewal; the agent asked for proof, got it, and the
	// credit note went out.
	d.session(2*day+20*hour, 2, ticket("T-1212", "Customer disputes annual plan renewal 1212 (99 EUR)", map[string]any{
		"invoice_id": "INV-2026-1212", "customer_id": "C-10233", "amount": "99.00 EUR"})).
		delegate("billing", "review-dispute", "Check whether the plan was cancelled before renewal.", delegation{}).
		claim("billing-worker-1").
		result(models.ResultInput{ResultType: models.ResultEscalated, NextStep: "issue-credit-note",
			Evidence:    []models.Evidence{ev("renewal charged 2026-11-20", "billing-api:invoices/INV-2026-1212")},
			Risks:       []string{"customer threatens a chargeback"},
			Uncertainty: uncertain(0.6, "no cancellation on file, but the customer insists"),
			Question:    "The customer says they cancelled before renewal; we have no record. Credit or refuse?"}).
		wait(hour).
		takeClaim().
		requestInput("Can the customer forward the cancellation confirmation e-mail?").
		wait(5*hour).
		provide("Customer forwarded our confirmation e-mail dated 2026-11-18, two days before renewal.",
			map[string]any{"cancellation_confirmed": "2026-11-18"}).
		delegate("billing", "issue-credit-note", "Credit the renewal in full; cancellation is confirmed.", delegation{}).
		claim("billing-worker-2").
		result(models.ResultInput{ResultType: models.ResultCompleted,
			Output:   output(map[string]any{"credit_note": "CN-2026-0419", "amount_eur": 99.00}),
			Evidence: []models.Evidence{ev("credit note CN-2026-0419 issued", "billing-api:credit-notes/CN-2026-0419")}})

	// T-1215: out of stock; the agent handed the step back once stock came in.
	d.session(2*day+12*hour, 3, ticket("T-1215", "Reship lost parcel for order 1215", map[string]any{
		"order_id": "1215", "sku": "LMP-220-BLK"})).
		delegate("shipping", "reship", "Create a replacement shipment.", delegation{}).
		claim("shipping-worker-1").
		result(models.ResultInput{ResultType: models.ResultFailed,
			Failure: &models.Failure{Class: models.FailurePermanent, Message: "warehouse rejected the shipment: SKU LMP-220-BLK out of stock"}}).
		wait(3*hour).
		takeClaim().
		note("Stock arrived this morning; the same step will work now.", "12 units of LMP-220-BLK in stock", "warehouse-api:stock/LMP-220-BLK").
		handBack("Stock is back; please reship.").
		claim("shipping-worker-2").
		result(models.ResultInput{ResultType: models.ResultCompleted,
			Output:   output(map[string]any{"shipment": "SHP-77120"}),
			Evidence: []models.Evidence{ev("replacement shipment SHP-77120 created", "warehouse-api:shipments/SHP-77120")}})

	// T-1226: paused while running, at the customer's request.
	d.session(day+6*hour, 4, ticket("T-1226", "Merge duplicate customer accounts C-30112 and C-30877", map[string]any{
		"customer_id": "C-30112", "duplicate_id": "C-30877"})).
		delegate("accounts", "merge-accounts", "Merge the duplicate into the older account, keeping order history.", delegation{}).
		claim("accounts-worker-1").
		transition(models.EventSessionPaused, "customer asked us to wait until their new company e-mail is set up", "")

	// The demo reviewer scores the escalations decided so far, so that the
	// review statistics have something to show; the later decisions stay
	// in the review queue.
	d.review(reviewScores)

	// T-1228: cancelled as a duplicate ticket.
	d.session(day, 3, ticket("T-1228", "Refund order 1182 (second ticket from the same customer)", map[string]any{
		"order_id": "1182", "order_total": "240.00 EUR"}, refundPolicy)).
		delegate("refunds", "check-eligibility", "Check the order against the refund policy.", delegation{}).
		transition(models.EventSessionCancelled, "duplicate of T-1182", "")

	// T-1230: cancelled before any work.
	d.session(20*hour, 5, ticket("T-1230", "Question about the delivery time of order 1230", map[string]any{"order_id": "1230"})).
		transition(models.EventSessionCancelled, "customer withdrew the question", "")

	// T-1232: a GDPR erasure done by automation.
	d.session(16*hour, 2, ticket("T-1232", "GDPR erasure request from customer C-60232", map[string]any{
		"customer_id": "C-60232"}, "keep invoices for the legal retention period")).
		delegate("accounts", "erase-personal-data", "Erase personal data; keep invoices as the law requires.", delegation{}).
		claim("accounts-worker-2").
		result(models.ResultInput{ResultType: models.ResultCompleted,
			Output:   output(map[string]any{"erased_systems": []string{"crm", "newsletter", "accounts"}, "kept": "invoices (10-year retention)"}),
			Evidence: []models.Evidence{ev("erasure job ER-60232 finished", "privacy-api:jobs/ER-60232")}})

	// T-1234: the customer answered the worker's question; the session is
	// open again for the controller's next step.
	d.session(12*hour, 3, ticket("T-1234", "Replace damaged floor lamp from order 1234", map[string]any{
		"order_id": "1234", "sku": "LMP-220-WHT"})).
		delegate("shipping", "check-stock", "Check stock for a replacement.", delegation{}).
		claim("shipping-worker-2").
		result(models.ResultInput{ResultType: models.ResultNeedsInput, NextStep: "reship",
			Question: "White is out of stock until January. Is the customer happy with the black variant?",
			Evidence: []models.Evidence{ev("LMP-220-WHT: 0 in stock, next delivery 2027-01-08", "warehouse-api:stock/LMP-220-WHT")}}).
		wait(3*hour).
		provide("Customer accepts the black variant.", map[string]any{"sku": "LMP-220-BLK"})

	// The open escalations, in human hands now. Their SLA clocks run from
	// when they escalated, relative to the real time of the seed, so that
	// the inbox and the metrics show a realistic mix: most within their
	// SLA, two near breach, one breached (models.DefaultSLAPolicy: P1 15m,
	// P2 1h, P3 4h, P4 24h, P5 72h; near breach after 80%).

	// T-1222: an agent looked, noted, and released it for a specialist;
	// low priority, well within its SLA.
	d.session(8*hour+30*time.Minute, 5, ticket("T-1222", "Customs fees dispute on order 1222 (import to Switzerland)", map[string]any{
		"order_id": "1222", "destination": "CH", "fees_charged": "38.40 CHF"})).
		delegate("shipping", "review-customs", "Check whether the customs fees were announced at checkout.", delegation{}).
		claim("shipping-worker-1").
		result(models.ResultInput{ResultType: models.ResultEscalated, NextStep: "refund-customs-fees",
			Evidence:    []models.Evidence{ev("checkout page showed 'duties may apply'", "web-archive:checkout/2026-11-10")},
			Uncertainty: uncertain(0.5, "wording may not meet Swiss disclosure rules"),
			Question:    "Do we refund the 38.40 CHF customs fees as a goodwill gesture?"}).
		wait(30*time.Minute).
		takeClaim().
		note("Not sure about Swiss disclosure rules; this needs someone from the CH team.", "", "").
		release("Needs someone who knows Swiss customs rules")

	// T-1218: a GDPR export whose worker kept dying: attempts exhausted,
	// escalated to a human; the legal deadline is weeks away (within SLA).
	d.session(7*hour, 4, ticket("T-1218", "GDPR data export for customer C-55218", map[string]any{
		"customer_id": "C-55218", "legal_deadline": "2026-12-20"}, "deliver the export only to the verified account e-mail")).
		delegate("accounts", "export-data", "Collect the customer's data from all systems into one archive.", delegation{maxAttempts: 2, leaseSeconds: 30}).
		claim("accounts-worker-2").
		wait(2 * time.Minute).
		rescue().
		claim("accounts-worker-1").
		wait(2 * time.Minute).
		rescue()

	// T-1252: a warranty claim just outside the warranty; within its SLA.
	d.session(6*hour, 4, ticket("T-1252", "Warranty claim for headphones from order 1252, 3 days past the 2-year warranty", map[string]any{
		"order_id": "1252", "order_total": "149.00 EUR", "delivered": "2024-11-27"})).
		delegate("refunds", "check-warranty", "Check the claim against the warranty terms.", delegation{}).
		claim("refunds-worker-2").
		result(models.ResultInput{ResultType: models.ResultEscalated, NextStep: "issue-refund",
			Evidence:    []models.Evidence{ev("delivered 2024-11-27; warranty ended 2026-11-27", "orders-db:1252")},
			Risks:       []string{"a goodwill exception may be expected by other customers"},
			Uncertainty: uncertain(0.3, "the defect may have started inside the warranty"),
			Question:    "Make a goodwill exception for a claim 3 days after the warranty ended?"})

	// T-1258: a bulk discount request the controller sent straight to a
	// human; low priority, within its SLA.
	d.session(5*hour, 5, ticket("T-1258", "Quote a volume discount for 40 office chairs (customer C-41258)", map[string]any{
		"customer_id": "C-41258", "quantity": 40, "sku": "CHR-OFF-100"})).
		transition(models.EventSessionEscalated, "volume discounts are decided by sales",
			"Offer 12% for 40 chairs, as the price list allows from 25 units?")

	// T-1254: an address change for a parcel the carrier already has;
	// most of its 4 hours are gone (near breach).
	d.session(3*hour+25*time.Minute, 3, ticket("T-1254", "Redirect parcel for order 1254 to a pick-up point", map[string]any{
		"order_id": "1254", "carrier": "DHL", "tracking_number": "JD014600006281254"})).
		delegate("shipping", "redirect-parcel", "Ask the carrier to redirect the parcel to the pick-up point.", delegation{}).
		claim("shipping-worker-1").
		result(models.ResultInput{ResultType: models.ResultEscalated, NextStep: "redirect-parcel",
			Evidence: []models.Evidence{ev("carrier refuses redirects requested by the sender after the first delivery attempt", "dhl-api:JD014600006281254")},
			Question: "Ask the customer to redirect it themselves with the carrier's link?"})

	// T-1256: copies of a year's invoices for an audit; within its SLA.
	d.session(2*hour, 4, ticket("T-1256", "Send copies of all 2025 invoices to customer C-11256 for their audit", map[string]any{
		"customer_id": "C-11256", "year": 2025})).
		delegate("billing", "collect-invoices", "Collect the customer's invoices of 2025 into one PDF.", delegation{}).
		claim("billing-worker-1").
		result(models.ResultInput{ResultType: models.ResultEscalated, NextStep: "send-invoices",
			Evidence: []models.Evidence{ev("14 invoices found; 2 were issued to a former billing address", "billing-api:invoices?customer=C-11256&year=2025")},
			Risks:    []string{"sending invoices with a former address may disclose data of the customer's previous company"},
			Question: "Send all 14, or only the 12 issued to the current company?"})

	// T-1182: a refund above the limit, escalated with a full package;
	// within its SLA.
	d.session(90*time.Minute, 3, ticket("T-1182", "Refund order 1182: espresso machine arrived broken (240 EUR)", map[string]any{
		"order_id": "1182", "order_total": "240.00 EUR", "customer_email": "j.okafor@example.org", "payment": "card"}, refundPolicy)).
		delegate("refunds", "check-eligibility", "Check the order against the refund policy; escalate above the limit.", delegation{}).
		claim("refunds-worker-2").
		result(models.ResultInput{ResultType: models.ResultEscalated, NextStep: "issue-refund",
			Output: output(map[string]any{"eligible": "needs approval", "amount_eur": 240.00}),
			Evidence: []models.Evidence{
				ev("order 1182 paid 240.00 EUR by card on 2026-11-18", "orders-db:1182"),
				ev("customer photo shows a cracked water tank", "helpdesk:T-1182#att-2"),
				ev("no earlier refund for order 1182", "payments-api:refunds?order=1182"),
			},
			Risks: []string{"refund of 240.00 EUR exceeds the 200 EUR automatic limit",
				"the carrier's damage claim may cover part of the cost; refunding first may forfeit it"},
			Uncertainty: uncertain(0.25, "damage in transit is likely but not confirmed by the carrier"),
			Question:    "Approve a full refund of 240.00 EUR to the original card, or offer a replacement machine instead?"})

	// T-1220: a controller escalated an enterprise chargeback threat;
	// nobody took it within the hour of its priority: the breached one.
	d.session(80*time.Minute, 2, ticket("T-1220", "Enterprise customer C-00017 threatens a chargeback on invoice 1220", map[string]any{
		"customer_id": "C-00017", "invoice_id": "INV-2026-1220", "amount": "4800.00 EUR"})).
		transition(models.EventSessionEscalated, "enterprise account with a chargeback threat; needs the account manager",
			"Call the customer's finance contact before the chargeback deadline on Friday?")

	// T-1224: a double charge, being worked by the demo agent right now;
	// most of its hour is gone (near breach).
	d.session(52*time.Minute, 2, ticket("T-1224", "Customer charged twice for order 1224 (2 x 89.90 EUR)", map[string]any{
		"order_id": "1224", "order_total": "89.90 EUR", "psp_charges": "ch_1224a, ch_1224b"})).
		delegate("billing", "investigate-double-charge", "Find out whether both charges were captured.", delegation{}).
		claim("billing-worker-2").
		result(models.ResultInput{ResultType: models.ResultEscalated, NextStep: "refund-duplicate-charge",
			Evidence: []models.Evidence{ev("charge ch_1224a captured 89.90 EUR", "psp:ch_1224a"),
				ev("charge ch_1224b captured 89.90 EUR 4 seconds later", "psp:ch_1224b")},
			Risks:       []string{"customer's bank may already have opened a dispute", "refunding the wrong charge breaks the order's payment link"},
			Uncertainty: uncertain(0.15, ""), Question: "Refund the duplicate capture ch_1224b of 89.90 EUR?"}).
		wait(15*time.Minute).
		takeClaim().
		note("Checked the PSP dashboard: the second capture is real, not a pending authorisation.", "ch_1224b settled", "psp-dashboard:ch_1224b")

	// T-1247: the carrier lost a parcel; filing the carrier claim is a
	// step nobody has routed (the claims team does it by hand), so the
	// session is open and stalled until someone acts on it.
	d.session(30*time.Minute, 3, ticket("T-1247", "Parcel for order 1247 lost in transit", map[string]any{
		"order_id": "1247", "carrier": "DHL", "tracking_number": "JD014600006281247"})).
		delegate("shipping", "track-parcel", "Look the parcel up at the carrier and summarise.", delegation{}).
		claim("shipping-worker-2").
		result(models.ResultInput{ResultType: models.ResultCompleted, NextStep: UnroutedStep,
			Output:   output(map[string]any{"status": "lost", "last_scan": "Leipzig hub, 9 days ago"}),
			Evidence: []models.Evidence{ev("no carrier scan for 9 days; carrier marked the parcel lost", "dhl-api:JD014600006281247")}})

	// T-1236: a worker is on it right now (a long lease, so it stays running
	// for a while after the seed).
	d.session(25*time.Minute, 3, ticket("T-1236", "Explain proration after plan upgrade on invoice 1236", map[string]any{
		"invoice_id": "INV-2026-1236", "customer_id": "C-71236"})).
		delegate("billing", "explain-proration", "Explain the prorated amount in plain words.", delegation{leaseSeconds: models.MaxLeaseSeconds}).
		claim("billing-worker-1").
		heartbeat()

	// From here on, stories leave work waiting in the queues.

	// T-1238: waiting for a refunds worker.
	d.session(18*time.Minute, 3, ticket("T-1238", "Refund order 1238: item never arrived (45 EUR)", map[string]any{
		"order_id": "1238", "order_total": "45.00 EUR"}, refundPolicy)).
		delegate("refunds", "check-eligibility", "Check delivery and the refund policy.", delegation{})

	// T-1240: paused and resumed; queued again.
	d.session(15*time.Minute, 4, ticket("T-1240", "Move delivery slot for order 1240 to next week", map[string]any{
		"order_id": "1240", "address": "Lindenweg 3, 80331 Muenchen"})).
		delegate("shipping", "change-slot", "Book the customer's preferred slot.", delegation{}).
		transition(models.EventSessionPaused, "customer was travelling", "").
		transition(models.EventSessionResumed, "customer is back", "")

	// T-1241: escalated, then handed back to the same queue.
	d.session(12*time.Minute, 2, ticket("T-1241", "Restore access for account C-41241 after losing the 2FA phone", map[string]any{
		"customer_id": "C-41241", "email": "t.silva@example.com"}, "never disable 2FA without an identity check")).
		delegate("accounts", "verify-identity", "Verify identity with the documented recovery codes.", delegation{}).
		claim("accounts-worker-1").
		result(models.ResultInput{ResultType: models.ResultEscalated, NextStep: "reset-2fa",
			Evidence: []models.Evidence{ev("customer supplied 1 of 2 recovery codes", "accounts-db:recovery/C-41241")},
			Question: "One recovery code is enough under the new policy?"}).
		takeClaim().
		handBack("Yes: one code plus the e-mail link is enough since policy v7.")

	// T-1243: escalated, then resumed with new instructions.
	d.session(8*time.Minute, 2, ticket("T-1243", "Dispute: annual plan renewal charge 1243 (199 EUR)", map[string]any{
		"invoice_id": "INV-2026-1243", "amount": "199.00 EUR"})).
		delegate("billing", "review-dispute", "Check whether the plan was cancelled before renewal.", delegation{}).
		claim("billing-worker-2").
		result(models.ResultInput{ResultType: models.ResultEscalated, NextStep: "issue-credit-note",
			Evidence: []models.Evidence{ev("cancellation request logged 1 day after renewal", "crm:case/1243")},
			Question: "Grant a goodwill credit even though cancellation came a day late?"}).
		takeClaim().
		resume(models.ResumeInput{Queue: "billing", Step: "issue-credit-note",
			Instructions: "Goodwill: credit 199.00 EUR in full; one day late is within our grace period.",
			Facts:        map[string]any{"approved_amount": "199.00 EUR"}})

	// T-1245: just created.
	d.session(5*time.Minute, 5, ticket("T-1245", "Send an English copy of invoice 1245", map[string]any{
		"invoice_id": "INV-2026-1245", "language": "en"}))

	// T-1250: a fan-out waiting for its children.
	d.session(4*time.Minute, 2, ticket("T-1250", "Customer C-91250 moves abroad: close the account, settle the final invoice, refund the balance", map[string]any{
		"customer_id": "C-91250", "balance": "37.50 EUR"})).
		spawn(models.SpawnInput{
			Join: models.JoinInput{Policy: models.JoinAll, TimeoutSeconds: ptr(models.MaxJoinTimeoutSeconds)},
			Children: []models.ChildInput{
				{Goal: "Close account C-91250 after the final invoice", Queue: "accounts", Step: "close-account",
					Instructions: "Close the account once billing confirms the final invoice."},
				{Goal: "Issue the final invoice for account C-91250", Queue: "billing", Step: "final-invoice",
					Instructions: "Invoice usage up to today; no cancellation fee."},
				{Goal: "Refund the remaining balance of 37.50 EUR for account C-91250", Queue: "refunds", Step: "refund-balance",
					Instructions: "Refund the prepaid balance to the last card.", Facts: map[string]any{"amount": "37.50 EUR"}},
			},
		})
}

func ptr[T any](v T) *T { return &v }

// reviewScore is one review the demo reviewer gives, in the queue's order.
type reviewScore struct {
	goal, state, evidence, risks, next int
	comment                            string
}

// reviewScores are the demo reviews: mostly good packages, with the usual
// weak spots (risks left implicit, thin evidence).
var reviewScores = []reviewScore{
	{5, 5, 4, 4, 5, "Clear question, the order and payment checked; the carrier claim risk was worth naming."},
	{4, 5, 3, 2, 4, "Only the return parcel as evidence; the condition of the boots was not shown."},
	{5, 4, 4, 3, 3, "Policy reference was right, but the package did not suggest what to offer instead."},
	{3, 4, 2, 3, 4, "The customer's claim of a cancellation had no source; the agent had to ask."},
	{4, 3, 4, 4, 5, "Stock status was a day old by the time the agent looked."},
	{4, 4, 4, 4, 4, ""},
}

// review has the demo reviewer take the next items of the review queue and
// score them, a few minutes each, until the scores or the queue run out. An
// item that needs a second reviewer (ReviewPolicy.DoubleShare) keeps waiting
// for one after the demo reviewer's score.
func (d *seeder) review(scores []reviewScore) {
	for _, sc := range scores {
		if d.err != nil {
			return
		}
		k, ok, err := d.s.ClaimNextReview(d.ctx, d.reviewer, d.s.Reviews)
		if err != nil {
			d.fail("review: claim next", err)
			return
		}
		if !ok {
			return
		}
		d.wait(4 * time.Minute)
		_, err = d.s.ScoreReview(d.ctx, d.reviewer, "", models.ScoreInput{Key: k, Comment: sc.comment, Scores: map[string]int{
			models.CriterionGoalClear: sc.goal, models.CriterionStateCurrent: sc.state,
			models.CriterionEvidenceSufficient: sc.evidence, models.CriterionRisksExplicit: sc.risks,
			models.CriterionNextStepActionable: sc.next,
		}})
		d.fail("review: score "+k.SessionID, err)
		d.wait(time.Minute)
	}
}

// legacyPassword is the fixed password that releases before random demo
// passwords gave both demo users, and that their README published. It is
// kept only to find accounts that still have it (RetireLegacyAccounts).
const legacyPassword = "demo-password-1"

// RetireLegacyAccounts finds demo users that still have the published
// password of earlier releases, on any database, gives each a new random
// password that nobody is shown and disables it, through the admin
// functions as op, so that the admin log says what happened. An admin who
// wants such a user back enables it and resets its password in the console.
// It returns the emails retired.
func RetireLegacyAccounts(ctx context.Context, s *models.Store, op models.User) ([]string, error) {
	var retired []string
	for _, email := range []string{AgentEmail, ReviewerEmail} {
		u, err := s.FindUser(ctx, email)
		if models.ErrorCode(err) == models.ENOTFOUND {
			continue
		}
		if err != nil {
			return retired, fmt.Errorf("demo: %w", err)
		}
		if !models.PasswordMatches(u, legacyPassword) {
			continue
		}
		if _, _, err := s.ResetPassword(ctx, op, u.ID); err != nil {
			return retired, fmt.Errorf("demo: retire %s: %w", email, err)
		}
		if !u.Disabled {
			if _, err := s.SetUserDisabled(ctx, op, u.ID, true); err != nil {
				return retired, fmt.Errorf("demo: retire %s: %w", email, err)
			}
		}
		retired = append(retired, email)
	}
	return retired, nil
}
