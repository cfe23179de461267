package models

// The event feed: every committed event, told once, in an order consistent
// with each session's seq (README "Following the event feed").
//
// Why a position assigned after commit. The obvious feed key, a sequence or
// identity column (or the insert time) assigned when the event row is
// inserted, is handed out in insert order, but transactions commit in
// another order: writer A takes position 7, writer B takes 8 and commits
// first, a reader sees 8 and moves its cursor past 7, then A commits and 7
// is never read. No amount of re-reading fixes that without the reader
// guessing how long a transaction may stay open.
//
// So an event gets its feed position only once it is committed, from a
// sequencer, as event stores do it (Marten's high-water mark daemon,
// Postgres outboxes). Positions live in their own narrow table, feed(pos,
// event_id, horizon): numbering an event inserts a small row there, and the
// wide event row is written once, by the write path, and never again (an
// UPDATE of it would write a new version of the whole row and a new entry in
// every index of events, which cost the write path several percent).
//
//   - The write path inserts events with a feed_xid (on PostgreSQL its
//     transaction id, on SQLite the highest so far plus one), which bounds
//     the sequencer's scan (see sequencePostgres), in the same statement as
//     before: no extra statement, no extra round trip. After a commit that
//     appended events, Write kicks the sequencer with a non-blocking send on
//     a channel (bursts coalesce into one kick).
//   - SequenceFeed, run by one goroutine per server process (RunSequencer),
//     numbers every visible (hence committed) event not yet in feed in ONE
//     statement, from max(pos)+1 on, contiguously, in one short transaction
//     (feed.event_id is unique: an event is never numbered twice). On
//     PostgreSQL the transaction first takes an advisory lock, so that
//     sequencers of several processes take turns; one that waited starts its
//     statement after the other committed, sees its positions and what it
//     left pending, and goes on from there. Batches are therefore atomic and
//     serialised: when a reader sees position P it sees every position below.
//   - Within a batch events are ordered by the running maximum of created_at
//     within their session, then session and seq: a session's events are
//     committed one after the other (its row is locked), so they can only be
//     sequenced in seq order even when the clocks of two server processes
//     disagree. A later batch only ever adds higher positions.
//   - A reader reads hi = max(pos) (one index probe) and then the rows
//     with cursor < pos <= hi, joined with their events. Everything up to hi is committed and
//     numbered, so nothing is skipped, and a position is read once; when the
//     page is not full the next cursor is hi, so a reader with filters does
//     not scan the same non-matching rows again.
//   - Events written by a process that died before sequencing them (a CLI, a
//     crashed server) are picked up by RunSequencer's fallback poll.
//   - After a non-empty batch the sequencer wakes the long polls of its
//     process and, on PostgreSQL, sends pg_notify(FeedChannel) in the same
//     transaction, which the LISTEN loop of every other process turns into a
//     wake-up of its long polls (Listen).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"gorm.io/gorm"
)

// FeedChannel is the PostgreSQL channel on which a sequencer announces the
// highest feed position it has given out.
const FeedChannel = "taskpilots_feed"

// Feed paging bounds.
const (
	DefaultFeedLimit = 100
	MaxFeedLimit     = 1000
	// FeedCursorNow, as FeedQuery.After, starts at the end of the feed.
	FeedCursorNow = "now"
	// feedBatch bounds one sequencing statement, so that a backlog (a
	// restart after many CLI writes) is numbered in several short
	// transactions rather than one long one.
	feedBatch = 5000
	// feedLockKey is the first half of the sequencer's advisory lock; the
	// second is the schema's hash, so that separate schemas (tests, tenants)
	// do not wait for each other.
	feedLockKey = 0x66656564 // "feed"
	// feedCoalesce is how long the sequencer lets kicks pile up.
	feedCoalesce = 5 * time.Millisecond
)

// FeedQuery selects a page of the feed.
type FeedQuery struct {
	// After is a cursor from a previous page's NextCursor; "" starts at the
	// oldest retained event and FeedCursorNow at the end of the feed.
	After string
	// Types, when not empty, keeps only events of these types.
	Types []EventType
	// Queue keeps only events of sessions whose queue (sessions.queue) it
	// is; SessionID only the events of one session.
	Queue     string
	SessionID string
	// Limit is the page size, 1 to MaxFeedLimit; 0 means DefaultFeedLimit.
	Limit int
	// Reader is who reads the page: review scores still blind to it are
	// redacted (RedactReviews). The zero value is a reader without
	// identity, to whom every blind score is redacted.
	Reader ReviewReader
}

// FeedEvent is one event as the feed tells it.
type FeedEvent struct {
	EventID      string          `json:"event_id"`
	SessionID    string          `json:"session_id"`
	Seq          int64           `json:"seq"`
	Type         EventType       `json:"type"`
	Actor        string          `json:"actor"`
	VersionAfter int64           `json:"version_after"`
	Payload      json.RawMessage `json:"payload"`
	CreatedAt    UTCTime         `json:"created_at"`
	// Pos is the event's feed position (not part of the API: cursors are
	// opaque).
	Pos int64 `json:"-"`
}

// FeedPage is a page of the feed and the cursor that continues it.
type FeedPage struct {
	Events     []FeedEvent
	NextCursor string
}

// feedCursor is what a feed cursor encodes.
type feedCursor struct {
	Pos int64 `json:"p"`
}

// EncodeFeedCursor is the opaque cursor that continues the feed after pos.
func EncodeFeedCursor(pos int64) string { return "f" + encodeCursor(feedCursor{Pos: pos}) }

// DecodeFeedCursor reads a cursor made by EncodeFeedCursor; anything else is
// a ValidationError naming "after".
func DecodeFeedCursor(s string) (int64, error) {
	var c feedCursor
	rest, ok := strings.CutPrefix(s, "f")
	if !ok || decodeCursor(rest, &c) != nil || c.Pos < 0 {
		v := &ValidationError{}
		v.Add("after", "is not a cursor of this feed: pass a next_cursor, now, or nothing")
		return 0, v
	}
	return c.Pos, nil
}

// Validate checks a feed query and names every bad field.
func (q FeedQuery) Validate() error {
	v := &ValidationError{}
	CheckNUL(v, "", q) // every text field; see NULMessage
	if q.Limit < 0 || q.Limit > MaxFeedLimit {
		v.Add("limit", "must be between 1 and %d", MaxFeedLimit)
	}
	for _, t := range q.Types {
		if !knownEventType(t) {
			v.Add("types", "%q is not an event type", t)
		}
	}
	if q.After != "" && q.After != FeedCursorNow {
		if _, err := DecodeFeedCursor(q.After); err != nil {
			var ve *ValidationError
			errors.As(err, &ve)
			v.Fields = append(v.Fields, ve.Fields...)
		}
	}
	return v.Err()
}

// feedRow is a feed event as read from the database.
type feedRow struct {
	EventID      string
	SessionID    string
	Seq          int64
	Type         EventType
	Actor        string
	VersionAfter int64
	Payload      string
	CreatedAt    UTCTime
	Pos          int64
}

// feedHigh is the highest position given out: every event at or below it is
// committed and numbered. One probe of the unique index.
func (s *Store) feedHigh(db *gorm.DB) (int64, error) {
	var hi *int64
	if err := db.Raw(`SELECT max(pos) FROM feed`).Scan(&hi).Error; err != nil {
		return 0, fmt.Errorf("feed: high-water mark: %w", err)
	}
	if hi == nil {
		return 0, nil
	}
	return *hi, nil
}

// ReadFeed returns the events after q.After that match q's filters, in feed
// order, and the cursor to continue with. It never waits.
func (s *Store) ReadFeed(ctx context.Context, q FeedQuery) (FeedPage, error) {
	if err := q.Validate(); err != nil {
		return FeedPage{}, err
	}
	limit := q.Limit
	if limit == 0 {
		limit = DefaultFeedLimit
	}
	db := s.DB.WithContext(ctx)
	hi, err := s.feedHigh(db)
	if err != nil {
		return FeedPage{}, err
	}
	var after int64
	switch q.After {
	case "":
	case FeedCursorNow:
		after = hi
	default:
		after, _ = DecodeFeedCursor(q.After) // validated above
	}
	page := FeedPage{Events: []FeedEvent{}, NextCursor: EncodeFeedCursor(max(after, hi))}
	if after >= hi {
		// A cursor at (or, from another database, past) the end: nothing
		// to read, and the cursor must not move backwards.
		page.NextCursor = EncodeFeedCursor(after)
		return page, nil
	}
	var (
		sql  strings.Builder
		args []any
	)
	sql.WriteString(`SELECT e.id AS event_id, e.session_id, e.seq, e.type, e.actor, e.version_after, e.payload, e.created_at, f.pos FROM feed f JOIN events e ON e.id = f.event_id`)
	if q.Queue != "" {
		sql.WriteString(` JOIN sessions s ON s.id = e.session_id AND s.queue = ?`)
		args = append(args, q.Queue)
	}
	sql.WriteString(` WHERE f.pos > ? AND f.pos <= ?`)
	args = append(args, after, hi)
	if len(q.Types) > 0 {
		sql.WriteString(` AND e.type IN ?`)
		types := make([]string, len(q.Types))
		for i, t := range q.Types {
			types[i] = string(t)
		}
		args = append(args, types)
	}
	if q.SessionID != "" {
		sql.WriteString(` AND e.session_id = ?`)
		args = append(args, q.SessionID)
	}
	sql.WriteString(` ORDER BY f.pos LIMIT ?`)
	args = append(args, limit)
	var err2 error
	if s.pool != nil {
		page.Events, err2 = s.readFeedRowsPostgres(ctx, sql.String(), args, limit)
	} else {
		page.Events, err2 = readFeedRowsGORM(db, sql.String(), args)
	}
	if err2 != nil {
		return FeedPage{}, fmt.Errorf("feed: read after %d: %w", after, err2)
	}
	for i := range page.Events {
		if p := page.Events[i].Payload; !json.Valid(p) {
			// A tampered row is still told (verify reports it), as text.
			page.Events[i].Payload, _ = json.Marshal(string(p))
		}
	}
	if err := s.redactFeed(ctx, q.Reader, page.Events); err != nil {
		return FeedPage{}, err
	}
	if len(page.Events) == limit {
		page.NextCursor = EncodeFeedCursor(page.Events[len(page.Events)-1].Pos)
	}
	return page, nil
}

// readFeedRowsPostgres reads a feed page straight through pgx, each column
// into its field: the dispatcher reads every event of the feed once per
// webhook, and GORM's reflective scan of a 500-row page cost more CPU than
// the rest of reading it.
func (s *Store) readFeedRowsPostgres(ctx context.Context, query string, args []any, limit int) ([]FeedEvent, error) {
	q, a := rebind(query, args)
	rows, err := s.pool.Query(ctx, q, a...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	evs := make([]FeedEvent, 0, min(limit, 64))
	for rows.Next() {
		var (
			e       FeedEvent
			payload []byte
		)
		if err := rows.Scan(&e.EventID, &e.SessionID, &e.Seq, &e.Type, &e.Actor, &e.VersionAfter, &payload, &e.CreatedAt, &e.Pos); err != nil {
			return nil, err
		}
		e.Payload = payload
		evs = append(evs, e)
	}
	return evs, rows.Err()
}

// readFeedRowsGORM reads a feed page on SQLite.
func readFeedRowsGORM(db *gorm.DB, query string, args []any) ([]FeedEvent, error) {
	var rows []feedRow
	if err := db.Raw(query, args...).Scan(&rows).Error; err != nil {
		return nil, err
	}
	evs := make([]FeedEvent, 0, len(rows))
	for _, r := range rows {
		evs = append(evs, FeedEvent{
			EventID: r.EventID, SessionID: r.SessionID, Seq: r.Seq, Type: r.Type, Actor: r.Actor,
			VersionAfter: r.VersionAfter, Payload: json.RawMessage(r.Payload), CreatedAt: r.CreatedAt, Pos: r.Pos,
		})
	}
	return evs, nil
}

// WaitFeed is ReadFeed as a long poll: when nothing matches it waits up to
// wait for the sequencer (of this process, or of another one through
// LISTEN/NOTIFY) to number new events, and answers as soon as one matches,
// or with an empty page at the deadline.
func (s *Store) WaitFeed(ctx context.Context, q FeedQuery, wait time.Duration) (FeedPage, error) {
	var deadline <-chan time.Time
	if wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		deadline = t.C
	}
	for {
		// Take the signal before reading, so that a batch numbered between
		// the read and the wait still wakes this poll.
		woken := s.feed.signal.wait()
		page, err := s.ReadFeed(ctx, q)
		if err != nil || len(page.Events) > 0 || wait <= 0 {
			return page, err
		}
		// Go on from the end read so far: "now" stays where it was, and
		// filtered polls do not scan the same rows again.
		q.After = page.NextCursor
		select {
		case <-woken:
		case <-deadline:
			return page, nil
		case <-ctx.Done():
			return page, ctx.Err()
		}
	}
}

// feedState is the store's part of the feed: the sequencer's kick and the
// signal that wakes long polls.
type feedState struct {
	once   sync.Once
	kick   chan struct{}
	signal signal
	// horizon is the lower bound of feed_xid of the events still pending
	// (see sequencePostgres). 0 scans them all; the first pass of a process
	// starts from the bound its predecessor stored (horizonLoaded).
	horizon       atomic.Int64
	horizonLoaded atomic.Bool
	// batches and numbered count the non-empty batches of this process's
	// sequencer and the events they numbered (FeedSequencerStats).
	batches, numbered atomic.Int64
}

// FeedSequencerStats returns how many non-empty batches this process's
// sequencer committed and how many events they numbered: each batch is one
// round trip on PostgreSQL.
func (s *Store) FeedSequencerStats() (batches, events int64) {
	return s.feed.batches.Load(), s.feed.numbered.Load()
}

func (f *feedState) kicks() chan struct{} {
	f.once.Do(func() { f.kick = make(chan struct{}, 1) })
	return f.kick
}

// kickSequencer asks the sequencer to run soon. It never blocks: kicks that
// arrive while one is pending are one kick.
func (s *Store) kickSequencer() {
	select {
	case s.feed.kicks() <- struct{}{}:
	default:
	}
}

// wakeFeed wakes every long poll of this process.
func (s *Store) wakeFeed() { s.feed.signal.fire() }

// signal is a broadcast wake-up: wait returns a channel that is closed at
// the next fire.
type signal struct {
	mu sync.Mutex
	ch chan struct{}
}

func (g *signal) wait() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.ch == nil {
		g.ch = make(chan struct{})
	}
	return g.ch
}

func (g *signal) fire() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.ch != nil {
		close(g.ch)
		g.ch = nil
	}
}

// feedNumbered is the sequencing statement's core: number the committed
// events that pending finds (those with feed_xid >= the bound and not in
// feed yet) from max(pos)+1, ordered by the running maximum of created_at
// within the session (clock skew between processes cannot reorder a
// session), then session and seq. LIMIT keeps every session's numbered
// events a prefix of its pending ones, since that order follows seq within
// a session.
func feedNumbered(pending string) string {
	return `pending AS (
	SELECT e.id, e.session_id, e.seq, max(e.created_at) OVER (PARTITION BY e.session_id ORDER BY e.seq) AS t
	` + pending + `
), numbered AS (
	SELECT id, (SELECT coalesce(max(pos), 0) FROM feed) + row_number() OVER (ORDER BY t, session_id, seq) AS pos
	FROM pending ORDER BY t, session_id, seq LIMIT ` + strconv.Itoa(feedBatch) + `
)`
}

// feedPendingPostgres finds the events to number on PostgreSQL. Its shape
// keeps the plan a handful of index probes whatever the statistics say
// (there are none on a table autovacuum has not analyzed yet): the upper
// bound, the snapshot's xmax, filters nothing (no visible transaction is at
// or above it) but makes the scan of events a range, estimated small; and
// the lateral probe of feed's event_id index cannot become a hash anti-join,
// which would read all of feed on every pass (and, estimated big, pay for a
// JIT compilation too).
const feedPendingPostgres = `FROM events e
	LEFT JOIN LATERAL (SELECT 1 AS x FROM feed f WHERE f.event_id = e.id LIMIT 1) f ON true
	WHERE e.feed_xid >= $2 AND e.feed_xid < pg_snapshot_xmax(pg_current_snapshot())::text::bigint AND f.x IS NULL`

// sequencePostgres numbers a batch and, when it numbered any, notifies
// FeedChannel ($1) with the highest position; the notice is delivered at
// commit. It returns the bound of the next pass's scan, which it also
// stores in the batch's feed rows (horizon) for the next process.
//
// Why the bound: without it a pass would look at every event to find the
// few not in feed. The write path stores the writing transaction's id in
// feed_xid, and a pass scans only feed_xid >= $2, the lowest transaction id
// that was still running at the previous pass's snapshot (or, with none,
// the snapshot's xmax): every transaction below it had ended before that
// pass, so its events were visible to it and numbered then (unless the
// batch was full, in which case the bound does not move).
//
// The running transactions are those of the snapshot (pg_snapshot_xip)
// less those of other databases that pg_stat_activity shows still running
// after the snapshot was taken: they cannot have written events here, and
// a long transaction elsewhere in the cluster (a dump, a report) would
// otherwise hold the bound back and make every pass scan, and anti-join,
// every event written since it began. One that ended meanwhile is kept:
// it is not known where it wrote. (Where backend_xid is hidden from this
// role, nothing is excluded: the bound is then the snapshot's xmin.)
var sequencePostgres = `WITH ` + feedNumbered(feedPendingPostgres) + `, next AS (
	SELECT CASE WHEN (SELECT count(*) FROM numbered) < ` + strconv.Itoa(feedBatch) + ` THEN coalesce(
		(SELECT min(x::text::bigint) FROM pg_snapshot_xip(pg_current_snapshot()) AS x
		 WHERE x::xid NOT IN (SELECT backend_xid FROM pg_stat_activity
			WHERE backend_xid IS NOT NULL AND datname IS NOT NULL AND datname <> current_database())),
		pg_snapshot_xmax(pg_current_snapshot())::text::bigint) ELSE $2 END AS h
), ins AS (
	INSERT INTO feed (pos, event_id, horizon) SELECT pos, id, (SELECT h FROM next) FROM numbered RETURNING pos
), agg AS (
	SELECT count(*) AS n, coalesce(max(pos), 0) AS top FROM ins
)
SELECT n, top, (SELECT count(*) FROM (SELECT pg_notify($1, top::text) FROM agg WHERE n > 0) x) AS notified,
	(SELECT h FROM next) AS horizon FROM agg`

// sequenceSQLite is the same on SQLite, where feed_xid counts writes in
// commit order: its parameters are the bound and the next bound, the
// highest feed_xid plus one, read in the same transaction before the batch.
var sequenceSQLite = `WITH ` + feedNumbered(`FROM events e WHERE e.feed_xid >= ? AND NOT EXISTS (SELECT 1 FROM feed f WHERE f.event_id = e.id)`) + `
INSERT INTO feed (pos, event_id, horizon) SELECT pos, id, ? FROM numbered`

// storedHorizon is the bound stored with the last batch, for a process's
// first pass. On PostgreSQL a bound above the current snapshot's xmin comes
// from another cluster (a restored dump, whose transaction ids started
// over) and is not used.
func (s *Store) storedHorizon(ctx context.Context) (int64, error) {
	q := `SELECT coalesce((SELECT horizon FROM feed ORDER BY pos DESC LIMIT 1), 0)`
	if s.pool != nil {
		q = `SELECT coalesce((SELECT CASE WHEN horizon <= pg_snapshot_xmin(pg_current_snapshot())::text::bigint
			THEN horizon ELSE 0 END FROM feed ORDER BY pos DESC LIMIT 1), 0)`
	}
	var h int64
	if err := s.DB.WithContext(ctx).Raw(q).Scan(&h).Error; err != nil {
		return 0, fmt.Errorf("feed: stored horizon: %w", err)
	}
	return h, nil
}

// raiseHorizon moves the in-memory bound up to h (never down: another
// sequencer may have moved it further meanwhile; the larger bound is as
// safe and scans less).
func (s *Store) raiseHorizon(h int64) {
	for {
		cur := s.feed.horizon.Load()
		if h <= cur || s.feed.horizon.CompareAndSwap(cur, h) {
			return
		}
	}
}

// SequenceFeed gives feed positions to every committed event that has none
// yet (see the top of this file) and returns how many it numbered. After a
// non-empty batch it wakes this process's long polls and, on PostgreSQL,
// notifies FeedChannel in the same transaction, so other processes wake
// when, and only when, the positions are visible.
func (s *Store) SequenceFeed(ctx context.Context) (int, error) {
	total := 0
	for {
		n, err := s.sequenceOnce(ctx)
		total += n
		if n > 0 {
			s.feed.batches.Add(1)
			s.feed.numbered.Add(int64(n))
			s.wakeFeed()
		}
		if err != nil || n < feedBatch {
			return total, err
		}
	}
}

func (s *Store) sequenceOnce(ctx context.Context) (int, error) {
	if !s.feed.horizonLoaded.Load() {
		h, err := s.storedHorizon(ctx)
		if err != nil {
			return 0, err
		}
		s.raiseHorizon(h)
		s.feed.horizonLoaded.Store(true)
	}
	bound := s.feed.horizon.Load()
	if s.pool == nil {
		var n, next int64
		err := s.DB.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
			if err := tx.Raw(`SELECT coalesce(max(feed_xid), 0) + 1 FROM events`).Scan(&next).Error; err != nil {
				return err
			}
			res := tx.Exec(sequenceSQLite, bound, next)
			if res.Error != nil {
				return res.Error
			}
			n = res.RowsAffected
			if n < feedBatch {
				return nil
			}
			// A full batch may have left events below next unnumbered:
			// the bound stays where it was.
			next = bound
			return tx.Exec(`UPDATE feed SET horizon = ? WHERE pos > (SELECT max(pos) FROM feed) - ?`, bound, n).Error
		})
		if err != nil {
			return 0, fmt.Errorf("feed: sequence: %w", err)
		}
		s.raiseHorizon(next)
		return int(n), nil
	}
	// One round trip: the lock and the statement travel as one pipeline,
	// which PostgreSQL runs as one implicit transaction (one Sync), so the
	// lock is held until the positions and the notice commit. Blocking: a
	// sequencer that waits for the lock then runs its statement on a fresh
	// snapshot and numbers what the other one left, from where it stopped.
	//
	// The same first statement sets plan_cache_mode for the transaction
	// only: the sequencing statement then runs on its generic plan, which
	// is the custom plans' shape (a range of events_feed_xid_idx from the
	// bound, a probe of feed per event). Left to choose, PostgreSQL kept
	// planning it again on most passes (the bound's range estimated a
	// fraction of events), 0.6 ms of planning for 0.4 ms of work, 8 % of
	// the server's statement time in `bench --mode inproc`.
	// TestSequencerKeepsItsPlan holds it to one plan.
	var b pgx.Batch
	b.Queue(`SELECT pg_advisory_xact_lock($1, hashtext(current_schema())), set_config('plan_cache_mode', 'force_generic_plan', true)`, int32(feedLockKey))
	var n, top, notified, horizon int64
	b.Queue(sequencePostgres, FeedChannel, bound).QueryRow(func(row pgx.Row) error {
		return row.Scan(&n, &top, &notified, &horizon)
	})
	if err := s.pool.SendBatch(ctx, &b).Close(); err != nil {
		return 0, fmt.Errorf("feed: sequence: %w", err)
	}
	s.raiseHorizon(horizon)
	return int(n), nil
}

// RunSequencer numbers committed events (SequenceFeed) whenever a write of
// this process kicks it, and at least every poll for events written by other
// processes that did not sequence them (a CLI, a crashed server). It returns
// when ctx is done. One per process is enough; more are harmless.
func (s *Store) RunSequencer(ctx context.Context, poll time.Duration) {
	if poll <= 0 {
		poll = time.Second
	}
	t := time.NewTimer(poll)
	defer t.Stop()
	var (
		failing    bool
		lastLogged time.Time
	)
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.feed.kicks():
			// A short pause lets a burst of commits share one batch: fewer
			// round trips and notices for a few milliseconds of latency.
			select {
			case <-ctx.Done():
				return
			case <-time.After(feedCoalesce):
			}
		case <-t.C:
		}
		_, err := s.SequenceFeed(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			// While the database is down, one line per half minute is enough.
			if !failing || time.Since(lastLogged) > 30*time.Second {
				s.Logger.Error("feed sequencer failed; retrying", "err", err)
				lastLogged = time.Now()
			}
			failing = true
		case err == nil && failing:
			s.Logger.Info("feed sequencer recovered")
			failing = false
		}
		if !t.Stop() {
			select {
			case <-t.C:
			default:
			}
		}
		t.Reset(poll)
	}
}
