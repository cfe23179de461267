package drill

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/taskpilots/handoff/client"
	"github.com/taskpilots/handoff/models"
)

// maxListedViolations bounds the violations the report lists one by one.
const maxListedViolations = 50

// eventRef is what the checks need from an event's payload.
type eventRef struct {
	DelegationID string `json:"delegation_id"`
	Attempt      int    `json:"attempt"`
	Worker       string `json:"worker"`
}

func refOf(e client.Event) eventRef {
	var r eventRef
	_ = e.DecodePayload(&r)
	return r
}

func isResult(t string) bool {
	switch models.EventType(t) {
	case models.EventResultCompleted, models.EventResultNeedsInput, models.EventResultRejected,
		models.EventResultEscalated, models.EventResultFailed:
		return true
	}
	return false
}

// revokes reports whether an event ends whatever lease the session had.
func revokes(t string) bool {
	switch models.EventType(t) {
	case models.EventSessionPaused, models.EventSessionEscalated, models.EventSessionCancelled:
		return true
	}
	return false
}

// leaseLost reports whether the event log shows that one lease of
// delegation dlg, attempt, ended without a result of its own: it expired, or
// a pause, escalation or cancellation revoked it. The lease is the
// delegation.leased event that moved the version to seq (its packet's
// based_on_version; a lease is work, so no other event moved it there); with seq 0,
// the last lease of that attempt taken by worker. (A pause does not bump
// the attempt, so one worker may lease the same attempt twice.)
func leaseLost(evs []client.Event, seq int64, dlg string, attempt int, worker string) bool {
	start := -1
	for i, e := range evs {
		if models.EventType(e.Type) != models.EventDelegationLeased {
			continue
		}
		r := refOf(e)
		if r.DelegationID != dlg || r.Attempt != attempt {
			continue
		}
		if seq > 0 && e.VersionAfter == seq || seq <= 0 && (worker == "" || r.Worker == worker) {
			start = i
		}
	}
	if start < 0 {
		return false
	}
	for _, e := range evs[start+1:] {
		switch {
		case models.EventType(e.Type) == models.EventDelegationExpired:
			if r := refOf(e); r.DelegationID == dlg && r.Attempt == attempt {
				return true
			}
		case revokes(e.Type):
			return true
		case isResult(e.Type):
			// Only the holder's result is applied: the lease ended with it.
			return false
		}
	}
	return false
}

// toModel turns an event as the API shows it back into the stored event, so
// that its hash can be recomputed and it can be replayed.
func toModel(sessionID string, e client.Event) models.Event {
	return models.Event{
		SessionID: sessionID, Seq: e.Seq, Type: models.EventType(e.Type), Actor: e.Actor,
		VersionBefore: e.VersionBefore, VersionAfter: e.VersionAfter, Payload: string(e.Payload),
		IdempotencyKey: e.IdempotencyKey, PrevHash: e.PrevHash, Hash: e.Hash, CreatedAt: models.NewUTCTime(e.CreatedAt),
	}
}

// sessionCheck is what checkSession found for one session.
type sessionCheck struct {
	chain, replay, double int
	consistent            bool
	problems              []string
}

// checkSession checks one session through the API alone: its hash chain,
// replay against the stored state, transitions applied twice or from a
// dead lease, and whether its status agrees with its delegation.
func checkSession(id string, s client.Session, evs []client.Event, keys map[string]int) sessionCheck {
	var c sessionCheck
	add := func(format string, args ...any) {
		c.problems = append(c.problems, fmt.Sprintf("session %s: ", id)+fmt.Sprintf(format, args...))
	}
	// Hash chain and sequence.
	// Seq runs 1..n; each version_before is the previous version_after
	// (whether an event may move the version is replay's check).
	mevs := make([]models.Event, len(evs))
	prev := ""
	var prevVersion int64
	for i, e := range evs {
		me := toModel(id, e)
		mevs[i] = me
		if e.Seq != int64(i+1) || e.VersionBefore != prevVersion {
			c.chain++
			add("event %d has seq %d and versions %d→%d", i+1, e.Seq, e.VersionBefore, e.VersionAfter)
		}
		prevVersion = e.VersionAfter
		if e.PrevHash != prev {
			c.chain++
			add("seq %d: prev_hash does not match the previous event's hash", e.Seq)
		}
		if h := models.ComputeHash(me); h != e.Hash {
			c.chain++
			add("seq %d: stored hash %.12s…, content hashes to %.12s…", e.Seq, e.Hash, h)
		}
		prev = e.Hash
		if e.IdempotencyKey != nil && *e.IdempotencyKey != "" {
			keys[e.Actor+" "+*e.IdempotencyKey]++
		}
	}
	// Replay equals the projection.
	st, err := models.Replay(mevs)
	switch {
	case err != nil:
		c.replay++
		add("replay: %v", err)
	default:
		want, err1 := models.Canonical(st)
		have, err2 := models.Canonical(json.RawMessage(s.State))
		if err1 != nil || err2 != nil || !bytes.Equal(want, have) || st.Version != s.StateVersion || string(st.Status) != s.Status {
			c.replay++
			add("the stored state (version %d, %s) is not what its %d events replay to (version %d, %s)",
				s.StateVersion, s.Status, len(evs), st.Version, st.Status)
		}
	}
	// Nothing applied twice; no result without a live lease of its attempt.
	type attemptKey struct {
		dlg     string
		attempt int
	}
	results := map[attemptKey]int{}
	leases := map[attemptKey]int{}
	var held *attemptKey
	for _, e := range evs {
		t := models.EventType(e.Type)
		switch {
		case t == models.EventDelegationLeased:
			r := refOf(e)
			k := attemptKey{r.DelegationID, r.Attempt}
			// A pause revokes a lease and resuming queues the same attempt
			// again, so a second lease of an attempt must follow a pause.
			if leases[k] > 0 && held != nil && *held == k {
				c.double++
				add("seq %d: %s attempt %d leased again while its lease was live", e.Seq, k.dlg, k.attempt)
			}
			leases[k]++
			held = &k
		case t == models.EventDelegationExpired:
			held = nil
		case revokes(e.Type):
			held = nil
		case isResult(e.Type):
			r := refOf(e)
			k := attemptKey{r.DelegationID, r.Attempt}
			results[k]++
			if results[k] > 1 {
				c.double++
				add("seq %d: a second result for %s attempt %d", e.Seq, k.dlg, k.attempt)
			}
			if held == nil || *held != k {
				c.double++
				add("seq %d: result for %s attempt %d applied without its live lease", e.Seq, k.dlg, k.attempt)
			}
			held = nil
		}
	}
	// The status agrees with the delegation the state holds.
	var ms models.State
	if err := json.Unmarshal(s.State, &ms); err != nil {
		add("decode state: %v", err)
		return c
	}
	dl := ms.Delegation
	switch models.Status(s.Status) {
	case models.StatusQueued:
		c.consistent = dl != nil && dl.Worker == ""
	case models.StatusRunning:
		c.consistent = dl != nil && dl.Worker != ""
	case models.StatusPaused:
		c.consistent = (dl != nil) == (ms.PausedFrom == models.StatusQueued) && (dl == nil || dl.Worker == "")
	default:
		c.consistent = dl == nil
	}
	if !c.consistent {
		add("status %s does not agree with its delegation %+v", s.Status, dl)
	}
	return c
}

// delegationRows checks, in one statement, that each session's status
// agrees with its delegation rows: queued ⇒ exactly one queued delegation,
// running ⇒ exactly one leased, paused ⇒ at most one held, otherwise none
// open.
func (d *drill) delegationRows(ctx context.Context, ids []string) ([]string, map[string]bool, error) {
	var rows []struct {
		ID      string
		Status  string
		DStatus *string
		N       int
	}
	err := retryDB(ctx, d.api, func() error {
		rows = rows[:0]
		return d.store().DB.WithContext(ctx).Raw(`SELECT s.id, s.status, dl.status AS d_status, count(dl.id) AS n
FROM sessions s LEFT JOIN delegations dl ON dl.session_id = s.id
WHERE s.id IN ? GROUP BY s.id, s.status, dl.status`, ids).Scan(&rows).Error
	})
	if err != nil {
		return nil, nil, fmt.Errorf("read delegation rows: %w", err)
	}
	type counts struct {
		status              string
		queued, leased, hel int
	}
	per := map[string]*counts{}
	for _, r := range rows {
		c := per[r.ID]
		if c == nil {
			c = &counts{status: r.Status}
			per[r.ID] = c
		}
		if r.DStatus == nil {
			continue
		}
		switch models.DelegationStatus(*r.DStatus) {
		case models.DelegationQueued:
			c.queued += r.N
		case models.DelegationLeased:
			c.leased += r.N
		case models.DelegationHeld:
			c.hel += r.N
		}
	}
	var problems []string
	bad := map[string]bool{}
	for id, c := range per {
		var ok bool
		switch models.Status(c.status) {
		case models.StatusQueued:
			ok = c.queued == 1 && c.leased == 0 && c.hel == 0
		case models.StatusRunning:
			ok = c.leased == 1 && c.queued == 0 && c.hel == 0
		case models.StatusPaused:
			ok = c.queued == 0 && c.leased == 0 && c.hel <= 1
		default:
			ok = c.queued+c.leased+c.hel == 0
		}
		if !ok {
			bad[id] = true
			problems = append(problems, fmt.Sprintf("session %s: status %s with %d queued, %d leased, %d held delegations",
				id, c.status, c.queued, c.leased, c.hel))
		}
	}
	return problems, bad, nil
}

// verify checks everything the drill did and builds the report.
func (d *drill) verify(ctx context.Context) drillReport {
	rep := drillReport{
		RunID: d.queue, Queue: d.queue, Seed: d.seed, Servers: 1, Mode: "url",
		Faults: map[string]int{}, Retries: map[string]int64{}, Violations: []string{},
		Sessions:     sessionCounts{Planned: d.o.sessions, ByStatus: map[string]int{}, Takeovers: map[string]int{}},
		Expectations: expectationStats{ByKind: map[string]*kindStats{}},
		StoppedByCap: d.stoppedCap,
	}
	if d.o.ownServers() {
		rep.Mode, rep.Servers = "own-servers", d.o.servers
	}
	if st := d.store(); st != nil {
		rep.Dialect = string(st.Dialect)
	}
	var violations []string
	viol := func(format string, args ...any) { violations = append(violations, fmt.Sprintf(format, args...)) }

	// Each session through the API.
	runs := d.allRuns()
	keys := map[string]int{}
	evsByID := map[string][]client.Event{}
	var ids []string
	statusOf := map[string]string{}
	unsettled := map[string]bool{}
	for _, run := range runs {
		run.mu.Lock()
		id, done, final, err, takeovers := run.id, run.done, run.final, run.err, run.takeovers
		run.mu.Unlock()
		for _, t := range takeovers {
			rep.Sessions.Takeovers[t]++
		}
		if id == "" {
			if err != nil || d.stoppedCap {
				rep.Sessions.Unsettled++
				viol("session %d was never created before the drill stopped", run.idx)
			}
			continue
		}
		rep.Sessions.Created++
		ids = append(ids, id)
		s, err1 := d.api.session(ctx, id)
		evs, err2 := d.api.events(ctx, id)
		if err1 != nil || err2 != nil {
			viol("session %s: read for checking: %v %v", id, err1, err2)
			continue
		}
		evsByID[id] = evs
		statusOf[id] = s.Status
		rep.Sessions.ByStatus[s.Status]++
		rep.Checks.SessionsChecked++
		rep.Checks.Events += len(evs)
		c := checkSession(id, s, evs, keys)
		rep.Checks.ChainProblems += c.chain
		rep.Checks.ReplayMismatches += c.replay
		rep.Checks.DoubleApplied += c.double
		if c.consistent {
			rep.Checks.Consistent++
		} else {
			rep.Checks.Inconsistent++
		}
		violations = append(violations, c.problems...)
		switch {
		case done:
			rep.Sessions.Settled++
			if final != s.Status {
				viol("session %s: settled as %s, but it is %s now", id, final, s.Status)
			}
		default:
			rep.Sessions.Unsettled++
			unsettled[id] = true
			if err == nil {
				err = errDrillStopped
			}
			viol("session %s did not settle: it is %s (%v)", id, s.Status, err)
		}
	}
	for k, n := range keys {
		if n > 1 {
			rep.Checks.DuplicateKeys++
			viol("idempotency key %q (actor and key) applied %d times", k, n)
		}
	}

	// Expectations left for the event log to decide.
	d.rec.mu.Lock()
	list := append([]*expectation(nil), d.rec.list...)
	for k, v := range d.rec.faults {
		rep.Faults[k] = v
	}
	d.rec.mu.Unlock()
	for _, e := range list {
		if e.verdict == verdictCheck {
			lost := leaseLost(evsByID[e.SessionID], e.LeaseSeq, e.DelegationID, e.Attempt, e.Worker)
			switch {
			case !lost && d.stoppedCap && unsettled[e.SessionID]:
				// Cut short by --duration: reported as an unsettled session.
				e.verdict = verdictNoTest
			case e.Kind == "crash" && lost:
				e.verdict, e.Got = verdictMatch, wantRequeued
			case e.Kind == "crash":
				e.verdict, e.Got = verdictWrong, "no lease expiry recorded"
			case lost:
				e.verdict = verdictLost
			default:
				e.verdict, e.Detail = verdictWrong, "409 although the lease was never lost"
			}
		}
		if e.verdict == verdictNoTest {
			continue
		}
		ks := rep.Expectations.ByKind[e.Kind]
		if ks == nil {
			ks = &kindStats{Expected: e.Expected}
			rep.Expectations.ByKind[e.Kind] = ks
		}
		ks.Count++
		rep.Expectations.Checked++
		switch e.verdict {
		case verdictMatch:
			ks.Matched++
			rep.Expectations.Matched++
			switch e.Expected {
			case wantConflict, wantInvalid, wantSame:
				rep.Expectations.Rejected++
			}
		case verdictLost:
			ks.LeaseLost++
			rep.Expectations.LeaseLost++
		default:
			ks.Mismatches++
			rep.Expectations.Mismatches++
			detail := ""
			if e.Detail != "" {
				detail = " (" + e.Detail + ")"
			}
			viol("%s on session %s %s attempt %d: expected %s, got %s%s", e.Kind, e.SessionID, e.DelegationID, e.Attempt, e.Expected, e.Got, detail)
		}
	}

	// The database's own view, when the drill has it.
	if st := d.store(); st != nil && len(ids) > 0 {
		var vr models.VerifyReport
		err := retryDB(ctx, d.api, func() (err error) {
			vr, err = d.store().Verify(ctx, models.VerifyOpts{SessionIDs: ids})
			return err
		})
		if err != nil {
			viol("store verify: %v", err)
		} else {
			rep.Checks.DBVerify = &dbVerifyStats{Sessions: vr.Sessions, Events: vr.Events, Problems: len(vr.Problems)}
			for _, p := range vr.Problems {
				viol("store verify: %s", p)
			}
		}
		problems, bad, err := d.delegationRows(ctx, ids)
		if err != nil {
			viol("%v", err)
		} else {
			rep.Checks.DelegationRows = true
			for id := range bad {
				if statusOf[id] != "" && rep.Checks.Consistent > 0 {
					rep.Checks.Consistent--
					rep.Checks.Inconsistent++
				}
			}
			violations = append(violations, problems...)
		}
	}

	// Product metrics (the servers count each rejection before they answer
	// it, so nothing is pending).
	if m, err := d.metrics(ctx); err != nil {
		viol("product metrics: %v", err)
	} else {
		rep.Metrics = &m
		if sc := m.StateConflicts; sc != nil && sc.AppliedConflicts > 0 {
			viol("product metrics: %d applied conflicts (results applied to an attempt that already had one)", sc.AppliedConflicts)
		}
	}

	d.violMu.Lock()
	violations = append(append([]string(nil), d.violations...), violations...)
	d.violMu.Unlock()
	d.chaosMu.Lock()
	rep.Chaos = d.chaos
	d.chaosMu.Unlock()
	if rep.Chaos.ServerRestartSeconds == nil {
		rep.Chaos.ServerRestartSeconds = []float64{}
	}
	if rep.Chaos.DBOutageSeconds == nil {
		rep.Chaos.DBOutageSeconds = []float64{}
	}
	rep.Retries = d.api.retryCounts()
	rep.ViolationCount = len(violations)
	rep.Violations = append([]string{}, violations[:min(len(violations), maxListedViolations)]...)
	rep.OK = len(violations) == 0
	rep.ElapsedSeconds = time.Since(d.start).Seconds()
	rep.ScenarioSeconds = d.scenarioEnd.Sub(d.start).Seconds()
	return rep
}

// metrics computes the product metrics of the drill's queue: from the
// database over the drill's own window when the drill has it, else from
// GET /api/v1/metrics.
func (d *drill) metrics(ctx context.Context) (drillMetrics, error) {
	if d.store() == nil {
		return d.api.metrics(ctx, d.queue)
	}
	// Rejections are counted per minute, and a minute belongs to a window
	// when it starts in it: start at the minute the drill started in.
	o := models.MetricsOpts{From: d.start.UTC().Truncate(time.Minute), To: time.Now().Add(time.Second), Queue: d.queue}
	var pm models.ProductMetrics
	err := retryDB(ctx, d.api, func() (err error) {
		pm, err = d.store().ProductMetrics(ctx, o)
		return err
	})
	if err != nil {
		return drillMetrics{}, err
	}
	q := pm.Queues[d.queue]
	return drillMetrics{Source: "database (the drill's window, queue " + d.queue + ")", From: pm.From, To: pm.To,
		HandoffSuccess: q.HandoffSuccess, Rework: q.Rework, InfraRetries: q.InfraRetries, Recovery: q.Recovery,
		StateConflicts: q.StateConflicts}, nil
}
