package main

// bench seed: a large, realistic database built through the real write path,
// for the storage and idle benchmarks (README, "Benchmarks").

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/taskpilots/handoff/models"
)

type seedOpts struct {
	databaseURL string
	sessions    int64
	events      int64
	workers     int
	conns       int
	seed        uint64
	json        bool
	progress    time.Duration
}

func seedFlags(env *cliEnv, args []string) (seedOpts, error) {
	fs := newFlagSet(env, "bench seed")
	var o seedOpts
	dbURL := databaseFlag(env, fs)
	fs.Int64Var(&o.sessions, "sessions", 1000, "sessions to create")
	fs.Int64Var(&o.events, "events", 10000, "events to write in all (at least one per session; the average history is events/sessions, a few are much longer)")
	fs.IntVar(&o.workers, "workers", 0, "concurrent writers (default 8 on PostgreSQL, 1 on SQLite, whose single connection serialises writers)")
	fs.IntVar(&o.conns, "conns", 10, "database connections (PostgreSQL): with more --workers than connections, each session's writes are spread out among the others', as live traffic spreads them, instead of coming back to back")
	fs.Uint64Var(&o.seed, "seed", 1, "random seed: the same seed gives the same mix of stories")
	fs.BoolVar(&o.json, "json", false, "end the output with one line of JSON")
	fs.DurationVar(&o.progress, "progress", 2*time.Second, "how often to print progress to stderr (0: never)")
	fs.Usage = func() {
		fmt.Fprintln(env.stderr, "usage: taskpilots bench seed --database-url URL --sessions N --events M [--workers W]\n\n"+
			"Migrates the database and adds N sessions with M events in all, every one\n"+
			"written by the product's own commands (create, delegate, lease, result,\n"+
			"escalation takeover, notes, input requests, pauses, cancellations, review\n"+
			"scores), so the database verifies clean. The mix of final statuses and the\n"+
			"long tail of history lengths are those of a busy support deployment.\n\nflags:")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args); err != nil {
		return o, err
	}
	o.databaseURL = *dbURL
	switch {
	case o.sessions < 1:
		return o, usageErr("--sessions must be at least 1")
	case o.events < o.sessions:
		return o, usageErr("--events must be at least --sessions (%d): every session has its creation event", o.sessions)
	case o.workers < 0:
		return o, usageErr("--workers must not be negative")
	case o.conns < 2:
		return o, usageErr("--conns must be at least 2")
	}
	return o, nil
}

// seedKind is the story a session is given: where it ends up.
type seedKind int

const (
	kindCompleted     seedKind = iota // automation did every step
	kindDecided                       // escalated, a human took it over and decided; reviewers scored it
	kindEscalated                     // escalated, waiting in the inbox
	kindHumanActive                   // escalated and taken over, still in hand
	kindAwaitingInput                 // the human asked the controller a question
	kindQueued                        // a delegation waits in a backlog queue
	kindPaused                        // paused with its delegation held
	kindCancelled                     // the controller gave up
	kindRunning                       // a worker holds the lease
	kindOpen                          // open: its next step has no route (stalled)
	nKinds
)

var kindNames = [nKinds]string{"completed", "decided", "escalated", "human_active", "awaiting_input", "queued", "paused", "cancelled", "running", "open"}

// kindWeights is the share of each story, in percent. Running sessions are
// few: their leases expire an hour after the seed and the maintenance pass
// then has work.
var kindWeights = [nKinds]int{46, 12, 6, 3, 4, 8, 4, 8, 1, 8}

// kindTail is how many events a story writes after its automation cycles
// (review scores not counted: they are written when the budget allows).
var kindTail = [nKinds]int64{3, 6, 3, 4, 5, 1, 2, 2, 2, 0}

func pickKind(r *rand.Rand) seedKind {
	n := r.IntN(100)
	for k, w := range kindWeights {
		if n < w {
			return seedKind(k)
		}
		n -= w
	}
	return kindCompleted
}

// seedBudget hands out event budgets so that the totals come out exact
// however the workers interleave: a session may take what is left minus one
// event for each session still to come.
type seedBudget struct {
	mu           sync.Mutex
	events, left int64 // events not yet given out; sessions not yet started
	next         int64
}

// take returns the next session's index and event budget, at least least
// events when what is left allows; ok is false when every session was given
// out.
func (b *seedBudget) take(r *rand.Rand, least int64) (i, budget int64, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.left == 0 {
		return 0, 0, false
	}
	// Above its kind's minimum, a history is exponentially distributed
	// around what keeps the average on target, and one session in 2,000
	// gets fifty times as much: most tickets are short, a few drag on for
	// weeks.
	extra := float64(b.events)/float64(b.left) - float64(meanLeast)
	f := r.ExpFloat64()
	if r.IntN(2000) == 0 {
		f = 50
	}
	want := least + int64(math.Round(max(extra, 0)*min(f, 100)))
	budget = min(max(want, 1), b.events-(b.left-1))
	if b.left == 1 {
		budget = b.events
	}
	b.events -= budget
	b.left--
	i = b.next
	b.next++
	return i, budget, true
}

// meanLeast is the average of a story's minimum length (its creation and
// its tail) over the kind weights, rounded.
var meanLeast = func() int64 {
	var sum int
	for k, w := range kindWeights {
		sum += w * int(1+kindTail[k])
	}
	return int64(math.Round(float64(sum) / 100))
}()

// seedRun is one seed: its actors and counters.
type seedRun struct {
	s         *models.Store
	run       string
	agent     models.User
	reviewers []models.User
	events    atomic.Int64
	sessions  atomic.Int64
	kinds     [nKinds]atomic.Int64
	reviews   atomic.Int64
}

const seedController = "token:seed-controller"

// seedReport is the summary; its JSON is the --json line.
type seedReport struct {
	Dialect      string           `json:"dialect"`
	Run          string           `json:"run"`
	Sessions     int64            `json:"sessions"`
	Events       int64            `json:"events"`
	Reviews      int64            `json:"review_scores"`
	Kinds        map[string]int64 `json:"stories"`
	Workers      int              `json:"workers"`
	ElapsedS     float64          `json:"elapsed_s"`
	EventsPerSec float64          `json:"events_per_sec"`
}

func runBenchSeed(ctx context.Context, env *cliEnv, args []string) error {
	o, err := seedFlags(env, args)
	if err != nil {
		return err
	}
	quiet := slog.New(slog.NewTextHandler(env.stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	workers := o.workers
	s, err := models.Open(ctx, asyncCommits(o.databaseURL), models.OpenOpts{Logger: quiet, WantConns: o.conns})
	if err != nil {
		return err
	}
	defer s.Close()
	if _, err := s.MigrateUp(ctx); err != nil {
		return schemaError(err)
	}
	if workers == 0 {
		workers = 8
		if s.Dialect == models.SQLite {
			workers = 1
		}
	}
	rep, err := seedDatabase(ctx, s, o, workers, env.stderr)
	if err != nil {
		return err
	}
	fmt.Fprintf(env.stdout, "seeded %d sessions, %d events (%d review scores) on %s in %.1f s (%.0f events/s, %d workers)\n",
		rep.Sessions, rep.Events, rep.Reviews, rep.Dialect, rep.ElapsedS, rep.EventsPerSec, rep.Workers)
	for k := range nKinds {
		fmt.Fprintf(env.stdout, "  %-15s %d\n", kindNames[k], rep.Kinds[kindNames[k]])
	}
	if o.json {
		b, _ := json.Marshal(rep)
		fmt.Fprintln(env.stdout, string(b))
	}
	return nil
}

// seedDatabase writes the sessions with workers concurrent writers, printing
// progress to progress every o.progress.
func seedDatabase(ctx context.Context, s *models.Store, o seedOpts, workers int, progress io.Writer) (seedReport, error) {
	run := strings.ToLower(strings.NewReplacer("_", "x", "-", "x").Replace(models.RandomSecret(6)))
	sr := &seedRun{s: s, run: run}
	var err error
	if sr.agent, err = seedUser(ctx, s, "agent", run, models.RoleAgent); err != nil {
		return seedReport{}, err
	}
	for i := range 2 {
		u, err := seedUser(ctx, s, fmt.Sprintf("reviewer%d", i+1), run, models.RoleReviewer)
		if err != nil {
			return seedReport{}, err
		}
		sr.reviewers = append(sr.reviewers, u)
	}
	budget := &seedBudget{events: o.events, left: o.sessions}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg       sync.WaitGroup
		errOnce  sync.Once
		firstErr error
	)
	start := time.Now()
	done := make(chan struct{})
	// The feed sequencer numbers the events as they are written, as a
	// server's does; left to the first server that starts on the seeded
	// database, a million events would be its start-up backlog.
	seqCtx, stopSeq := context.WithCancel(ctx)
	seqDone := make(chan struct{})
	go func() { defer close(seqDone); s.RunSequencer(seqCtx, time.Second) }()
	defer func() { stopSeq(); <-seqDone }()
	if o.progress > 0 {
		go func() {
			t := time.NewTicker(o.progress)
			defer t.Stop()
			for {
				select {
				case <-done:
					return
				case <-t.C:
					ev, el := sr.events.Load(), time.Since(start).Seconds()
					rate := float64(ev) / el
					eta := time.Duration(float64(o.events-ev)/max(rate, 1)) * time.Second
					fmt.Fprintf(progress, "seed: %d/%d sessions, %d/%d events, %.0f events/s, about %s left\n",
						sr.sessions.Load(), o.sessions, ev, o.events, rate, eta.Round(time.Second))
				}
			}
		}()
	}
	for w := range workers {
		// Each worker has its own random stream and its own queues, so that
		// its claims pick up exactly the delegation it just made.
		r := rand.New(rand.NewPCG(o.seed, uint64(w)))
		wg.Go(func() {
			for ctx.Err() == nil {
				kind := pickKind(r)
				i, n, ok := budget.take(r, 1+kindTail[kind])
				if !ok {
					return
				}
				if err := sr.story(ctx, r, kind, w, i, n); err != nil {
					errOnce.Do(func() { firstErr = err; cancel() })
					return
				}
			}
		})
	}
	wg.Wait()
	close(done)
	if firstErr != nil {
		return seedReport{}, fmt.Errorf("seed: %w", firstErr)
	}
	if err := ctx.Err(); err != nil {
		return seedReport{}, err
	}
	for {
		n, err := s.SequenceFeed(ctx)
		if err != nil {
			return seedReport{}, fmt.Errorf("seed: %w", err)
		}
		if n == 0 {
			break
		}
	}
	el := time.Since(start).Seconds()
	rep := seedReport{Dialect: string(s.Dialect), Run: run, Sessions: sr.sessions.Load(), Events: sr.events.Load(),
		Reviews: sr.reviews.Load(), Workers: workers, ElapsedS: round3(el), Kinds: map[string]int64{}}
	rep.EventsPerSec = round3(float64(rep.Events) / el)
	for k := range nKinds {
		rep.Kinds[kindNames[k]] = sr.kinds[k].Load()
	}
	return rep, nil
}

// asyncCommits adds synchronous_commit=off to a PostgreSQL URL that does not
// set it: the seed's own connections then do not wait for each commit's WAL
// flush (a crash could lose the last few hundred milliseconds of the seed,
// never corrupt it), which is about a quarter faster on a busy machine.
// The server's configuration is not touched.
func asyncCommits(raw string) string {
	if d, _, err := models.ParseDatabaseURL(raw); err != nil || d != models.Postgres {
		return raw
	}
	u, err := url.Parse(raw)
	if err != nil {
		return raw
	}
	q := u.Query()
	if q.Has("synchronous_commit") {
		return raw
	}
	q.Set("synchronous_commit", "off")
	u.RawQuery = q.Encode()
	return u.String()
}

func seedUser(ctx context.Context, s *models.Store, name, run string, role models.Role) (models.User, error) {
	u, err := s.CreateUser(ctx, models.CreateUserInput{
		Email: fmt.Sprintf("seed-%s-%s@seed.example", name, run), Name: "Seed " + name,
		Role: role, Password: models.RandomSecret(15),
	})
	if err != nil {
		return models.User{}, fmt.Errorf("seed: create user %s: %w", name, err)
	}
	return u, nil
}

// seedStory writes one session's events and counts them.
type seedStory struct {
	sr     *seedRun
	ctx    context.Context
	r      *rand.Rand
	id     string
	v      int64
	queue  string
	lease  *models.Lease
	events int64
	step   int
}

func (st *seedStory) took(out models.Outcome, err error) error {
	if err != nil {
		return fmt.Errorf("session %s: %w", st.id, err)
	}
	st.v = out.StateVersion
	st.events++
	st.sr.events.Add(1)
	return nil
}

var seedQueues = []string{"refunds", "shipping", "billing", "accounts", "notifications"}

var seedGoals = []string{
	"Refund order %d: item arrived damaged",
	"Tell the customer where the parcel of order %d is",
	"Correct the invoice address of order %d",
	"Close the duplicate account of customer %d",
	"Explain the late delivery of order %d and offer a voucher",
	"Cancel subscription %d at the end of the billing period",
}

// story writes session i with exactly budget events: automation cycles
// (delegate, lease, completed result naming a next step) and then the tail
// of its kind, padded with controller notes.
func (sr *seedRun) story(ctx context.Context, r *rand.Rand, kind seedKind, worker int, i, budget int64) error {
	// Near the end the budget may not allow the kind's tail.
	if kindTail[kind] > budget-1 {
		kind = kindOpen
		if budget >= 2 {
			kind = kindQueued
		}
	}
	st := &seedStory{sr: sr, ctx: ctx, r: r}
	st.queue = fmt.Sprintf("%s.%s.w%d", seedQueues[int(i)%len(seedQueues)], sr.run, worker)
	s := sr.s
	prio := 1 + r.IntN(5)
	ref := 100000 + i
	out, err := s.CreateSession(ctx, seedController, "", models.CreateSessionInput{
		Goal:         fmt.Sprintf(seedGoals[int(i)%len(seedGoals)], ref),
		TicketRef:    fmt.Sprintf("T-%d", ref),
		Priority:     &prio,
		Constraints:  []string{"refunds over 200 EUR need a human", "never refund twice"},
		Resources:    []models.Resource{{Name: "helpdesk", URI: fmt.Sprintf("https://helpdesk.example.com/tickets/%d", ref)}, {Name: "orders-db", URI: "postgres://orders.internal/orders"}},
		DoneCriteria: []string{"the customer has a clear answer"},
		Facts:        map[string]any{"order_id": fmt.Sprint(ref), "order_total": fmt.Sprintf("%d.%02d EUR", 10+r.IntN(400), r.IntN(100))},
	})
	st.id = out.SessionID
	if err := st.took(out, err); err != nil {
		return err
	}
	sr.sessions.Add(1)
	sr.kinds[kind].Add(1)
	for cycles := (budget - 1 - kindTail[kind]) / 3; cycles > 0; cycles-- {
		if err := st.cycle(models.ResultCompleted, fmt.Sprintf("step-%d", st.step+1)); err != nil {
			return err
		}
	}
	if err := st.tail(kind, budget); err != nil {
		return err
	}
	for st.events < budget {
		v := st.v
		out, err := s.AddNoteAs(ctx, st.id, seedController, "", models.NoteRequest{
			Text: fmt.Sprintf("Customer called again (%d); told them we are on it.", st.events), ExpectedVersion: &v})
		if err := st.took(out, err); err != nil {
			return err
		}
	}
	return nil
}

// cycle delegates a step to the worker's queue, leases it and reports a
// result of type rt (naming next, an unrouted step, when completed).
func (st *seedStory) cycle(rt, next string) error {
	if err := st.delegate(st.queue, 0); err != nil {
		return err
	}
	if err := st.claim(); err != nil {
		return err
	}
	in := models.ResultInput{LeaseToken: st.lease.LeaseToken, SessionID: st.id, Step: st.lease.Step, ResultType: rt,
		Output:   json.RawMessage(fmt.Sprintf(`{"checked":true,"amount_eur":%d}`, 10+st.r.IntN(400))),
		Evidence: []models.Evidence{{Claim: "order paid by card", Source: "orders-db:" + st.id}}, NextStep: next}
	if rt == models.ResultEscalated {
		in.NextStep = "issue-refund"
		in.Risks = []string{"refund exceeds the automatic limit"}
		in.Uncertainty = &models.Uncertainty{Level: 0.2, Notes: "damage not confirmed by the carrier"}
		in.Question = "Approve the full refund to the original card?"
	}
	out, err := st.sr.s.SubmitResult(st.ctx, st.lease.DelegationID, "token:seed-worker", "", in)
	return st.took(out, err)
}

func (st *seedStory) delegate(queue string, leaseSeconds int) error {
	st.step++
	v := st.v
	in := models.DelegateInput{Queue: queue, Step: fmt.Sprintf("step-%d", st.step),
		Instructions: "Check the order against the policy and report what you did.", ExpectedVersion: &v}
	if leaseSeconds > 0 {
		in.LeaseSeconds = &leaseSeconds
	}
	out, err := st.sr.s.Delegate(st.ctx, st.id, seedController, "", in)
	return st.took(out, err)
}

func (st *seedStory) claim() error {
	l, err := st.sr.s.Claim(st.ctx, st.queue, "seed-worker", "token:seed-worker", "")
	switch {
	case err != nil:
		return fmt.Errorf("session %s: lease: %w", st.id, err)
	case l == nil || l.SessionID != st.id:
		// Only this worker claims from its queues, one delegation at a time.
		return fmt.Errorf("session %s: lease on %s returned %v", st.id, st.queue, l)
	}
	st.lease = l
	return st.took(models.Outcome{StateVersion: l.Packet.BasedOnVersion}, nil)
}

func (st *seedStory) tail(kind seedKind, budget int64) error {
	s, ctx, agent := st.sr.s, st.ctx, st.sr.agent
	ver := func() *int64 { v := st.v; return &v }
	backlog := fmt.Sprintf("backlog.%s", seedQueues[st.r.IntN(len(seedQueues))])
	switch kind {
	case kindCompleted:
		return st.cycle(models.ResultCompleted, "")
	case kindOpen:
		return nil
	case kindQueued:
		return st.delegate(backlog, 0)
	case kindPaused:
		if err := st.delegate(backlog, 0); err != nil {
			return err
		}
		return st.took(s.Transition(ctx, st.id, models.EventSessionPaused, seedController, "", models.TransitionInput{ExpectedVersion: ver(), Reason: "waiting for the warehouse"}))
	case kindCancelled:
		if err := st.delegate(backlog, 0); err != nil {
			return err
		}
		return st.took(s.Transition(ctx, st.id, models.EventSessionCancelled, seedController, "", models.TransitionInput{ExpectedVersion: ver(), Reason: "customer withdrew the request"}))
	case kindRunning:
		if err := st.delegate(st.queue, models.MaxLeaseSeconds); err != nil {
			return err
		}
		return st.claim()
	}
	// The escalation stories.
	if err := st.cycle(models.ResultEscalated, ""); err != nil {
		return err
	}
	if kind == kindEscalated {
		return nil
	}
	if err := st.took(s.ClaimEscalation(ctx, st.id, agent, "", models.ClaimInput{ExpectedVersion: ver()})); err != nil {
		return err
	}
	switch kind {
	case kindHumanActive:
		return nil
	case kindAwaitingInput:
		return st.took(s.RequestInput(ctx, st.id, agent, "", models.RequestInputInput{ExpectedVersion: ver(), Question: "Did the customer send a photo of the damage?"}))
	}
	if err := st.took(s.AddNote(ctx, st.id, agent, "", models.NoteInput{ExpectedVersion: ver(), Text: "Checked the order history; no earlier refund.",
		EvidenceClaim: "no refund on this order", EvidenceSource: "payments-api:refunds"})); err != nil {
		return err
	}
	if st.r.IntN(4) == 0 {
		err := st.took(s.RejectHuman(ctx, st.id, agent, "", models.RejectInput{ExpectedVersion: ver(), Reason: "outside the return window"}))
		if err != nil {
			return err
		}
	} else if err := st.took(s.CompleteHuman(ctx, st.id, agent, "", models.CompleteInput{ExpectedVersion: ver(), Resolution: "Approved and refunded by hand."})); err != nil {
		return err
	}
	// Two thirds of the decisions are reviewed, when the budget allows.
	if st.r.IntN(3) == 0 {
		return nil
	}
	// The decision queued the escalation's review item (one per session
	// here: each story escalates once).
	var items []struct {
		AtVersion int64
		Needed    int
	}
	if err := s.DB.WithContext(ctx).Raw(`SELECT at_version, needed FROM review_items WHERE session_id = ?`, st.id).
		Scan(&items).Error; err != nil || len(items) != 1 {
		return fmt.Errorf("session %s: review item: %v (%d rows)", st.id, err, len(items))
	}
	for _, u := range st.sr.reviewers[:min(items[0].Needed, len(st.sr.reviewers))] {
		if st.events >= budget {
			break
		}
		scores := map[string]int{}
		for _, c := range models.Rubric {
			scores[c.Key] = 3 + st.r.IntN(3)
		}
		out, err := s.ScoreReview(ctx, u, "", models.ScoreInput{Key: models.ReviewKey{SessionID: st.id, AtVersion: items[0].AtVersion}, Scores: scores, Comment: "Sound decision."})
		if err := st.took(out, err); err != nil {
			return err
		}
		st.sr.reviews.Add(1)
	}
	return nil
}
