package models

import (
	"context"
	"fmt"
	"runtime"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// Problem kinds found by Verify.
const (
	ProblemHash       = "hash"       // an event's stored hash is not the hash of its content
	ProblemChain      = "chain"      // an event's prev_hash is not its predecessor's hash
	ProblemSeq        = "seq"        // seq does not run 1..n, or a version_before is not its predecessor's version_after
	ProblemReplay     = "replay"     // Apply rejected the event during replay
	ProblemProjection = "projection" // replayed state differs from the stored state
)

// Problem is one mismatch found by Verify.
type Problem struct {
	SessionID string `json:"session_id"`
	Seq       int64  `json:"seq"`
	Kind      string `json:"kind"`
	Detail    string `json:"detail"`
	// Checkpoint is the checkpoint a checkpoint problem is about (0 for the
	// problems of a session's own chain).
	Checkpoint int64 `json:"checkpoint,omitempty"`
}

// ProblemInboxCounts is the kind of a problem with the inbox's maintained
// counts (VerifyInboxCounts): not a session's, and repaired by reproject.
const ProblemInboxCounts = "inbox_counts"

// ProblemReviewCounts is the kind of a problem with the review queue's
// maintained counts (VerifyReviewCounts): not a session's, and repaired by
// migrate up.
const ProblemReviewCounts = "review_counts"

// ProblemNowCounts is the kind of a problem with the metrics' maintained
// SLA counts (sla_counts; PostgreSQL): not a
// session's, and rebuilt by migrate up (RepairNowCounts).
const ProblemNowCounts = "now_counts"

// ProblemWaitingCounts is the kind of a problem with the maintained counts
// of the sessions waiting on input (waiting_counts; PostgreSQL): not a
// session's, and rebuilt by migrate up (RepairWaitingCounts).
const ProblemWaitingCounts = "waiting_counts"

// ProblemInboxRows is the kind of a problem with the inbox search's copy of
// the sessions in human hands (inbox_rows; PostgreSQL): not a session's,
// and rebuilt by migrate up (RepairInboxRows).
const ProblemInboxRows = "inbox_rows"

func (p Problem) String() string {
	switch {
	case p.Kind == ProblemInboxCounts, p.Kind == ProblemReviewCounts, p.Kind == ProblemNowCounts, p.Kind == ProblemWaitingCounts, p.Kind == ProblemInboxRows:
		return fmt.Sprintf("%s: %s", p.Kind, p.Detail)
	case p.SessionID == "":
		return fmt.Sprintf("checkpoint %d: %s: %s", p.Checkpoint, p.Kind, p.Detail)
	case p.Checkpoint != 0:
		// The detail names the session, the count and the checkpoint.
		return fmt.Sprintf("%s: %s", p.Kind, p.Detail)
	}
	return fmt.Sprintf("session %s seq %d: %s: %s", p.SessionID, p.Seq, p.Kind, p.Detail)
}

// VerifyReport summarises a verification run.
type VerifyReport struct {
	Sessions int64         `json:"sessions"`
	Events   int64         `json:"events"`
	Problems []Problem     `json:"problems"`
	Elapsed  time.Duration `json:"elapsed_ns"`
	// Checkpoints is what the checkpoint checks covered (nil when they did
	// not run).
	Checkpoints *CheckpointSummary `json:"checkpoints,omitempty"`
}

// OK reports whether nothing was wrong.
func (r VerifyReport) OK() bool { return len(r.Problems) == 0 }

// VerifyOpts configures Verify.
type VerifyOpts struct {
	// Progress, if set, is called after each batch of sessions with the
	// number of sessions checked so far and the total.
	Progress func(done, total int64)
	// SessionIDs limits the check to these sessions.
	SessionIDs []string
	// Checkpoints, if set, also checks the signed checkpoints against the
	// log (VerifyCheckpoints); not with SessionIDs, since a checkpoint is
	// about the log as a whole.
	Checkpoints *CheckpointVerifyOpts
	// Workers is how many sessions are checked at once; 0 means
	// GOMAXPROCS.
	Workers int
}

// verifyBatch is how many sessions one listing query reads; their events
// come in one range query (session_id, seq order, the primary key).
const verifyBatch = 1000

// Verify replays every session with Apply, compares the result with the
// stored projection, and recomputes every hash chain.
//
// How: one goroutine reads the sessions in keyset batches and, for each
// batch, streams the batch's events in (session_id, seq) order (pgx on
// PostgreSQL), cutting the stream into one job per session; Workers
// goroutines (GOMAXPROCS by default) check the jobs (hashes, chain, Apply,
// projection), which is where the CPU goes. Only the sessions of about one
// batch are in memory at once. The problems are the same as a sequential
// run's and in the same order (by session id, then seq).
func (s *Store) Verify(ctx context.Context, o VerifyOpts) (VerifyReport, error) {
	start := time.Now()
	var rep VerifyReport
	var total int64
	if len(o.SessionIDs) > 0 {
		total = int64(len(o.SessionIDs))
	} else if err := s.DB.WithContext(ctx).Model(&Session{}).Count(&total).Error; err != nil {
		return rep, fmt.Errorf("verify: count sessions: %w", err)
	}
	workers := o.Workers
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	jobs := make(chan verifyJob, 4*workers)
	results := make(chan verifyResult, 4*workers)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				n, probs, err := checkSession(j.row, j.events, j.erasure)
				results <- verifyResult{n: n, probs: probs, err: err}
			}
		}()
	}
	readErr := make(chan error, 1)
	go func() {
		defer close(jobs)
		readErr <- s.streamVerifyJobs(ctx, o.SessionIDs, workers, jobs)
	}()
	go func() {
		wg.Wait()
		close(results)
	}()
	var firstErr error
	for r := range results {
		if r.err != nil && firstErr == nil {
			firstErr = r.err
			cancel() // stop the reader; the workers drain what is queued
		}
		rep.Sessions++
		rep.Events += r.n
		rep.Problems = append(rep.Problems, r.probs...)
		if o.Progress != nil && (rep.Sessions%verifyProgressEvery == 0 || rep.Sessions == total) {
			o.Progress(rep.Sessions, total)
		}
	}
	if err := <-readErr; err != nil && firstErr == nil {
		firstErr = err
	}
	if firstErr != nil {
		return rep, firstErr
	}
	if o.Progress != nil && rep.Sessions != total {
		o.Progress(rep.Sessions, total)
	}
	// Workers finish in any order; a session's problems are in seq order
	// already, so a stable sort by session gives the sequential order.
	sort.SliceStable(rep.Problems, func(i, j int) bool { return rep.Problems[i].SessionID < rep.Problems[j].SessionID })
	if len(o.SessionIDs) == 0 {
		// The maintained counts are derived from every session, so only a
		// whole verify checks them.
		probs, err := s.countProblems(ctx)
		if err != nil {
			return rep, err
		}
		rep.Problems = append(rep.Problems, probs...)
	}
	if o.Checkpoints != nil && len(o.SessionIDs) == 0 {
		sum, probs, err := s.VerifyCheckpoints(ctx, *o.Checkpoints)
		if err != nil {
			return rep, err
		}
		rep.Checkpoints = &sum
		rep.Problems = append(rep.Problems, probs...)
	}
	rep.Elapsed = time.Since(start)
	return rep, nil
}

// countProblems checks the counts that triggers keep beside the sessions and
// review items (inbox_counts, review_counts and review_reviewer_counts, and
// on PostgreSQL sla_counts, waiting_counts and the inbox search's
// inbox_rows) against what
// they count or copy.
func (s *Store) countProblems(ctx context.Context) ([]Problem, error) {
	var probs []Problem
	drift, err := s.VerifyInboxCounts(ctx)
	if err != nil {
		return nil, err
	}
	for _, d := range drift {
		probs = append(probs, Problem{Kind: ProblemInboxCounts, Detail: fmt.Sprintf(
			"%s, queue %q, priority %d, reason %q, assignee %q: %d counted, %d sessions (`taskpilots migrate up` rebuilds them)",
			d.Status, d.Queue, d.Priority, d.ReasonCode, d.Assignee, d.Stored, d.Actual)})
	}
	rdrift, err := s.VerifyReviewCounts(ctx)
	if err != nil {
		return nil, err
	}
	for _, d := range rdrift {
		probs = append(probs, Problem{Kind: ProblemReviewCounts, Detail: fmt.Sprintf(
			"%s %q: %d open items counted, %d open items (`taskpilots migrate up` rebuilds them)",
			d.Table, d.Key, d.Stored, d.Actual)})
	}
	// The tables PostgreSQL's triggers keep from the sessions (none on
	// SQLite, where drift is 0).
	for _, d := range []struct {
		table        derivedTable
		kind, detail string
	}{
		{slaCountsTable, ProblemNowCounts, "%d rows of sla_counts differ from the sessions"},
		{waitingCountsTable, ProblemWaitingCounts, "%d queues' counts of sessions waiting on input differ from the sessions"},
		{inboxRowsTable, ProblemInboxRows, "%d rows of inbox_rows differ from the sessions in human hands"},
	} {
		n, err := s.drift(ctx, d.table)
		if err != nil {
			return nil, err
		}
		if n > 0 {
			probs = append(probs, Problem{Kind: d.kind, Detail: fmt.Sprintf(d.detail+" (`taskpilots migrate up` rebuilds them)", n)})
		}
	}
	return probs, nil
}

// verifyProgressEvery is how many sessions pass between two Progress calls.
const verifyProgressEvery = 64

type verifyJob struct {
	row    Session
	events []Event
	// erasure is the session's erasure record, if it was erased.
	erasure *SessionErasure
}

type verifyResult struct {
	n     int64
	probs []Problem
	err   error
}

// streamVerifyJobs lists the sessions (all, or ids) in batches and has
// readers (one per worker, at most verifyReaders) read the batches' events
// in parallel, each on its own connection, sending one job per session with
// its events: one reader could not keep several workers busy.
func (s *Store) streamVerifyJobs(ctx context.Context, ids []string, workers int, jobs chan<- verifyJob) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	batches := make(chan []Session, 2)
	var (
		wg      sync.WaitGroup
		errOnce sync.Once
		readErr error
	)
	fail := func(err error) {
		errOnce.Do(func() { readErr = err; cancel() })
	}
	for range min(workers, verifyReaders) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for rows := range batches {
				if err := s.sendBatchJobs(ctx, rows, ids, jobs); err != nil {
					fail(err)
					return
				}
			}
		}()
	}
	after := ""
	for {
		rows, err := s.verifySessions(ctx, after, ids)
		if err != nil {
			fail(err)
			break
		}
		if len(rows) == 0 {
			break
		}
		select {
		case batches <- rows:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		after = rows[len(rows)-1].ID
	}
	close(batches)
	wg.Wait()
	if readErr == nil && ctx.Err() != nil {
		return ctx.Err()
	}
	return readErr
}

// verifySessions reads the next batch of sessions after the id after (only
// ids, when given), with their states. A left join: a session whose state
// row is missing is a projection problem to report, not a session to skip.
// The join repeats the keyset bound for the states: without it PostgreSQL
// merges the two primary keys from the first state on, so each batch read
// every state before it (153 ms for the 51st batch of 1,000 at 100,000
// sessions, 4 ms with the bound; TestVerifyBatchPlan).
func (s *Store) verifySessions(ctx context.Context, after string, ids []string) ([]Session, error) {
	if s.pool != nil {
		// pgx directly, as for the events: GORM's scan was a tenth of the
		// reader's time.
		sql := verifySessionsSQL
		var only []string
		if len(ids) > 0 {
			only = ids
		}
		r, err := s.pool.Query(ctx, sql, after, only)
		if err != nil {
			return nil, fmt.Errorf("verify: list sessions: %w", err)
		}
		rows, err := pgx.CollectRows(r, pgx.RowToStructByNameLax[Session])
		if err != nil {
			return nil, fmt.Errorf("verify: list sessions: %w", err)
		}
		return rows, nil
	}
	var rows []Session
	q := s.DB.WithContext(ctx).Table("sessions s").Select("s.*, coalesce(st.state, '') AS state").
		Joins("LEFT JOIN session_states st ON st.session_id = s.id AND st.session_id > ?", after).Order("s.id").Limit(verifyBatch)
	if len(ids) > 0 {
		q = q.Where("s.id IN ?", ids)
	}
	if err := q.Where("s.id > ?", after).Scan(&rows).Error; err != nil {
		return nil, fmt.Errorf("verify: list sessions: %w", err)
	}
	return rows, nil
}

// verifySessionsSQL is verifySessions' statement on PostgreSQL: $1 the
// keyset bound, $2 the ids to check or NULL.
var verifySessionsSQL = `SELECT ` + sessionColumns + `, coalesce(st.state, '') AS state FROM sessions s
	LEFT JOIN session_states st ON st.session_id = s.id AND st.session_id > $1
	WHERE s.id > $1 AND ($2::text[] IS NULL OR s.id = ANY($2)) ORDER BY s.id LIMIT ` + strconv.Itoa(verifyBatch)

// verifyReaders bounds the connections Verify reads events on at once.
const verifyReaders = 4

// sendBatchJobs reads the events of one batch of sessions and sends a job
// per session.
func (s *Store) sendBatchJobs(ctx context.Context, rows []Session, ids []string, jobs chan<- verifyJob) error {
	i := 0 // rows[i] is the next session to send
	var evs []Event
	batchIDs := make([]string, len(rows))
	for k, r := range rows {
		batchIDs[k] = r.ID
	}
	erasures, err := s.erasuresOf(ctx, batchIDs)
	if err != nil {
		return fmt.Errorf("verify: %w", err)
	}
	// send sends every session up to and including upTo: upTo with
	// the events gathered, those before it (no events) with none.
	send := func(upTo string) error {
		for i < len(rows) && rows[i].ID <= upTo {
			var mine []Event
			if rows[i].ID == upTo {
				mine = evs
			}
			select {
			case jobs <- verifyJob{row: rows[i], events: mine, erasure: erasures[rows[i].ID]}:
			case <-ctx.Done():
				return ctx.Err()
			}
			i++
		}
		return nil
	}
	cur := ""
	err = s.scanBatchEvents(ctx, rows[0].ID, rows[len(rows)-1].ID, ids, func(e Event) error {
		if e.SessionID != cur {
			if cur != "" {
				if err := send(cur); err != nil {
					return err
				}
			}
			cur, evs = e.SessionID, nil
		}
		evs = append(evs, e)
		return nil
	})
	if err != nil {
		return err
	}
	if cur != "" {
		if err := send(cur); err != nil {
			return err
		}
	}
	evs = nil
	return send(rows[len(rows)-1].ID)
}

// verifyEventCols are the columns of Event that the checks read, in scan
// order (not the id: nothing checked depends on it).
const verifyEventCols = `session_id, seq, type, actor, version_before, version_after, payload, idempotency_key, prev_hash, hash, created_at`

// scanBatchEvents calls fn with the events of the sessions in [first, last]
// (only ids, when given) in (session_id, seq) order: one range scan of the
// events' primary key.
func (s *Store) scanBatchEvents(ctx context.Context, first, last string, ids []string, fn func(Event) error) error {
	type scanner interface {
		Next() bool
		Scan(dest ...any) error
		Err() error
	}
	var rows scanner
	if s.pool != nil {
		// pgx directly (binary protocol, no database/sql conversions per
		// value): the reader is the one sequential part of Verify.
		sql := `SELECT ` + verifyEventCols + ` FROM events WHERE session_id >= $1 AND session_id <= $2 ORDER BY session_id, seq`
		args := []any{first, last}
		if len(ids) > 0 {
			sql = `SELECT ` + verifyEventCols + ` FROM events WHERE session_id >= $1 AND session_id <= $2 AND session_id = ANY($3) ORDER BY session_id, seq`
			args = append(args, ids)
		}
		r, err := s.pool.Query(ctx, sql, args...)
		if err != nil {
			return fmt.Errorf("verify: read events: %w", err)
		}
		defer r.Close()
		rows = r
	} else {
		q := s.DB.WithContext(ctx).Table("events").Select(verifyEventCols).Where("session_id >= ? AND session_id <= ?", first, last)
		if len(ids) > 0 {
			q = q.Where("session_id IN ?", ids)
		}
		r, err := q.Order("session_id, seq").Rows()
		if err != nil {
			return fmt.Errorf("verify: read events: %w", err)
		}
		defer r.Close()
		rows = r
	}
	for rows.Next() {
		var e Event
		if err := rows.Scan(&e.SessionID, &e.Seq, &e.Type, &e.Actor, &e.VersionBefore, &e.VersionAfter,
			&e.Payload, &e.IdempotencyKey, &e.PrevHash, &e.Hash, &e.CreatedAt); err != nil {
			return fmt.Errorf("verify: scan event: %w", err)
		}
		if err := fn(e); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("verify: read events: %w", err)
	}
	return nil
}

// checkSession checks one session against its events (in seq order). For
// an erased session (er), the events up to er.ThroughSeq must be tombstones
// (their hashes are finished from the tombstones), replay starts from the
// erasure's state there, and no other event may be a tombstone.
func checkSession(row Session, evs []Event, er *SessionErasure) (int64, []Problem, error) {
	var (
		probs    []Problem
		st       State
		prevHash string
		lastSeq  int64
		lastVer  int64
		replayOK = true
		count    int64
	)
	add := func(seq int64, kind, format string, args ...any) {
		probs = append(probs, Problem{SessionID: row.ID, Seq: seq, Kind: kind, Detail: fmt.Sprintf(format, args...)})
	}
	for _, e := range evs {
		count++
		// Seq always runs on; the version moves by the event type's rule
		// (invariant 10), which replay checks below.
		if e.Seq != lastSeq+1 || e.VersionBefore != lastVer {
			add(e.Seq, ProblemSeq, "expected seq %d from version %d, found seq %d with versions %d→%d",
				lastSeq+1, lastVer, e.Seq, e.VersionBefore, e.VersionAfter)
		}
		erasedPayload := IsErasedPayload(e.Payload)
		switch {
		case er != nil && e.Seq <= er.ThroughSeq && !erasedPayload:
			add(e.Seq, ProblemErased, "payload present although the session was erased through seq %d (erasure %s)", er.ThroughSeq, er.ErasureID)
		case erasedPayload && (er == nil || e.Seq > er.ThroughSeq):
			add(e.Seq, ProblemErased, "payload replaced by a tombstone without an erasure record")
		}
		if got := ComputeHash(e); got != e.Hash {
			add(e.Seq, ProblemHash, "stored hash %.12s…, content hashes to %.12s…", e.Hash, got)
		}
		if e.PrevHash != prevHash {
			add(e.Seq, ProblemChain, "prev_hash %.12s… does not match the previous event's hash %.12s…", e.PrevHash, prevHash)
		}
		if replayOK {
			next, err := replayEvent(st, e, er)
			if err != nil {
				add(e.Seq, ProblemReplay, "%v", err)
				replayOK = false
			} else {
				st = next
			}
		}
		prevHash = e.Hash
		lastSeq = e.Seq
		lastVer = e.VersionAfter
	}
	if er != nil && er.ThroughSeq > lastSeq {
		add(lastSeq, ProblemErased, "erasure %s covers events through seq %d, the session has %d", er.ErasureID, er.ThroughSeq, lastSeq)
	}
	if !replayOK {
		return count, probs, nil
	}
	want, err := EncodeState(st)
	if err != nil {
		return count, nil, err
	}
	if string(want) != row.State {
		add(lastSeq, ProblemProjection, "stored state differs from the state replayed from %d events", count)
	}
	proj := projection(st, string(want), lastSeq, prevHash, row.UpdatedAt)
	switch {
	case row.StateVersion != st.Version:
		add(lastSeq, ProblemProjection, "state_version column %d, replay gives %d", row.StateVersion, st.Version)
	case row.LastSeq != lastSeq:
		add(lastSeq, ProblemProjection, "last_seq column %d, the last event has seq %d", row.LastSeq, lastSeq)
	case row.Status != proj.Status:
		add(lastSeq, ProblemProjection, "status column %s, replay gives %s", row.Status, proj.Status)
	case row.LastHash != prevHash:
		add(lastSeq, ProblemProjection, "last_hash column does not match the last event's hash")
	case row.CurrentStep != proj.CurrentStep || row.Assignee != proj.Assignee || row.Priority != proj.Priority ||
		row.TicketRef != proj.TicketRef || row.Goal != proj.Goal || row.Queue != proj.Queue ||
		row.SearchNotes != proj.SearchNotes || row.ReasonCode != proj.ReasonCode || row.NextStep != proj.NextStep:
		add(lastSeq, ProblemProjection, "projection columns differ from the replayed state")
	}
	return count, probs, nil
}
