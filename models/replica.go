package models

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"
)

// Read replicas. With OpenOpts.ReadURL set (serve's --database-read-url), the
// reads of a request that opted in (WithReadScope: the console's and the
// API's GET requests) go to a PostgreSQL streaming-replication standby:
// the console's lists, the audit trail, the metrics and the API's session
// reads all take their handle from Store.read, which picks per request:
//
//   - the primary, when the context has no read scope (background work, the
//     write path, every POST) or the scope does not allow the standby;
//   - the primary, while the standby is marked down (it failed a query or
//     the replay probe; it is tried again after ReplicaRetry);
//   - the primary, while the reader's own last write (its floor: the
//     primary's WAL insert position read right after the commit) is not yet
//     replayed on the standby (pg_last_wal_replay_lsn, cached for
//     ReplicaLagCache so that it is not one query per request);
//   - the standby otherwise. A query the standby fails runs again on the
//     primary, in the same call.
//
// A reader's floor travels with it: the browser keeps it in a cookie (the
// web layer reads and writes it, see ReadScope.Floor), so it holds across
// serve replicas; an API token's is kept in this process's memory for
// ReplicaFloorTTL.

// LSN is a PostgreSQL WAL position.
type LSN uint64

// ParseLSN reads the text form of a pg_lsn ("16/B374D848").
func ParseLSN(s string) (LSN, error) {
	hi, lo, ok := strings.Cut(strings.TrimSpace(s), "/")
	if !ok {
		return 0, fmt.Errorf("lsn %q: want X/Y", s)
	}
	h, err := strconv.ParseUint(hi, 16, 32)
	if err != nil {
		return 0, fmt.Errorf("lsn %q: %w", s, err)
	}
	l, err := strconv.ParseUint(lo, 16, 32)
	if err != nil {
		return 0, fmt.Errorf("lsn %q: %w", s, err)
	}
	return LSN(h<<32 | l), nil
}

func (l LSN) String() string { return fmt.Sprintf("%X/%X", uint64(l)>>32, uint64(l)&0xFFFFFFFF) }

// Defaults of the replica's timings.
const (
	DefaultReplicaLagCache = 200 * time.Millisecond
	DefaultReplicaRetry    = 5 * time.Second
	DefaultReplicaFloorTTL = 2 * time.Minute
)

// ReplicaStats counts where routed reads went.
type ReplicaStats struct {
	Standby, Primary, Failovers, ReplayProbes int64
	Down                                      bool
}

// replica is the standby and what the router knows about it.
type replica struct {
	url     string
	pool    *pgxpool.Pool
	standby *sql.DB
	primary *sql.DB
	db      *gorm.DB // reads through router

	lagCache, retry, floorTTL time.Duration

	mu       sync.Mutex
	replay   LSN
	replayAt time.Time
	down     bool
	retryAt  time.Time
	floors   map[string]floorEntry
	stats    ReplicaStats
	probeMu  sync.Mutex // one replay probe at a time
	log      func(msg string, args ...any)
	warnLog  func(msg string, args ...any)
	nowFn    func() time.Time
}

type floorEntry struct {
	lsn     LSN
	expires time.Time
}

// ReadScope is one request's reader: whether its reads may go to the
// standby, and the floor below which they may not.
type ReadScope struct {
	key        string
	mayStandby bool
	mu         sync.Mutex
	floor      LSN
	changed    bool
}

type readScopeKey struct{}

// WithReadScope marks ctx as a request of one reader: key names it for the
// in-memory floor (an API token: "token:ID"; "" for none), floor is the
// floor it brings along (the browser's cookie; 0 for none), and mayStandby
// says whether its reads may go to the standby at all (GET and HEAD
// requests). Without a read replica it changes nothing.
func WithReadScope(ctx context.Context, key string, floor LSN, mayStandby bool) (context.Context, *ReadScope) {
	sc := &ReadScope{key: key, floor: floor, mayStandby: mayStandby}
	return context.WithValue(ctx, readScopeKey{}, sc), sc
}

func scopeOf(ctx context.Context) *ReadScope {
	sc, _ := ctx.Value(readScopeKey{}).(*ReadScope)
	return sc
}

// Floor is the reader's floor after the request, and whether it changed
// (a write raised it, or the standby caught up and it was dropped: 0), for
// the web layer's cookie.
func (r *ReadScope) Floor() (LSN, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.floor, r.changed
}

func (r *ReadScope) raise(l LSN) {
	r.mu.Lock()
	if l > r.floor {
		r.floor, r.changed = l, true
	}
	r.mu.Unlock()
}

func (r *ReadScope) drop(l LSN) {
	r.mu.Lock()
	if r.floor != 0 && r.floor <= l {
		r.floor, r.changed = 0, true
	}
	r.mu.Unlock()
}

// HasReadReplica reports whether reads may go to a standby.
func (s *Store) HasReadReplica() bool { return s.replica != nil }

// ReplicaStats reports where routed reads went (zero without a replica).
func (s *Store) ReplicaStats() ReplicaStats {
	if s.replica == nil {
		return ReplicaStats{}
	}
	r := s.replica
	r.mu.Lock()
	defer r.mu.Unlock()
	st := r.stats
	st.Down = r.down
	return st
}

// ReplicaTimings sets the replay-position cache, the retry delay after a
// standby failure, and the lifetime of an API token's floor (0 keeps the
// current value). Set before serving.
func (s *Store) ReplicaTimings(lagCache, retry, floorTTL time.Duration) {
	if s.replica == nil {
		return
	}
	r := s.replica
	r.mu.Lock()
	defer r.mu.Unlock()
	if lagCache > 0 {
		r.lagCache = lagCache
	}
	if retry > 0 {
		r.retry = retry
		if until := r.nowFn().Add(retry); r.down && r.retryAt.After(until) {
			r.retryAt = until
		}
	}
	if floorTTL > 0 {
		r.floorTTL = floorTTL
	}
}

// ErrReadReplicaDialect is the error of a read URL on SQLite or of a read
// URL that is not PostgreSQL.
var ErrReadReplicaDialect = errors.New("--database-read-url needs PostgreSQL: both the database url and the read url must be postgres:// URLs")

// openReplica connects the standby's pool next to the primary's. A standby
// that does not answer at start is not an error: reads use the primary until
// it does (logged).
func (s *Store) openReplica(ctx context.Context, readURL string, size int32) error {
	d, dsn, err := ParseDatabaseURL(readURL)
	if err != nil {
		return fmt.Errorf("database read url: %w", err)
	}
	if d != Postgres || s.Dialect != Postgres {
		return ErrReadReplicaDialect
	}
	pcfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return fmt.Errorf("database read url: %w", err)
	}
	pcfg.MaxConns = size
	pcfg.MaxConnIdleTime = 5 * time.Minute
	if pcfg.ConnConfig.ConnectTimeout == 0 || pcfg.ConnConfig.ConnectTimeout > 3*time.Second {
		pcfg.ConnConfig.ConnectTimeout = 3 * time.Second
	}
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return fmt.Errorf("open read replica: %w", err)
	}
	primary, err := s.DB.DB()
	if err != nil {
		pool.Close()
		return err
	}
	standby := stdlib.OpenDBFromPool(pool)
	r := &replica{
		url: readURL, pool: pool, standby: standby, primary: primary,
		lagCache: DefaultReplicaLagCache, retry: DefaultReplicaRetry, floorTTL: DefaultReplicaFloorTTL,
		floors:  make(map[string]floorEntry),
		log:     s.Logger.Info,
		warnLog: s.Logger.Warn,
		nowFn:   time.Now,
	}
	r.db, err = gorm.Open(postgres.New(postgres.Config{Conn: &router{r: r}}), &gorm.Config{
		SkipDefaultTransaction: true,
		Logger:                 logger.Default.LogMode(logger.Silent),
		NowFunc:                func() time.Time { return time.Now().UTC() },
	})
	if err != nil {
		standby.Close()
		pool.Close()
		return fmt.Errorf("open read replica: %w", err)
	}
	// Say at start what the standby is, and refuse one of another cluster:
	// its reads would be another database's.
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	const sysID = `SELECT system_identifier FROM pg_control_system()`
	var (
		inRecovery   bool
		theirs, ours int64
	)
	standbyErr := standby.QueryRowContext(pctx, `SELECT pg_is_in_recovery(), (`+sysID+`)`).Scan(&inRecovery, &theirs)
	switch {
	case standbyErr != nil:
		r.markDown(standbyErr)
	case primary.QueryRowContext(pctx, sysID).Scan(&ours) == nil && ours != theirs:
		r.close()
		return fmt.Errorf("database read url %s is not a replica of the database: its system identifier is %d, the primary's %d",
			RedactDatabaseURL(readURL), theirs, ours)
	case !inRecovery:
		r.warnLog("the read replica is not a standby (pg_is_in_recovery() is false); reads go there anyway", "database_read", RedactDatabaseURL(readURL))
	}
	s.replica = r
	return nil
}

func (r *replica) close() {
	if r == nil {
		return
	}
	r.standby.Close()
	r.pool.Close()
}

// markDown sends reads to the primary until retry has passed; the failure
// is logged when the standby goes down, not on every failed query.
func (r *replica) markDown(err error) {
	r.mu.Lock()
	was := r.down
	r.down = true
	r.retryAt = r.nowFn().Add(r.retry)
	r.mu.Unlock()
	if !was {
		r.warnLog("read replica failed; reads go to the primary until it answers again",
			"err", err, "retry_in", r.retry.String(), "database_read", RedactDatabaseURL(r.url))
	}
}

func (r *replica) markUp() {
	r.mu.Lock()
	was := r.down
	r.down = false
	r.mu.Unlock()
	if was {
		r.log("read replica answers again; reads go to it", "database_read", RedactDatabaseURL(r.url))
	}
}

// standbyFailed tells an error of the standby itself (connection lost,
// shutting down, cannot accept connections) from one of the query, which
// the primary would answer alike.
func standbyFailed(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		c := pgErr.Code
		return strings.HasPrefix(c, "08") || strings.HasPrefix(c, "57") || strings.HasPrefix(c, "53")
	}
	return true
}

// replayLSN is the standby's replay position, at most lagCache old.
func (r *replica) replayLSN(ctx context.Context) (LSN, error) {
	r.mu.Lock()
	if r.nowFn().Sub(r.replayAt) < r.lagCache {
		l := r.replay
		r.mu.Unlock()
		return l, nil
	}
	r.mu.Unlock()
	r.probeMu.Lock()
	defer r.probeMu.Unlock()
	r.mu.Lock()
	if r.nowFn().Sub(r.replayAt) < r.lagCache { // another caller just probed
		l := r.replay
		r.mu.Unlock()
		return l, nil
	}
	r.stats.ReplayProbes++
	r.mu.Unlock()
	pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	var text string
	err := r.standby.QueryRowContext(pctx, `SELECT (CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() ELSE pg_current_wal_lsn() END)::text`).Scan(&text)
	var l LSN
	if err == nil {
		l, err = ParseLSN(text)
	}
	if err != nil {
		return 0, err
	}
	r.mu.Lock()
	r.replay, r.replayAt = l, r.nowFn()
	r.mu.Unlock()
	return l, nil
}

// floor is the reader's floor: what the request brought and what this
// process remembers for its key, whichever is higher.
func (r *replica) floor(sc *ReadScope) LSN {
	sc.mu.Lock()
	f := sc.floor
	sc.mu.Unlock()
	if sc.key == "" {
		return f
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if e, ok := r.floors[sc.key]; ok {
		if r.nowFn().After(e.expires) {
			delete(r.floors, sc.key)
		} else if e.lsn > f {
			f = e.lsn
		}
	}
	return f
}

// caughtUp forgets a floor the standby has replayed.
func (r *replica) caughtUp(sc *ReadScope, replay LSN) {
	sc.drop(replay)
	if sc.key == "" {
		return
	}
	r.mu.Lock()
	if e, ok := r.floors[sc.key]; ok && e.lsn <= replay {
		delete(r.floors, sc.key)
	}
	r.mu.Unlock()
}

// pick says whether ctx's read may go to the standby now.
func (r *replica) pick(ctx context.Context) bool {
	sc := scopeOf(ctx)
	if sc == nil || !sc.mayStandby {
		return false
	}
	r.mu.Lock()
	down := r.down && r.nowFn().Before(r.retryAt)
	r.mu.Unlock()
	if down {
		return false
	}
	f := r.floor(sc)
	if f == 0 {
		return true
	}
	replay, err := r.replayLSN(ctx)
	if err != nil {
		if ctx.Err() == nil {
			r.markDown(err)
		}
		return false
	}
	if replay < f {
		return false // its own write is not on the standby yet
	}
	r.caughtUp(sc, replay)
	return true
}

func (r *replica) count(standby, failover bool) {
	r.mu.Lock()
	switch {
	case failover:
		r.stats.Failovers++
		r.stats.Primary++
	case standby:
		r.stats.Standby++
	default:
		r.stats.Primary++
	}
	r.mu.Unlock()
}

// router is the read handle's connection pool: each query goes to the
// standby or the primary as pick says, and a query the standby fails runs
// again on the primary. Reads only: an Exec goes to the primary.
type router struct{ r *replica }

func (p *router) PrepareContext(ctx context.Context, query string) (*sql.Stmt, error) {
	return p.r.primary.PrepareContext(ctx, query)
}

func (p *router) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	return p.r.primary.ExecContext(ctx, query, args...)
}

func (p *router) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	if p.r.pick(ctx) {
		rows, err := p.r.standby.QueryContext(ctx, query, args...)
		if err == nil {
			p.r.markUp()
			p.r.count(true, false)
			return rows, nil
		}
		if ctx.Err() != nil {
			return nil, err
		}
		if standbyFailed(err) {
			p.r.markDown(err)
		}
		p.r.count(false, true)
		return p.r.primary.QueryContext(ctx, query, args...)
	}
	p.r.count(false, false)
	return p.r.primary.QueryContext(ctx, query, args...)
}

func (p *router) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	if p.r.pick(ctx) {
		row := p.r.standby.QueryRowContext(ctx, query, args...)
		err := row.Err()
		if err == nil {
			p.r.markUp()
			p.r.count(true, false)
			return row
		}
		if ctx.Err() != nil {
			return row
		}
		if standbyFailed(err) {
			p.r.markDown(err)
		}
		p.r.count(false, true)
		return p.r.primary.QueryRowContext(ctx, query, args...)
	}
	p.r.count(false, false)
	return p.r.primary.QueryRowContext(ctx, query, args...)
}

// read is the handle of a read that may go to the standby: the request's
// reader decides (see the top of this file). Without a replica it is s.DB.
func (s *Store) read(ctx context.Context) *gorm.DB {
	if s.replica == nil {
		return s.DB.WithContext(ctx)
	}
	return s.replica.db.WithContext(ctx)
}

// noteWrite records, after a commit made for ctx's reader, the primary's WAL
// insert position as the reader's floor: its later reads go to the primary
// until the standby has replayed that far. Only with a replica, and only for
// a request's reader: one short query after the commit.
func (s *Store) noteWrite(ctx context.Context) {
	if s.replica == nil {
		return
	}
	sc := scopeOf(ctx)
	if sc == nil {
		return
	}
	var text string
	err := s.pool.QueryRow(context.WithoutCancel(ctx), `SELECT pg_current_wal_insert_lsn()::text`).Scan(&text)
	var l LSN
	if err == nil {
		l, err = ParseLSN(text)
	}
	if err != nil {
		// Without the position, the reader reads the primary for a while:
		// a floor that no standby position reaches soon.
		s.Logger.Warn("read replica: read the write position", "err", err)
		return
	}
	s.rememberFloor(sc, l)
}

func (s *Store) rememberFloor(sc *ReadScope, l LSN) {
	sc.raise(l)
	if sc.key == "" {
		return
	}
	r := s.replica
	r.mu.Lock()
	defer r.mu.Unlock()
	if e, ok := r.floors[sc.key]; !ok || l > e.lsn {
		r.floors[sc.key] = floorEntry{lsn: l, expires: r.nowFn().Add(r.floorTTL)}
	}
	// Expired floors go when the map is touched.
	if len(r.floors) > 1024 {
		now := r.nowFn()
		for k, e := range r.floors {
			if now.After(e.expires) {
				delete(r.floors, k)
			}
		}
	}
}

// NoteRequestWrite records the primary's write position as the floor of
// ctx's reader when the request changed something that did not go through
// the write path's own note (Write, Transact): the web layer calls it after
// a POST. A no-op without a replica, or when a write was noted already.
func (s *Store) NoteRequestWrite(ctx context.Context) {
	if s.replica == nil {
		return
	}
	sc := scopeOf(ctx)
	if sc == nil {
		return
	}
	sc.mu.Lock()
	noted := sc.changed && sc.floor != 0
	sc.mu.Unlock()
	if !noted {
		s.noteWrite(ctx)
	}
}
