package models_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
)

// testClock is a settable clock for Store.Now: tests move time with advance
// instead of sleeping.
type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func newTestClock(s *models.Store) *testClock {
	c := &testClock{t: time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)}
	s.Now = c.Now
	return c
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *testClock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// Expected results of a command in the property test.
const (
	kOK       = "ok"        // accepted: exactly one event, version + 1
	kNoEvent  = "no-event"  // accepted but writes no event (heartbeat, empty claim, nothing to rescue)
	kAudit    = "audit"     // accepted audit-only event: one event, next seq, same version (invariant 10)
	kConflict = "conflict"  // *ConflictError with the current version
	kIllegal  = "illegal"   // *IllegalTransitionError with the current version
	kForbid   = "forbidden" // ErrForbidden
	kLease    = "lease"     // *LeaseError
	kInvalid  = "invalid"   // *ValidationError
)

// propRun is one rapid check: one fresh session, driven by random commands,
// legal and not, against a store shared by all checks of the dialect.
type propRun struct {
	rt     *rapid.T
	s      *models.Store
	clock  *testClock
	users  []models.User
	sid    string
	queue  string
	leases []models.Lease
	// keyed are accepted commands sent with an idempotency key, for repeats.
	keyed []keyedCmd
	seen  *coverage
}

// coverage counts what the random commands reached, so that the test fails
// when it stops exploring (every status, every kind of answer).
type coverage struct {
	statuses map[models.Status]int
	answers  map[string]int
}

// coverageAnswers are the answers every run of the property must have seen.
var coverageAnswers = []string{kOK, kNoEvent, kAudit, kConflict, kIllegal, kForbid, kLease, kInvalid}

// complete says whether every status (but waiting_children, which needs a
// fan-out) and every answer was seen.
func (c *coverage) complete() bool {
	for _, st := range models.AllStatuses {
		if st != models.StatusWaitingChildren && c.statuses[st] == 0 {
			return false
		}
	}
	for _, k := range coverageAnswers {
		if c.answers[k] == 0 {
			return false
		}
	}
	return true
}

type keyedCmd struct {
	name  string
	first models.Outcome
	run   func() (models.Outcome, error)
}

var propSeq atomic.Int64

func (p *propRun) cur() models.State { return mustState(p.rt, p.s, p.sid) }

// version draws the expected version to send: usually the current one,
// sometimes an older or a newer one.
func (p *propRun) version(cur int64) (int64, bool) {
	switch rapid.IntRange(0, 9).Draw(p.rt, "version") {
	case 8:
		if cur > 1 {
			return cur - 1, true
		}
		return cur + 1, true
	case 9:
		return cur + 1, true
	}
	return cur, false
}

func (p *propRun) key() string {
	if rapid.IntRange(0, 2).Draw(p.rt, "keyed") == 0 {
		return fmt.Sprintf("pk-%d", propSeq.Add(1))
	}
	return ""
}

// exec runs one command and checks it against the expectation: a refused
// command writes nothing and says why with the right typed error; an
// accepted one appends exactly one event and bumps the version by one.
func (p *propRun) exec(name, want, key string, run func() (models.Outcome, error)) {
	rt := p.rt
	rt.Helper()
	cur := p.cur()
	before := snapshot(rt, p.s, p.sid)
	out, err := run()
	p.seen.answers[want]++
	switch want {
	case kOK:
		if err != nil {
			rt.Fatalf("%s from %s v%d: want success, got %T %v", name, cur.Status, cur.Version, err, err)
		}
		after := snapshot(rt, p.s, p.sid)
		if after.Events != before.Events+1 || after.Row.StateVersion != cur.Version+1 || out.StateVersion != cur.Version+1 {
			rt.Fatalf("%s: events %d→%d, version %d→%d (outcome %d)", name, before.Events, after.Events,
				cur.Version, after.Row.StateVersion, out.StateVersion)
		}
		if key != "" {
			p.keyed = append(p.keyed, keyedCmd{name: name, first: out, run: run})
		}
	case kAudit:
		if err != nil {
			rt.Fatalf("%s from %s v%d: want success, got %T %v", name, cur.Status, cur.Version, err, err)
		}
		after := snapshot(rt, p.s, p.sid)
		if after.Events != before.Events+1 || after.Row.LastSeq != before.Row.LastSeq+1 ||
			after.Row.StateVersion != cur.Version || out.StateVersion != cur.Version {
			rt.Fatalf("%s: events %d→%d, seq %d→%d, version %d→%d (outcome %d), want the version kept", name,
				before.Events, after.Events, before.Row.LastSeq, after.Row.LastSeq, cur.Version, after.Row.StateVersion, out.StateVersion)
		}
	case kNoEvent:
		if err != nil {
			rt.Fatalf("%s from %s: want success, got %v", name, cur.Status, err)
		}
		after := snapshot(rt, p.s, p.sid)
		if after.Events != before.Events || after.Row.State != before.Row.State || after.Row.LastHash != before.Row.LastHash {
			rt.Fatalf("%s wrote an event or changed the state", name)
		}
	default:
		p.wantErr(name, want, cur, err)
		assertUnchanged(rt, p.s, p.sid, before)
	}
}

func (p *propRun) wantErr(name, want string, cur models.State, err error) {
	rt := p.rt
	rt.Helper()
	if err == nil {
		rt.Fatalf("%s from %s v%d: want %s, got success", name, cur.Status, cur.Version, want)
	}
	code := models.ErrorCode(err)
	ok := false
	switch want {
	case kConflict:
		var ce *models.ConflictError
		ok = errors.As(err, &ce) && ce.CurrentVersion == cur.Version
	case kIllegal:
		var ie *models.IllegalTransitionError
		ok = errors.As(err, &ie) && ie.CurrentVersion == cur.Version && ie.From == cur.Status
	case kLease:
		var le *models.LeaseError
		ok = errors.As(err, &le) && le.CurrentVersion == cur.Version && code == models.ECONFLICT
	case kForbid:
		ok = errors.Is(err, models.ErrForbidden) && code == models.EFORBIDDEN
	case kInvalid:
		var ve *models.ValidationError
		ok = errors.As(err, &ve) && len(ve.Fields) > 0
	}
	if !ok {
		rt.Fatalf("%s from %s v%d: want %s, got %T (%s) %v", name, cur.Status, cur.Version, want, err, code, err)
	}
}

// check is the invariant after every step: the stored events replay with
// Apply to exactly the stored state, and Verify finds nothing wrong.
func (p *propRun) check() {
	rt := p.rt
	rt.Helper()
	ctx := context.Background()
	evs, err := p.s.ListEvents(ctx, p.sid, 0, 1000)
	if err != nil {
		rt.Fatalf("list events: %v", err)
	}
	st, err := models.Replay(evs)
	if err != nil {
		rt.Fatalf("replay: %v", err)
	}
	row, err := p.s.GetSession(ctx, p.sid)
	if err != nil {
		rt.Fatalf("get session: %v", err)
	}
	got, err := models.EncodeState(st)
	if err != nil {
		rt.Fatalf("canonical: %v", err)
	}
	p.seen.statuses[st.Status]++
	if string(got) != row.State {
		rt.Fatalf("replayed state differs from stored state\nreplay %s\nstored %s", got, row.State)
	}
	rep, err := p.s.Verify(ctx, models.VerifyOpts{SessionIDs: []string{p.sid}})
	if err != nil || !rep.OK() {
		rt.Fatalf("verify: %+v %v", rep.Problems, err)
	}
}

func (p *propRun) transition(et models.EventType) {
	cur := p.cur()
	v, stale := p.version(cur.Version)
	want := kOK
	switch {
	case stale:
		want = kConflict
	case !models.Allowed(cur.Status, et):
		want = kIllegal
	}
	key := p.key()
	in := models.TransitionInput{ExpectedVersion: &v, Reason: "property", Question: "What now?"}
	p.exec(string(et), want, key, func() (models.Outcome, error) {
		return p.s.Transition(context.Background(), p.sid, et, "prop:controller", key, in)
	})
}

func (p *propRun) delegate() {
	cur := p.cur()
	v, stale := p.version(cur.Version)
	want := kOK
	switch {
	case stale:
		want = kConflict
	case !models.Allowed(cur.Status, models.EventDelegationCreated):
		want = kIllegal
	}
	in := models.DelegateInput{
		Queue: p.queue, Step: rapid.SampledFrom([]string{"check", "refund", "notify"}).Draw(p.rt, "step"),
		Instructions: "do it", ExpectedVersion: &v,
		MaxAttempts:  storetest.Ptr(rapid.IntRange(1, 3).Draw(p.rt, "max_attempts")),
		LeaseSeconds: storetest.Ptr(rapid.SampledFrom([]int{5, 30, 60}).Draw(p.rt, "lease_seconds")),
	}
	key := p.key()
	p.exec("delegate", want, key, func() (models.Outcome, error) {
		return p.s.Delegate(context.Background(), p.sid, "prop:controller", key, in)
	})
}

func (p *propRun) claim() {
	ctx := context.Background()
	var avail int64
	if err := p.s.DB.Model(&models.Delegation{}).Where("session_id = ? AND status = 'queued' AND available_at <= ?",
		p.sid, models.NewUTCTime(p.clock.Now())).Count(&avail).Error; err != nil {
		p.rt.Fatalf("count available: %v", err)
	}
	want := kNoEvent
	if avail > 0 {
		want = kOK
	}
	var got *models.Lease
	p.exec("lease", want, "", func() (models.Outcome, error) {
		l, err := p.s.Claim(ctx, p.queue, "w-prop", "prop:worker", "")
		got = l
		return models.Outcome{StateVersion: p.cur().Version}, err
	})
	if (got != nil) != (avail > 0) {
		p.rt.Fatalf("claim returned %v with %d available", got, avail)
	}
	if got != nil {
		if got.SessionID != p.sid || got.Packet.BasedOnVersion != p.cur().Version {
			p.rt.Fatalf("lease = %+v", got)
		}
		p.leases = append(p.leases, *got)
	}
}

// pickLease draws the lease a worker writes with: the newest, an older one,
// or the newest one's delegation with a forged token.
func (p *propRun) pickLease() (models.Lease, bool) {
	if len(p.leases) == 0 {
		return models.Lease{}, false
	}
	l := p.leases[len(p.leases)-1]
	switch rapid.IntRange(0, 5).Draw(p.rt, "lease") {
	case 4:
		l = p.leases[rapid.IntRange(0, len(p.leases)-1).Draw(p.rt, "old lease")]
	case 5:
		l.LeaseToken = "lt_forged"
	}
	return l, true
}

// leaseHeld says whether l's token holds its delegation's lease right now.
func (p *propRun) leaseHeld(l models.Lease) bool {
	d, err := p.s.GetDelegation(context.Background(), l.DelegationID)
	if err != nil {
		p.rt.Fatalf("get delegation: %v", err)
	}
	return d.Status == models.DelegationLeased && d.LeaseToken != nil && *d.LeaseToken == l.LeaseToken &&
		d.LeaseExpiresAt.Valid && d.LeaseExpiresAt.Time.After(p.clock.Now())
}

func (p *propRun) heartbeat() {
	l, ok := p.pickLease()
	if !ok {
		return
	}
	want := kLease
	if p.leaseHeld(l) {
		want = kNoEvent
	}
	p.exec("heartbeat", want, "", func() (models.Outcome, error) {
		_, err := p.s.Heartbeat(context.Background(), l.DelegationID, l.LeaseToken)
		return models.Outcome{}, err
	})
}

// resultKinds are ordered with rapid's lean to the ends in mind; the ones
// leading to awaiting_input appear twice, as that status is otherwise rare.
var resultKinds = []string{
	"needs_input", "completed", "completed+next", "failed/bad_input", "rejected", "contract-violation",
	"needs_input", "failed/transient", "failed/permanent", "escalated", "failed/bad_input",
}

func (p *propRun) result() {
	l, ok := p.pickLease()
	if !ok {
		return
	}
	kind := rapid.SampledFrom(resultKinds).Draw(p.rt, "result")
	in := models.ResultInput{LeaseToken: l.LeaseToken, SessionID: p.sid, Step: l.Step,
		Evidence: []models.Evidence{{Claim: "checked", Source: "db"}}, Uncertainty: &models.Uncertainty{Level: 0.2}}
	switch kind {
	case "completed":
		in.ResultType = models.ResultCompleted
		in.Output = json.RawMessage(`{"ok":true}`)
	case "completed+next":
		in.ResultType, in.NextStep = models.ResultCompleted, "notify"
	case "needs_input":
		in.ResultType, in.Question = models.ResultNeedsInput, "Which card?"
	case "rejected":
		in.ResultType = models.ResultRejected
	case "escalated":
		in.ResultType, in.Question, in.NextStep, in.Risks = models.ResultEscalated, "Approve?", "refund", []string{"amount"}
	case "contract-violation":
		in.ResultType, in.Evidence = models.ResultCompleted, nil
	default:
		in.ResultType = models.ResultFailed
		in.Failure = &models.Failure{Class: strings.TrimPrefix(kind, "failed/"), Message: "boom"}
	}
	want := kOK
	switch {
	case kind == "contract-violation":
		want = kInvalid
	case !p.leaseHeld(l):
		want = kLease
	}
	key := p.key()
	p.exec("result "+kind, want, key, func() (models.Outcome, error) {
		return p.s.SubmitResult(context.Background(), l.DelegationID, "prop:worker", key, in)
	})
}

// rescue moves the clock and runs the rescuer: the session gets a
// lease_expired event exactly when its lease ran out.
func (p *propRun) rescue() {
	p.clock.advance(time.Duration(rapid.IntRange(0, 90).Draw(p.rt, "seconds")) * time.Second)
	var due int64
	if err := p.s.DB.Model(&models.Delegation{}).Where("session_id = ? AND status = 'leased' AND lease_expires_at < ?",
		p.sid, models.NewUTCTime(p.clock.Now())).Count(&due).Error; err != nil {
		p.rt.Fatalf("count due: %v", err)
	}
	want := kNoEvent
	if due > 0 {
		want = kOK
	}
	p.exec("rescue", want, "", func() (models.Outcome, error) {
		_, err := p.s.RescueExpired(context.Background(), 1000)
		return models.Outcome{StateVersion: p.cur().Version}, err
	})
}

// takeover runs one human action as a random user (two agents, one admin);
// action "" draws one.
func (p *propRun) takeover(action string) {
	ctx := context.Background()
	cur := p.cur()
	u := rapid.SampledFrom(p.users).Draw(p.rt, "user")
	if action == "" {
		action = rapid.SampledFrom([]string{"claim", "release", "force-release", "note", "note-invalid",
			"request-input", "resume", "hand-back", "complete", "reject", "resolve-risk"}).Draw(p.rt, "action")
	}
	v, stale := p.version(cur.Version)
	key := p.key()
	var (
		et        models.EventType
		run       func() (models.Outcome, error)
		backQueue string
	)
	switch action {
	case "claim":
		et = models.EventHumanClaimed
		run = func() (models.Outcome, error) {
			return p.s.ClaimEscalation(ctx, p.sid, u, key, models.ClaimInput{ExpectedVersion: &v})
		}
	case "release":
		et = models.EventHumanReleased
		run = func() (models.Outcome, error) {
			return p.s.Release(ctx, p.sid, u, key, models.ReleaseInput{ExpectedVersion: &v})
		}
	case "force-release":
		et = models.EventHumanReleased
		run = func() (models.Outcome, error) {
			return p.s.ForceRelease(ctx, p.sid, u, key, models.ReleaseInput{ExpectedVersion: &v, Reason: "stuck"})
		}
	case "note", "note-invalid":
		et = models.EventHumanNoted
		in := models.NoteInput{ExpectedVersion: &v, Text: "called the customer", EvidenceClaim: "phone log", EvidenceSource: "crm"}
		if action == "note-invalid" {
			in.Text = ""
		}
		run = func() (models.Outcome, error) { return p.s.AddNote(ctx, p.sid, u, key, in) }
	case "resolve-risk":
		et = models.EventRiskResolved
		risk := "not a risk of this session"
		if len(cur.Risks) > 0 && rapid.Bool().Draw(p.rt, "open risk") {
			risk = cur.Risks[0]
		}
		run = func() (models.Outcome, error) {
			return p.s.ResolveRisk(ctx, p.sid, u, key, models.ResolveRiskInput{Risk: risk})
		}
		want := kOK
		switch {
		case cur.Status.Terminal():
			want = kIllegal
		case !slices.Contains(cur.Risks, risk):
			// Resolving names no version and no holder: only an open risk.
			want = kInvalid
		}
		p.exec(action, want, key, run)
		return
	case "request-input":
		et = models.EventHumanRequestedInput
		run = func() (models.Outcome, error) {
			return p.s.RequestInput(ctx, p.sid, u, key, models.RequestInputInput{ExpectedVersion: &v, Question: "IBAN?"})
		}
	case "resume":
		et = models.EventHumanResumed
		run = func() (models.Outcome, error) {
			return p.s.ResumeAutomation(ctx, p.sid, u, key, models.ResumeInput{ExpectedVersion: &v, Queue: p.queue,
				Step: "refund", Instructions: "approved", Facts: map[string]any{"approved": true}, LeaseSeconds: storetest.Ptr(30)})
		}
	case "hand-back":
		et = models.EventHumanHandedBack
		in := models.HandBackInput{ExpectedVersion: &v}
		if rapid.Bool().Draw(p.rt, "pick queue") {
			in.Queue = p.queue
		}
		backQueue = in.Queue
		run = func() (models.Outcome, error) { return p.s.HandBack(ctx, p.sid, u, key, in) }
	case "complete":
		et = models.EventHumanCompleted
		run = func() (models.Outcome, error) {
			return p.s.CompleteHuman(ctx, p.sid, u, key, models.CompleteInput{ExpectedVersion: &v, Resolution: "done"})
		}
	case "reject":
		et = models.EventHumanRejected
		run = func() (models.Outcome, error) {
			return p.s.RejectHuman(ctx, p.sid, u, key, models.RejectInput{ExpectedVersion: &v, Reason: "no"})
		}
	}
	holderOrAdmin := cur.Assignee == u.Actor() || u.Role == models.RoleAdmin
	want := kOK
	switch {
	case action == "force-release" && u.Role != models.RoleAdmin:
		want = kForbid
	case action == "note-invalid":
		want = kInvalid
	case action == "note":
		// Notes never conflict, are taken from any agent, holder or not,
		// and in every status.
		want = kOK
	case stale:
		want = kConflict
	case action != "claim" && cur.Status == models.StatusHumanActive && !holderOrAdmin:
		want = kForbid
	case action == "hand-back" && cur.Status == models.StatusHumanActive && !canHandBack(cur, backQueue):
		want = kInvalid
	case !models.Allowed(cur.Status, et):
		want = kIllegal
	}
	p.exec(action, want, key, run)
}

// canHandBack mirrors HandBack's rule: queue and step come from the
// escalated delegation, or else the queue from the form and the step from
// the state.
func canHandBack(cur models.State, queue string) bool {
	if cur.Escalation != nil && cur.Escalation.DelegationID != "" {
		return true
	}
	step := cur.CurrentStep
	if cur.Escalation != nil && cur.Escalation.Step != "" {
		step = cur.Escalation.Step
	}
	return queue != "" && step != ""
}

func (p *propRun) provideInput() {
	cur := p.cur()
	v, stale := p.version(cur.Version)
	want := kOK
	switch {
	case stale:
		want = kConflict
	case !models.Allowed(cur.Status, models.EventInputProvided):
		want = kIllegal
	}
	key := p.key()
	in := models.InputInput{ExpectedVersion: &v, Answer: "Visa ending 4242", Facts: map[string]any{"card": "visa"}}
	p.exec("provide input", want, key, func() (models.Outcome, error) {
		return p.s.ProvideInput(context.Background(), p.sid, "prop:controller", key, in)
	})
}

// natural runs a command that fits the session's status (it may still be
// refused: a stale version, another user's claim, a forged lease token).
func (p *propRun) natural() {
	cur := p.cur()
	pick := func(fs ...func()) { fs[rapid.IntRange(0, len(fs)-1).Draw(p.rt, "natural")]() }
	tk := func(actions ...string) func() {
		return func() { p.takeover(rapid.SampledFrom(actions).Draw(p.rt, "human action")) }
	}
	tr := func(et models.EventType) func() { return func() { p.transition(et) } }
	switch cur.Status {
	case models.StatusOpen:
		pick(p.delegate, p.delegate, p.delegate, tr(models.EventSessionPaused), tr(models.EventSessionEscalated))
	case models.StatusQueued:
		pick(p.claim, p.claim, p.claim, p.rescue, tr(models.EventSessionPaused))
	case models.StatusRunning:
		pick(p.result, p.result, p.result, p.heartbeat, p.rescue, tr(models.EventSessionPaused), p.repeat)
	case models.StatusAwaitingInput:
		pick(p.provideInput, p.delegate)
	case models.StatusPaused:
		pick(tr(models.EventSessionResumed))
	case models.StatusEscalated:
		pick(tk("claim"), tk("claim", "note", "resolve-risk"), p.slaMarker)
	case models.StatusHumanActive:
		pick(tk("release", "force-release", "note", "note-invalid"), tk("request-input", "resume", "hand-back"),
			tk("complete", "reject"), tk("claim"), p.slaMarker)
	default:
		pick(p.repeat, tr(models.EventSessionCancelled), p.result)
	}
}

// slaMarker appends an SLA breach marker, an audit-only event: it takes the
// next seq but keeps the version, so the expected version the next command
// draws from the current one is still current (invariant 10).
func (p *propRun) slaMarker() {
	cur := p.cur()
	want := kIllegal
	if models.Allowed(cur.Status, models.EventEscalationSLABreached) {
		want = kAudit
	}
	p.exec("sla-marker", want, "", func() (models.Outcome, error) {
		return p.s.Execute(context.Background(), models.Command{
			SessionID: p.sid, Type: models.EventEscalationSLABreached, Actor: models.SLAActor,
			Payload: models.SLABreachPayload{Priority: cur.Priority, Status: cur.Status},
		})
	})
}

// repeat sends an accepted keyed command again: it must answer the first
// outcome, marked as replayed, and write nothing.
func (p *propRun) repeat() {
	if len(p.keyed) == 0 {
		return
	}
	k := rapid.SampledFrom(p.keyed).Draw(p.rt, "repeat")
	before := snapshot(p.rt, p.s, p.sid)
	out, err := k.run()
	if err != nil || !out.Replayed || out.EventID != k.first.EventID || out.StateVersion != k.first.StateVersion ||
		string(out.Data) != string(k.first.Data) {
		p.rt.Fatalf("repeat of %s = %+v, %v; first %+v", k.name, out, err, k.first)
	}
	assertUnchanged(p.rt, p.s, p.sid, before)
}

// TestPropertyCommands drives sessions with random sequences of legal and
// illegal commands on both dialects and checks after every step that
// refused commands wrote nothing, that the log replays to the stored state
// and that Verify is clean.
func TestPropertyCommands(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		clock := newTestClock(s)
		users := []models.User{
			mustUser(t, s, "ann@example.com", models.RoleAgent),
			mustUser(t, s, "bob@example.com", models.RoleAgent),
			mustUser(t, s, "root@example.com", models.RoleAdmin),
		}
		seen := &coverage{statuses: map[models.Status]int{}, answers: map[string]int{}}
		// rapid leans its draws, so a round of 100 sequences misses a status
		// now and then (CI once saw a round in which no session completed;
		// completions per round range from under 10 to over 90). Up to three
		// rounds run until every status and answer was seen; a generator
		// that really stopped exploring still fails.
		// Under -short (the race run) rapid draws 20 sequences a round, not
		// 100, so up to five times as many rounds may run.
		rounds := 3
		if testing.Short() {
			rounds = 15
		}
		for round := 0; round < rounds && (round == 0 || !seen.complete()); round++ {
			propertyRound(t, s, clock, users, seen)
		}
		t.Logf("statuses reached: %v; answers: %v", seen.statuses, seen.answers)
		for _, st := range models.AllStatuses {
			if st != models.StatusWaitingChildren && seen.statuses[st] == 0 {
				t.Errorf("no random sequence reached %s: the generator stopped exploring", st)
			}
		}
		for _, k := range coverageAnswers {
			if seen.answers[k] == 0 {
				t.Errorf("no command was answered %s: the generator stopped exploring", k)
			}
		}
		rep, err := s.Verify(ctx, models.VerifyOpts{})
		if err != nil || !rep.OK() {
			t.Fatalf("verify all = %+v, %v", rep.Problems, err)
		}
	})
}

// propertyRound checks one round of random command sequences (rapid's
// default count), adding what they reached to seen.
func propertyRound(t *testing.T, s *models.Store, clock *testClock, users []models.User, seen *coverage) {
	ctx := context.Background()
	rapid.Check(t, func(rt *rapid.T) {
		out, err := s.CreateSession(ctx, "prop:controller", "", models.CreateSessionInput{Goal: "Refund order 1182", TicketRef: "T-1182"})
		if err != nil {
			rt.Fatalf("create: %v", err)
		}
		p := &propRun{rt: rt, s: s, clock: clock, users: users, sid: out.SessionID,
			queue: "pq-" + strings.ToLower(out.SessionID[len(out.SessionID)-12:]), seen: seen}
		all := map[string]func(){
			"lease":     p.claim,
			"result":    p.result,
			"delegate":  p.delegate,
			"takeover":  func() { p.takeover("") },
			"escalate":  func() { p.transition(models.EventSessionEscalated) },
			"cancel":    func() { p.transition(models.EventSessionCancelled) },
			"input":     p.provideInput,
			"rescue":    p.rescue,
			"heartbeat": p.heartbeat,
			"resume":    func() { p.transition(models.EventSessionResumed) },
			"pause":     func() { p.transition(models.EventSessionPaused) },
			"repeat":    p.repeat,
			"sla-mark":  p.slaMarker,
		}
		names := make([]string, 0, len(all))
		for n := range all {
			names = append(names, n)
		}
		sort.Strings(names)
		steps := rapid.IntRange(1, 15).Draw(rt, "steps")
		for range steps {
			// Most steps follow the session's natural path so that
			// sequences get deep; the rest are any command at all,
			// which from most states is illegal, stale or fenced.
			if rapid.IntRange(0, 3).Draw(rt, "wander") == 3 {
				all[rapid.SampledFrom(names).Draw(rt, "any command")]()
			} else {
				p.natural()
			}
			p.check()
		}
	})
}
