package drill

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/taskpilots/handoff/client"
	"github.com/taskpilots/handoff/cmd/taskpilots/cliout"
	"github.com/taskpilots/handoff/models"
)

// drill is one recovery drill: its sessions, its simulated workers and
// humans, the faults it injects and everything it recorded about them.
type drill struct {
	env    *Env
	o      drillOpts
	suffix string
	queue  string
	seed   uint64
	start  time.Time

	storeMu sync.RWMutex
	st      *models.Store // nil when the drill has no database
	servers *serverSet    // nil against --url
	logDir  string
	api     *drillAPI
	hum     human // nil when no human can act
	ownTok  []string

	runsMu sync.Mutex
	runs   []*sessionRun
	byID   map[string]*sessionRun

	created atomic.Int64
	settled atomic.Int64
	rec     recorder
	deck    *faultDeck
	async   sync.WaitGroup

	chaosMu     sync.Mutex
	chaos       chaosReport
	chaosNow    atomic.Value // string: what the chaos loop is doing, for the progress line
	scenarioEnd time.Time
	stoppedCap  bool

	violMu     sync.Mutex
	violations []string
}

func newDrill(env *Env, o drillOpts) *drill {
	d := &drill{env: env, o: o, byID: map[string]*sessionRun{}, start: time.Now()}
	d.chaosNow.Store("")
	return d
}

// violation records something the product got wrong (or the drill could not
// do); any violation fails the drill.
func (d *drill) violation(format string, args ...any) {
	d.violMu.Lock()
	defer d.violMu.Unlock()
	d.violations = append(d.violations, fmt.Sprintf(format, args...))
}

// store returns the drill's database handle (replaced after a restart).
func (d *drill) store() *models.Store {
	d.storeMu.RLock()
	defer d.storeMu.RUnlock()
	return d.st
}

func (d *drill) openStore(ctx context.Context) (*models.Store, error) {
	return models.Open(ctx, d.o.databaseURL, models.OpenOpts{Logger: slog.New(slog.DiscardHandler), MaxOpenConns: 4})
}

// setup prepares the drill: database, tokens, console user and servers when
// the drill runs its own, the API clients, the human and the restart command.
func (d *drill) setup(ctx context.Context) error {
	d.suffix = strings.ToLower(strings.NewReplacer("-", "x", "_", "y").Replace(models.RandomSecret(6)))
	d.queue = "drill-" + d.suffix
	d.seed = d.o.seed
	if d.seed == 0 {
		d.seed = rand.Uint64()
	}
	d.deck = newFaultDeck(d.o, d.seed)
	if d.o.ownServers() || d.o.dbGiven {
		st, err := d.openStore(ctx)
		if err != nil {
			return err
		}
		d.st = st
	}
	ctrlTok, workTok := d.o.controllerToken, d.o.workerToken
	email, password := d.o.consoleUser, d.o.consolePassword
	var bases []string
	var user *models.User
	if d.o.ownServers() {
		st := d.st
		if _, err := st.MigrateUp(ctx); err != nil {
			return d.env.SchemaError(err)
		}
		var err error
		d.ownTok = []string{d.queue + "-controller", d.queue + "-worker"}
		// The drill's tokens and console user are made (and its tokens
		// revoked in close) like any CLI change, so that the admin log of
		// the database it ran against shows them.
		op := d.env.Operator
		if ctrlTok, _, err = st.AdminCreateToken(ctx, op, d.ownTok[0], models.RoleController); err != nil {
			return err
		}
		if workTok, _, err = st.AdminCreateToken(ctx, op, d.ownTok[1], models.RoleWorker); err != nil {
			return err
		}
		email, password = d.queue+"@drill.invalid", models.RandomSecret(18)
		u, _, err := st.AdminCreateUser(ctx, op, models.CreateUserInput{Email: email, Name: "Drill agent " + d.suffix, Role: models.RoleAgent, Password: password})
		if err != nil {
			return fmt.Errorf("create the drill's console user: %w", err)
		}
		user = &u
		if d.logDir, err = os.MkdirTemp("", "taskpilots-drill-"); err != nil {
			return err
		}
		d.servers = &serverSet{bin: drillBinary(), dbURL: d.o.databaseURL, sessionKey: models.RandomSecret(36), logDir: d.logDir}
		if err := d.servers.startAll(ctx, d.o.servers); err != nil {
			return err
		}
		bases = d.servers.urls()
	} else {
		bases = []string{strings.TrimSuffix(strings.TrimRight(d.o.url, "/"), "/api/v1")}
	}
	d.api = newDrillAPI(bases, ctrlTok, workTok, d.queue)

	// The tokens must work before anything is written.
	if _, err := d.api.session(ctx, "ses_drill_probe"); !client.IsNotFound(err) {
		if err == nil {
			err = errors.New("an unknown session was found")
		}
		return fmt.Errorf("the controller token does not work against %s: %w", bases[0], err)
	}

	mode := d.o.human
	if mode == "auto" {
		switch {
		case email != "":
			mode = "console"
		case d.st != nil:
			mode = "direct"
		default:
			mode = "none"
		}
	}
	switch mode {
	case "console":
		h, err := newConsoleHuman(email, password, d.api)
		if err != nil {
			return err
		}
		if err := h.login(ctx); err != nil {
			return err
		}
		d.hum = h
	case "direct":
		if user == nil {
			u, err := d.directUser(ctx, email)
			if err != nil {
				return err
			}
			user = &u
		}
		d.hum = &directHuman{store: d.store, user: *user, api: d.api}
	}
	d.chaos.Human = mode

	if d.o.restartDB {
		cmd := d.o.restartCmd
		if cmd == "" {
			var err error
			if cmd, err = restartCommand(ctx, d.st); err != nil {
				return err
			}
		}
		d.chaos.DBRestartCommand = cmd
	}
	return nil
}

// directUser finds the --console-user, or creates an agent for the drill,
// for the direct human.
func (d *drill) directUser(ctx context.Context, email string) (models.User, error) {
	if email != "" {
		var us []models.User
		if err := d.st.DB.WithContext(ctx).Where("email = ?", strings.ToLower(strings.TrimSpace(email))).Limit(1).Find(&us).Error; err != nil {
			return models.User{}, err
		}
		if len(us) == 0 {
			return models.User{}, fmt.Errorf("console user %s not found in the database", email)
		}
		return us[0], nil
	}
	return d.st.CreateUser(ctx, models.CreateUserInput{Email: d.queue + "@drill.invalid", Name: "Drill agent " + d.suffix,
		Role: models.RoleAgent, Password: models.RandomSecret(18)})
}

// stopServers stops the drill's own servers.
func (d *drill) stopServers() {
	if d.servers != nil {
		d.servers.stopAll()
	}
}

// dumpServerLogs shows the end of the servers' logs on standard error.
func (d *drill) dumpServerLogs() {
	if d.servers == nil {
		return
	}
	d.o.keepLogs = true
	fmt.Fprint(d.env.Stderr, d.servers.logTails(3000))
}

// close releases what setup made: servers, the drill's tokens, the store.
func (d *drill) close() {
	d.stopServers()
	if st := d.store(); st != nil {
		for _, name := range d.ownTok {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			if _, err := st.AdminRevokeToken(ctx, d.env.Operator, name); err != nil {
				d.env.Log.Warn("revoke the drill's token", "name", name, "err", err)
			}
			cancel()
		}
		st.Close()
	}
	switch {
	case d.logDir == "":
	case d.o.keepLogs:
		fmt.Fprintf(d.env.Stderr, "drill: the servers' logs are in %s\n", d.logDir)
	default:
		os.RemoveAll(d.logDir)
	}
}

// sessionPlan is what will happen to one session, decided up front from the
// seed.
type sessionPlan struct {
	// escalateStep (1-based; 0: never) is the step whose worker escalates to
	// a human once.
	escalateStep int
	// humanChoice is what the human does after claiming: hand_back,
	// complete or release (release, claim again, hand back).
	humanChoice string
	staleForm   bool // the human first posts a form rendered at an old version
	invalidForm bool // the human first posts an empty resolution
	// pauseStep (1-based; 0: never) is the step during whose first lease the
	// controller pauses and resumes the session.
	pauseStep    int
	staleVersion bool // before pausing, the controller sends a stale expected_version
}

// planFor decides session i's plan. The first sessions cover every enabled
// feature once, so that even a small drill exercises each of them.
func (d *drill) planFor(i int) sessionPlan {
	o := d.o
	r := rand.New(rand.NewPCG(d.seed, uint64(i)+1))
	choices := []string{"hand_back", "complete", "release"}
	p := sessionPlan{}
	escalate := r.Float64() < o.takeoverRate
	pause := r.Float64() < o.pauseRate
	// Coverage: sessions 0-2 escalate (one per human choice), session 3 pauses.
	switch {
	case i < 3 && o.takeoverRate > 0:
		escalate, p.humanChoice = true, choices[i]
	case i == 3 && o.pauseRate > 0:
		pause = true
	}
	if escalate {
		p.escalateStep = 1 + r.IntN(o.steps)
		if p.humanChoice == "" {
			p.humanChoice = choices[r.IntN(len(choices))]
		}
		p.staleForm = i == 0 && o.staleRate > 0 || r.Float64() < o.staleRate
		p.invalidForm = p.humanChoice == "complete" && (i == 1 && o.invalidRate > 0 || r.Float64() < o.invalidRate)
	}
	if pause {
		p.pauseStep = 1 + r.IntN(o.steps)
		p.staleVersion = i == 3 && o.staleRate > 0 || r.Float64() < 0.5
	}
	return p
}

// sessionRun is one session of the drill as its script sees it.
type sessionRun struct {
	idx  int
	id   string
	plan sessionPlan
	wake chan struct{}

	mu          sync.Mutex
	escalated   map[int]bool
	final       string
	waiting     bool
	done        bool
	err         error
	takeovers   []string
	pauseTaken  atomic.Bool
	invalidUsed int
}

// poke wakes the session's script to look at the session again.
func (r *sessionRun) poke() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

func (r *sessionRun) markEscalated(step int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.escalated[step] = true
}

func (r *sessionRun) hasEscalated(step int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.escalated[step]
}

func (d *drill) runFor(id string) *sessionRun {
	d.runsMu.Lock()
	defer d.runsMu.Unlock()
	return d.byID[id]
}

func (d *drill) allRuns() []*sessionRun {
	d.runsMu.Lock()
	defer d.runsMu.Unlock()
	return append([]*sessionRun(nil), d.runs...)
}

func stepName(i int) string { return fmt.Sprintf("step-%d", i) }

func stepIndex(name string) int {
	n, _ := strconv.Atoi(strings.TrimPrefix(name, "step-"))
	return n
}

// faultDeck decides the worker-side fault of each lease: none, crash,
// stale, invalid or duplicate. The first leases get each enabled fault once.
type faultDeck struct {
	mu     sync.Mutex
	r      *rand.Rand
	forced []string
	rates  []struct {
		kind string
		rate float64
	}
}

func newFaultDeck(o drillOpts, seed uint64) *faultDeck {
	f := &faultDeck{r: rand.New(rand.NewPCG(seed, 0x5eed))}
	for _, k := range []struct {
		kind string
		rate float64
	}{{"crash", o.crashRate}, {"duplicate", o.duplicateRate}, {"invalid", o.invalidRate}, {"stale", o.staleRate}} {
		if k.rate > 0 {
			f.forced = append(f.forced, k.kind)
			f.rates = append(f.rates, k)
		}
	}
	return f
}

func (f *faultDeck) next() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.forced) > 0 {
		k := f.forced[0]
		f.forced = f.forced[1:]
		return k
	}
	x := f.r.Float64()
	for _, k := range f.rates {
		if x < k.rate {
			return k.kind
		}
		x -= k.rate
	}
	return ""
}

// Expected outcomes of recorded writes.
const (
	wantOK        = "200"
	wantConflict  = "409"
	wantInvalid   = "422"
	wantSame      = "same response"
	wantRequeued  = "lease expired, re-queued"
	humanWantOK   = humanOK
	verdictMatch  = "matched"
	verdictLost   = "lease_lost"
	verdictWrong  = "mismatch"
	verdictCheck  = "pending"
	verdictNoTest = "skipped"
	gotAborted    = "aborted"
)

// expectation is one write whose outcome the drill predicted: every
// injected fault and every ordinary write of the scenario.
type expectation struct {
	Kind         string
	SessionID    string
	DelegationID string
	Attempt      int
	Worker       string
	// LeaseSeq names the delegation.leased event of the lease the write
	// was sent under: the version it moved the session to (the lease
	// packet's based_on_version). A lease is work, so no other event moved
	// the version there; it is the event's seq only while no audit-only
	// event was appended before it.
	LeaseSeq int64
	Expected string
	Got      string
	Detail   string
	// fencedOK: a 409 instead of the expected outcome is right when the
	// lease was lost first (expired during a database outage, revoked by a
	// pause); the end of the drill checks the event log for that.
	fencedOK bool
	verdict  string
}

// recorder collects expectations and counts injected faults.
type recorder struct {
	mu     sync.Mutex
	list   []*expectation
	faults map[string]int
}

func (r *recorder) fault(kind string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.faults == nil {
		r.faults = map[string]int{}
	}
	r.faults[kind]++
}

func (r *recorder) faultCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, v := range r.faults {
		n += v
	}
	return n
}

// add records e and judges it if it can be judged now.
func (r *recorder) add(e *expectation) {
	switch {
	case e.verdict != "":
	case e.Got == gotAborted:
		e.verdict = verdictNoTest // the drill was stopping
	case e.Got == e.Expected:
		e.verdict = verdictMatch
	case e.fencedOK && e.Got == wantConflict:
		e.verdict = verdictCheck
	default:
		e.verdict = verdictWrong
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.list = append(r.list, e)
}

// got is how an API answer is recorded: "200" for success, the status of an
// API error, or the error itself.
func got(err error) string {
	if err == nil {
		return wantOK
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return gotAborted
	}
	if s := client.StatusCode(err); s != 0 {
		return strconv.Itoa(s)
	}
	return "error: " + err.Error()
}

// runScenario drives every session to an end with workers, humans and the
// chaos loop, within --duration.
func (d *drill) runScenario(ctx context.Context) {
	sctx, stop := context.WithTimeout(ctx, d.o.duration)
	defer stop()
	wctx, stopWorkers := context.WithCancel(ctx)
	defer stopWorkers()

	progressDone := make(chan struct{})
	var bg sync.WaitGroup
	if !d.o.quiet {
		bg.Go(func() { d.progress(progressDone) })
	}
	var workers sync.WaitGroup
	for i := range d.o.workers {
		workers.Go(func() { d.worker(wctx, ctx, sctx, i) })
	}
	chaosCtx, stopChaos := context.WithCancel(sctx)
	var chaos sync.WaitGroup
	chaos.Go(func() { d.chaosLoop(chaosCtx) })

	sem := make(chan struct{}, d.o.parallel)
	var sessions sync.WaitGroup
	for i := range d.o.sessions {
		run := &sessionRun{idx: i, plan: d.planFor(i), wake: make(chan struct{}, 1), escalated: map[int]bool{}}
		d.runsMu.Lock()
		d.runs = append(d.runs, run)
		d.runsMu.Unlock()
		select {
		case sem <- struct{}{}:
		case <-sctx.Done():
		}
		if sctx.Err() != nil {
			break
		}
		sessions.Go(func() {
			defer func() { <-sem }()
			err := d.runSession(sctx, run)
			run.mu.Lock()
			run.done, run.err = err == nil, err
			run.mu.Unlock()
			if err == nil {
				d.settled.Add(1)
			} else if sctx.Err() == nil {
				d.violation("session %d (%s): %v", run.idx, run.id, err)
			}
		})
	}
	sessions.Wait()
	d.stoppedCap = sctx.Err() != nil && ctx.Err() == nil && d.settled.Load() < int64(d.o.sessions)
	// A server kill or database restart under way finishes before anything
	// is checked.
	stopChaos()
	chaos.Wait()
	// Workers stop leasing before the held faults are awaited: those run
	// on their own (the rescuer expires their leases), and nothing may start
	// new ones once the wait begins.
	stopWorkers()
	workers.Wait()
	d.async.Wait()
	d.scenarioEnd = time.Now()
	close(progressDone)
	bg.Wait()
}

// progress shows how far the drill is on standard error: one line redrawn
// with \r on a terminal, a line every five seconds elsewhere.
func (d *drill) progress(done <-chan struct{}) {
	tty := cliout.IsTerminal(d.env.Stderr)
	every := 5 * time.Second
	if tty {
		every = 200 * time.Millisecond
	}
	line := func() string {
		n, total := d.settled.Load(), int64(d.o.sessions)
		const width = 24
		filled := int(n * width / max(total, 1))
		bar := strings.Repeat("#", filled) + strings.Repeat("-", width-filled)
		var retries int64
		if d.api != nil {
			for _, v := range d.api.retryCounts() {
				retries += v
			}
		}
		s := fmt.Sprintf("drill: [%s] %d/%d sessions settled, %d faults injected, %d retries, %s",
			bar, n, total, d.rec.faultCount(), retries, time.Since(d.start).Round(time.Second))
		if c, _ := d.chaosNow.Load().(string); c != "" {
			s += ", " + c
		}
		return s
	}
	t := time.NewTicker(every)
	defer t.Stop()
	last := 0
	for {
		select {
		case <-done:
			if tty {
				fmt.Fprintf(d.env.Stderr, "\r%s%s\n", line(), strings.Repeat(" ", 8))
			} else {
				fmt.Fprintln(d.env.Stderr, line())
			}
			return
		case <-t.C:
			l := line()
			if tty {
				fmt.Fprintf(d.env.Stderr, "\r%s%s", l, strings.Repeat(" ", max(0, last-len(l))))
				last = len(l)
			} else {
				fmt.Fprintln(d.env.Stderr, l)
			}
		}
	}
}

// runSession is the script of one session: the controller creates it and
// delegates its steps one by one, waits for each, and hands escalations to
// the human.
func (d *drill) runSession(ctx context.Context, run *sessionRun) error {
	o := d.o
	out, err := d.api.createSession(ctx, client.CreateSessionInput{
		Goal:         fmt.Sprintf("Drill %s: process order %d in %d steps", d.suffix, 1000+run.idx, o.steps),
		TicketRef:    fmt.Sprintf("DRILL-%s-%d", d.suffix, run.idx),
		Constraints:  []string{"created by taskpilots drill; safe to ignore"},
		DoneCriteria: []string{"every step completed with evidence"},
		Facts:        map[string]any{"drill": d.queue, "order": 1000 + run.idx},
	})
	d.rec.add(&expectation{Kind: "create_session", SessionID: out.SessionID, Expected: wantOK, Got: got(err)})
	if err != nil {
		return err
	}
	d.runsMu.Lock()
	run.id = out.SessionID
	d.byID[run.id] = run
	d.runsMu.Unlock()
	d.created.Add(1)
	v := out.StateVersion
	turns := 0
	for step := 1; step <= o.steps; step++ {
		dl, err := d.api.delegate(ctx, run.id, client.DelegateInput{
			Queue: d.queue, Step: stepName(step), Instructions: fmt.Sprintf("Drill step %d of %d.", step, o.steps),
			ExpectedVersion: v, MaxAttempts: o.maxAttempts, LeaseSeconds: o.leaseSeconds,
		})
		d.rec.add(&expectation{Kind: "delegate", SessionID: run.id, DelegationID: dl.DelegationID, Expected: wantOK, Got: got(err)})
		if err != nil {
			return err
		}
	wait:
		for {
			s, err := d.waitStep(ctx, run)
			if err != nil {
				return err
			}
			switch s.Status {
			case client.StatusOpen:
				v = s.StateVersion
				break wait
			case client.StatusCompleted, client.StatusRejected, client.StatusCancelled:
				return d.finish(run, s.Status, false)
			case client.StatusEscalated, client.StatusHumanActive:
				if d.hum == nil {
					return d.finish(run, s.Status, true)
				}
				if turns >= 4 {
					return fmt.Errorf("still %s after %d takeovers", s.Status, turns)
				}
				turns++
				if err := d.takeOver(ctx, run, s, turns); err != nil {
					return err
				}
			default: // awaiting_input, waiting_children: nothing the drill answers
				return d.finish(run, s.Status, true)
			}
		}
	}
	s, err := d.api.session(ctx, run.id)
	if err != nil {
		return err
	}
	return d.finish(run, s.Status, !models.Status(s.Status).Terminal())
}

func (d *drill) finish(run *sessionRun, status string, waiting bool) error {
	run.mu.Lock()
	defer run.mu.Unlock()
	run.final, run.waiting = status, waiting
	return nil
}

// waitStep waits until the session leaves queued, running and paused:
// woken by the workers, or every second (lease expiries, rescues).
func (d *drill) waitStep(ctx context.Context, run *sessionRun) (client.Session, error) {
	for {
		s, err := d.api.session(ctx, run.id)
		if err != nil {
			return s, err
		}
		switch s.Status {
		case client.StatusQueued, client.StatusRunning, client.StatusPaused:
		default:
			return s, nil
		}
		select {
		case <-ctx.Done():
			return s, errDrillStopped
		case <-run.wake:
		case <-time.After(time.Second):
		}
	}
}

// takeOver is the human's turn on an escalated session: claim it (after a
// stale form, when planned), then hand the step back, complete the session
// (after an invalid form, when planned) or release it, claim it again and
// hand it back.
func (d *drill) takeOver(ctx context.Context, run *sessionRun, s client.Session, turn int) error {
	h := d.hum
	id := run.id
	choice := run.plan.humanChoice
	if choice == "" || turn >= 3 {
		choice = "complete" // an exhausted step escalating again: finish by hand
	}
	d.rec.fault("takeover")
	act := func(kind string, a models.TakeoverAction, fields map[string]string, want string, fault bool) (string, error) {
		v, err := h.version(ctx, id)
		if err != nil {
			return "", err
		}
		if kind == "console_stale_form" {
			v--
		}
		res, err := h.act(ctx, id, a, v, d.api.key(), fields)
		if err != nil {
			return "", err
		}
		d.rec.add(&expectation{Kind: kind, SessionID: id, Expected: want, Got: res})
		if fault {
			d.rec.fault(kind)
		}
		return res, nil
	}
	step := func(kind string, a models.TakeoverAction, fields map[string]string) error {
		res, err := act(kind, a, fields, humanWantOK, false)
		if err == nil && res != humanOK {
			err = fmt.Errorf("%s was answered %s", a, res)
		}
		return err
	}
	if s.Status == client.StatusEscalated {
		if run.plan.staleForm && turn == 1 {
			if _, err := act("console_stale_form", models.ActClaim, nil, humanConflict, true); err != nil {
				return err
			}
		}
		if err := step("human_claim", models.ActClaim, nil); err != nil {
			return err
		}
	}
	switch choice {
	case "complete":
		if run.plan.invalidForm && turn == 1 {
			if _, err := act("console_invalid_form", models.ActComplete, map[string]string{"resolution": "   "}, humanInvalid, true); err != nil {
				return err
			}
		}
		if err := step("human_complete", models.ActComplete, map[string]string{"resolution": "Finished by the drill's human after checking the evidence."}); err != nil {
			return err
		}
	case "release":
		if err := step("human_release", models.ActRelease, map[string]string{"reason": "drill: passing it to a colleague"}); err != nil {
			return err
		}
		if err := step("human_claim", models.ActClaim, nil); err != nil {
			return err
		}
		if err := step("human_hand_back", models.ActHandBack, nil); err != nil {
			return err
		}
	default:
		if err := step("human_hand_back", models.ActHandBack, nil); err != nil {
			return err
		}
	}
	run.mu.Lock()
	run.takeovers = append(run.takeovers, choice)
	run.mu.Unlock()
	return nil
}

// worker is one simulated worker: it long-polls the drill's queue and works
// each lease, injecting the deck's faults.
//
// Leasing stops with leasing; a lease in hand is worked to its end under
// ctx, so that stopping the workers never cuts a result short.
func (d *drill) worker(leasing, ctx, scenario context.Context, n int) {
	name := fmt.Sprintf("%s-w%d", d.queue, n)
	for leasing.Err() == nil {
		l, err := d.api.lease(leasing, d.queue, name, 2)
		if err != nil {
			if leasing.Err() == nil {
				d.violation("worker %s: lease: %v", name, err)
				select {
				case <-leasing.Done():
				case <-time.After(time.Second):
				}
			}
			continue
		}
		if l == nil {
			continue
		}
		d.work(ctx, scenario, name, l)
	}
}

// validResult is the result a well-behaved worker returns for a lease.
func (d *drill) validResult(run *sessionRun, l *client.Lease) client.ResultInput {
	i := stepIndex(l.Step)
	in := client.ResultInput{LeaseToken: l.LeaseToken, SessionID: l.SessionID, Step: l.Step,
		Output: map[string]any{"step": i, "attempt": l.Attempt, "checked": true}}
	if run != nil && run.plan.escalateStep == i && !run.hasEscalated(i) {
		in.ResultType = client.ResultEscalated
		in.Question = fmt.Sprintf("Order %d needs a human decision at %s: approve?", 1000+run.idx, l.Step)
		in.NextStep = l.Step
		in.Evidence = []client.Evidence{{Claim: "amount above the automatic limit", Source: "drill"}}
		in.Uncertainty = &client.Uncertainty{Level: 0.6, Notes: "policy unclear"}
		return in
	}
	in.ResultType = client.ResultCompleted
	in.Evidence = []client.Evidence{{Claim: fmt.Sprintf("%s checked on attempt %d", l.Step, l.Attempt), Source: "drill"}}
	if i < d.o.steps {
		in.NextStep = stepName(i + 1)
	}
	return in
}

// invalidResult breaks good in one of several ways the contract refuses.
func (d *drill) invalidResult(run *sessionRun, good client.ResultInput) client.ResultInput {
	bad := good
	run.mu.Lock()
	n := run.invalidUsed
	run.invalidUsed++
	run.mu.Unlock()
	switch (run.idx + n) % 5 {
	case 0:
		bad.ResultType = "finished"
	case 1:
		bad.Uncertainty = &client.Uncertainty{Level: 1.5}
	case 2:
		bad.ResultType, bad.Evidence, bad.Failure = client.ResultCompleted, nil, nil
	case 3:
		bad.Step = "not-" + good.Step
	default:
		bad.ResultType = client.ResultCompleted
		bad.Failure = &client.Failure{Class: client.FailureTransient, Message: "a failure on a completed result"}
	}
	return bad
}

// work handles one lease.
func (d *drill) work(ctx, scenario context.Context, worker string, l *client.Lease) {
	run := d.runFor(l.SessionID)
	if run == nil {
		d.violation("worker %s leased %s of session %s, which the drill did not create", worker, l.DelegationID, l.SessionID)
		return
	}
	defer run.poke()
	good := d.validResult(run, l)
	base := expectation{SessionID: l.SessionID, DelegationID: l.DelegationID, Attempt: l.Attempt, Worker: worker,
		LeaseSeq: l.Packet.BasedOnVersion}
	if run.plan.pauseStep == stepIndex(l.Step) && run.pauseTaken.CompareAndSwap(false, true) {
		d.async.Go(func() { d.pauseWhileLeased(ctx, run, l, base, good) })
		return
	}
	switch fault := d.deck.next(); fault {
	case "crash":
		// The worker dies holding the lease: no heartbeat, no result.
		d.rec.fault("crash")
		e := base
		e.Kind, e.Expected, e.verdict = "crash", wantRequeued, verdictCheck
		d.rec.add(&e)
	case "stale":
		d.rec.fault("stale_result")
		d.async.Go(func() { d.staleResult(ctx, scenario, run, l, base, good) })
	case "invalid":
		d.rec.fault("invalid_result")
		_, err := d.api.result(ctx, l.DelegationID, d.api.key(), d.invalidResult(run, good))
		e := base
		e.Kind, e.Expected, e.Got = "invalid_result", wantInvalid, got(err)
		d.rec.add(&e)
		d.send(ctx, run, l, base, "result_after_invalid", good, d.api.key())
	case "duplicate":
		d.rec.fault("duplicate")
		key := d.api.key()
		first, err := d.send(ctx, run, l, base, "result", good, key)
		if err != nil {
			return // refused (lease lost): there is nothing to duplicate
		}
		again, err := d.api.result(ctx, l.DelegationID, key, good)
		e := base
		e.Kind, e.Expected, e.Got = "duplicate_same_key", wantSame, got(err)
		if err == nil {
			e.Got = wantSame
			if again != first {
				e.Got = fmt.Sprintf("different response %+v, first was %+v", again, first)
			}
		}
		d.rec.add(&e)
		_, err = d.api.result(ctx, l.DelegationID, d.api.key(), good)
		e2 := base
		e2.Kind, e2.Expected, e2.Got = "duplicate_new_key", wantConflict, got(err)
		d.rec.add(&e2)
	default:
		_, _ = d.send(ctx, run, l, base, "result", good, d.api.key())
	}
}

// send sends a valid result that should be applied; a 409 is accepted when
// the end of the drill finds that the lease was lost first.
func (d *drill) send(ctx context.Context, run *sessionRun, l *client.Lease, base expectation, kind string, in client.ResultInput, key string) (client.Outcome, error) {
	out, err := d.api.result(ctx, l.DelegationID, key, in)
	e := base
	e.Kind, e.Expected, e.Got, e.fencedOK = kind, wantOK, got(err), true
	d.rec.add(&e)
	if err == nil && in.ResultType == client.ResultEscalated {
		run.markEscalated(stepIndex(l.Step))
	}
	return out, err
}

// staleResult holds a result until the lease is gone (the rescuer expired
// it), then sends it: it must be fenced off with 409.
func (d *drill) staleResult(ctx, scenario context.Context, run *sessionRun, l *client.Lease, base expectation, good client.ResultInput) {
	defer run.poke()
	e := base
	e.Kind, e.Expected = "stale_result", wantConflict
	deadline := time.Now().Add(time.Until(l.LeaseExpiresAt) + 30*time.Second)
	for {
		evs, err := d.api.events(ctx, l.SessionID)
		if err != nil {
			d.violation("stale result of %s: read events: %v", l.DelegationID, err)
			return
		}
		if leaseLost(evs, base.LeaseSeq, l.DelegationID, l.Attempt, base.Worker) {
			break
		}
		if time.Now().After(deadline) {
			// The lease is past its expiry whatever the rescuer did.
			e.Detail = "no lease expiry was recorded 30s after the lease ended"
			break
		}
		select {
		case <-scenario.Done():
			e.verdict = verdictNoTest
			d.rec.add(&e)
			return
		case <-time.After(300 * time.Millisecond):
		}
	}
	_, err := d.api.result(ctx, l.DelegationID, d.api.key(), good)
	e.Got = got(err)
	d.rec.add(&e)
}

// pauseWhileLeased is the controller pausing a session while a worker holds
// its lease (after a stale pause, when planned), then resuming it; the
// worker's result comes after and must be fenced off with 409.
func (d *drill) pauseWhileLeased(ctx context.Context, run *sessionRun, l *client.Lease, base expectation, good client.ResultInput) {
	defer run.poke()
	d.rec.fault("pause")
	paused := false
	for tries := 0; tries < 5 && !paused; tries++ {
		s, err := d.api.session(ctx, run.id)
		if err != nil {
			d.violation("pause %s: %v", run.id, err)
			return
		}
		if s.Status != client.StatusRunning && s.Status != client.StatusQueued {
			break // the lease already ended some other way
		}
		v := s.StateVersion
		if run.plan.staleVersion && tries == 0 && v > 1 {
			d.rec.fault("stale_version")
			_, err := d.api.transition(ctx, "pause", run.id, client.TransitionInput{ExpectedVersion: v - 1, Reason: "drill: stale pause"})
			e := expectation{Kind: "stale_version", SessionID: run.id, Expected: wantConflict, Got: got(err)}
			var ce *client.ConflictError
			if errors.As(err, &ce) && ce.CurrentVersion < v {
				e.Got, e.Detail = "409 with a wrong current_version", fmt.Sprintf("current_version %d, the session was at %d", ce.CurrentVersion, v)
			}
			d.rec.add(&e)
		}
		out, err := d.api.transition(ctx, "pause", run.id, client.TransitionInput{ExpectedVersion: v, Reason: "drill: pause while a worker holds the lease"})
		if client.IsConflict(err) {
			continue // the rescuer moved the session on meanwhile: read it again
		}
		d.rec.add(&expectation{Kind: "pause", SessionID: run.id, Expected: wantOK, Got: got(err)})
		if err != nil {
			return
		}
		paused = true
		time.Sleep(200 * time.Millisecond)
		_, err = d.api.transition(ctx, "resume", run.id, client.TransitionInput{ExpectedVersion: out.StateVersion, Reason: "drill: resume"})
		d.rec.add(&expectation{Kind: "resume", SessionID: run.id, Expected: wantOK, Got: got(err)})
	}
	if !paused {
		_, _ = d.send(ctx, run, l, base, "result", good, d.api.key())
		return
	}
	_, err := d.api.result(ctx, l.DelegationID, d.api.key(), good)
	e := base
	e.Kind, e.Expected, e.Got = "pause_revoked_result", wantConflict, got(err)
	d.rec.add(&e)
}

// chaosLoop kills servers and restarts the database part way through:
// each at its share of the sessions settled, or of --duration, whichever
// comes first.
func (d *drill) chaosLoop(ctx context.Context) {
	type step struct {
		at   float64
		kind string
		n    int
	}
	var steps []step
	if d.servers != nil {
		k := d.o.serverKills
		for i := range k {
			at := 0.25
			if k > 1 {
				at = 0.2 + 0.3*float64(i)/float64(k-1)
			}
			steps = append(steps, step{at: at, kind: "kill", n: i % d.o.servers})
		}
	}
	if d.o.restartDB {
		steps = append(steps, step{at: 0.55, kind: "db"})
	}
	sort.SliceStable(steps, func(i, j int) bool { return steps[i].at < steps[j].at })
	for _, s := range steps {
		for float64(d.settled.Load()) < s.at*float64(d.o.sessions) && time.Since(d.start) < time.Duration(s.at*float64(d.o.duration)) {
			select {
			case <-ctx.Done():
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
		if ctx.Err() != nil {
			return
		}
		switch s.kind {
		case "kill":
			d.chaosNow.Store(fmt.Sprintf("server %d killed", s.n))
			d.rec.fault("server_kill")
			took, err := d.servers.killAndRestart(ctx, s.n, d.api.setBase)
			if err != nil {
				d.violation("kill and restart server %d: %v", s.n, err)
				d.chaosNow.Store("")
				return
			}
			d.chaosMu.Lock()
			d.chaos.ServerKills++
			d.chaos.ServerRestartSeconds = append(d.chaos.ServerRestartSeconds, took.Seconds())
			d.chaosMu.Unlock()
		case "db":
			d.chaosNow.Store("database restarting")
			d.rec.fault("db_restart")
			took, err := d.restartDatabase(ctx)
			if err != nil {
				d.violation("%v", err)
				d.chaosNow.Store("")
				return
			}
			d.chaosMu.Lock()
			d.chaos.DBRestarts++
			d.chaos.DBOutageSeconds = append(d.chaos.DBOutageSeconds, took.Seconds())
			d.chaosMu.Unlock()
		}
		d.chaosNow.Store("")
	}
}

// restartDatabase runs the restart command and waits until the database
// answers again; it returns the outage as the drill saw it.
func (d *drill) restartDatabase(ctx context.Context) (time.Duration, error) {
	start := time.Now()
	logPath := filepath.Join(os.TempDir(), "taskpilots-drill-"+d.suffix+"-db-restart.log")
	if d.logDir != "" {
		logPath = filepath.Join(d.logDir, "db-restart.log")
	}
	if err := runRestart(ctx, d.chaos.DBRestartCommand, logPath); err != nil {
		return 0, err
	}
	if d.logDir == "" {
		os.Remove(logPath)
	}
	// The drill's own connections died with the server: open new ones.
	for {
		st, err := d.openStore(ctx)
		if err == nil {
			d.storeMu.Lock()
			old := d.st
			d.st = st
			d.storeMu.Unlock()
			if old != nil {
				old.Close()
			}
			return time.Since(start), nil
		}
		if time.Since(start) > 2*time.Minute || ctx.Err() != nil {
			return 0, fmt.Errorf("the database did not come back after %q: %w", d.chaos.DBRestartCommand, err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}
