package models

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"gorm.io/gorm"
)

// Tx is the transaction of the single write path: the statements that move
// a session, its events and its queue rows together (Execute, Claim).
//
// Statements are queued and sent in groups. Later queues a statement whose
// outcome is only checked when it is sent; Exec and selectTx queue theirs
// and send everything queued, because the caller needs the answer now
// (selectLater queues a read to go with the next one); the commit sends the
// rest. On PostgreSQL a group is one pgx batch, so a
// command costs two or three round trips (BEGIN travels with the first
// read, COMMIT with the last writes) instead of one per statement, and it
// skips GORM and database/sql.
//
// Because COMMIT may travel in the batch of the last writes, a condition
// the command depends on must fail on the server: by the time Go looks at
// the batch's answers the transaction may be committed. This holds by
// construction, not by care. Later takes only a translator of the server's
// error (it never sees a row count, and cannot turn success into failure);
// a statement whose outcome Go judges (laterChecked, selectLater, Exec) is
// marked, and commit sends COMMIT in a round trip of its own, after those
// judgements, whenever a marked statement is still pending. What a write costs in round trips and client
// CPU is what bounds throughput on a small machine (README, "Benchmark
// results"). On SQLite the groups run statement by statement inside a GORM
// transaction, with the same order and the same error rules: a failed
// statement fails the command, and nothing queued after it runs.
type Tx struct {
	ctx     context.Context
	s       *Store
	gdb     *gorm.DB      // SQLite
	conn    *pgxpool.Conn // PostgreSQL
	pending []txStmt
	sent    bool // something was sent already (PostgreSQL)
	// appended is set when an event was queued, so that the commit kicks
	// the feed sequencer (feed.go).
	appended bool
	err      error // the first failure; every later call returns it
	// group is set when the Tx is one member of a group transaction
	// (group.go): its pending statements may start with the tail of the
	// previous member, whose failure is that member's, not this one's.
	group *groupTx
}

// txStmt is one queued statement: an exec whose server error onErr
// translates, an exec with a Go-side check of its outcome, or a query with a
// reader for its rows (one per dialect).
type txStmt struct {
	sql   string
	args  []any
	onErr func(err error) error
	check func(rows int64, err error) error
	pg    func(pgx.Rows) error
	lite  func(db *gorm.DB) error
	// commit marks the COMMIT, whose failure modes differ from a statement's.
	commit bool
}

// judgedInGo reports whether Go decides the statement's outcome (a check of
// its row count, rows decoded into Go values): such a decision must be made
// before COMMIT is sent.
func (st txStmt) judgedInGo() bool { return st.check != nil || st.pg != nil || st.lite != nil }

// fail is the command's error for the statement's server error err (nil
// when the statement succeeded): onErr may name or wrap it, never drop it.
func (st txStmt) fail(err error) error {
	if err == nil {
		return nil
	}
	if e := st.onErr(err); e != nil {
		return e
	}
	return err
}

// wireStats counts what the write path sends, for the benchmark.
type wireStats struct {
	statements atomic.Int64
	roundTrips atomic.Int64
}

// WireStats returns the statements and the round trips the write path has
// sent so far (on SQLite a round trip is one statement).
func (s *Store) WireStats() (statements, roundTrips int64) {
	return s.wire.statements.Load(), s.wire.roundTrips.Load()
}

// failWith translates a statement's server error into one with context.
func failWith(format string, a ...any) func(error) error {
	return func(err error) error {
		return fmt.Errorf(format+": %w", append(a, err)...)
	}
}

// Later queues a statement whose outcome is decided on the server: the
// command fails only if the statement fails there, and onErr, called with
// that error, may name or wrap it (a nil return keeps it as it is). It sees
// no row count on purpose: on PostgreSQL the COMMIT may travel in the same
// batch, so a condition the command depends on must make the statement
// itself fail (see appendEvent). A check that must look at the outcome in
// Go is laterChecked's, which keeps COMMIT out of its batch.
func (t *Tx) Later(onErr func(err error) error, query string, args ...any) {
	t.pending = append(t.pending, txStmt{sql: query, args: args, onErr: onErr})
}

// laterChecked queues a statement whose outcome check judges in Go: it sees
// the rows affected and the error and returns what the command should fail
// with (nil to go on). COMMIT is never sent in the same batch as a pending
// laterChecked statement (see commit), so the check always runs before the
// transaction can commit; on PostgreSQL it costs a round trip when it is
// still pending at the commit.
func (t *Tx) laterChecked(check func(rows int64, err error) error, query string, args ...any) {
	t.pending = append(t.pending, txStmt{sql: query, args: args, check: check})
}

// Exec runs a statement, and everything queued before it, now.
func (t *Tx) Exec(query string, args ...any) (int64, error) {
	var n int64
	var execErr error
	t.laterChecked(func(rows int64, err error) error {
		n, execErr = rows, err
		return err
	}, query, args...)
	if err := t.flush(); err != nil {
		if execErr != nil {
			return 0, execErr
		}
		return 0, err
	}
	return n, nil
}

// selectTx runs a query, and everything queued before it, now, and returns
// its rows: structs are filled by column name (snake_case columns to
// CamelCase fields, as GORM does; embedded structs too), other types from a
// single column.
func selectTx[T any](t *Tx, query string, args ...any) ([]T, error) {
	var out []T
	queryErr := selectLater(t, &out, query, args...)
	if err := t.flush(); err != nil {
		if *queryErr != nil {
			return nil, *queryErr
		}
		return nil, err
	}
	return out, nil
}

// selectLater queues a query whose rows land in *dest when it is sent, so
// that several reads share a round trip. The returned error is the query's
// own, once it has run.
func selectLater[T any](t *Tx, dest *[]T, query string, args ...any) *error {
	queryErr := new(error)
	st := txStmt{sql: query, args: args}
	st.lite = func(db *gorm.DB) error {
		*queryErr = db.Raw(query, args...).Scan(dest).Error
		return *queryErr
	}
	st.pg = func(rows pgx.Rows) error {
		var err error
		if byName[T]() {
			*dest, err = pgx.CollectRows(rows, pgx.RowToStructByNameLax[T])
		} else {
			*dest, err = pgx.CollectRows(rows, pgx.RowTo[T])
		}
		*queryErr = err
		return err
	}
	t.pending = append(t.pending, st)
	return queryErr
}

// byName reports whether T is read by column name: a struct that is not a
// value type of its own (a time, a scanner).
func byName[T any]() bool {
	typ := reflect.TypeFor[T]()
	if typ.Kind() != reflect.Struct || typ == reflect.TypeFor[time.Time]() {
		return false
	}
	return !reflect.PointerTo(typ).Implements(reflect.TypeFor[interface{ Scan(any) error }]())
}

// flush sends the queued statements and runs their checks in order; it
// stops at the first failure, which it keeps.
func (t *Tx) flush() error {
	if t.err != nil {
		t.pending = t.pending[:0]
		return t.err
	}
	if len(t.pending) == 0 {
		return nil
	}
	if t.conn != nil {
		var at int
		at, t.err = t.flushPostgres()
		if g := t.group; g != nil {
			g.note(t, at)
		}
	} else {
		t.err = t.flushSQLite()
	}
	t.pending = t.pending[:0]
	return t.err
}

func (t *Tx) flushSQLite() error {
	for _, st := range t.pending {
		t.s.wire.statements.Add(1)
		t.s.wire.roundTrips.Add(1)
		if st.lite != nil {
			if err := st.lite(t.gdb); err != nil {
				return err
			}
			continue
		}
		res := t.gdb.Exec(st.sql, st.args...)
		if st.check == nil {
			if err := st.fail(res.Error); err != nil {
				return err
			}
			continue
		}
		if err := st.check(res.RowsAffected, res.Error); err != nil {
			return err
		}
		if res.Error != nil {
			return res.Error
		}
	}
	return nil
}

// flushPostgres sends the pending statements as one batch and returns the
// index of the statement that failed (len(pending) when none did) and the
// failure.
func (t *Tx) flushPostgres() (int, error) {
	var b pgx.Batch
	for _, st := range t.pending {
		q, args := rebind(st.sql, st.args)
		b.Queue(q, args...)
	}
	t.s.wire.statements.Add(int64(len(t.pending)))
	t.s.wire.roundTrips.Add(1)
	t.sent = true
	br := t.conn.SendBatch(t.ctx, &b)
	var first error
	at := len(t.pending)
	for i, st := range t.pending {
		var err error
		switch {
		case st.pg != nil:
			rows, qerr := br.Query()
			if qerr != nil {
				if rows != nil {
					rows.Close()
				}
				err = qerr
			} else {
				err = st.pg(rows)
			}
		case st.commit:
			ct, cerr := br.Exec()
			if cerr == nil && ct.String() != "COMMIT" {
				cerr = fmt.Errorf("commit: the transaction was rolled back (%s)", ct.String())
			}
			err = st.fail(cerr)
		case st.check == nil:
			_, xerr := br.Exec()
			err = st.fail(xerr)
		default:
			ct, xerr := br.Exec()
			err = st.check(ct.RowsAffected(), xerr)
			if err == nil && xerr != nil {
				err = xerr
			}
		}
		if err != nil {
			first, at = err, i
			break
		}
	}
	if cerr := br.Close(); first == nil && cerr != nil {
		first, at = cerr, 0
	}
	return at, first
}

// rebind turns GORM-style ? placeholders into PostgreSQL's $n, expanding a
// slice argument into a parenthesised list (for IN ?), as GORM does. Question marks in
// string literals are left alone.
func rebind(query string, args []any) (string, []any) {
	hasSlice := false
	for _, a := range args {
		if isListArg(a) {
			hasSlice = true
			break
		}
	}
	if !hasSlice {
		if q, ok := rebound.Load(query); ok {
			return q.(string), args
		}
	}
	var b strings.Builder
	b.Grow(len(query) + 16)
	out := args
	if hasSlice {
		out = make([]any, 0, len(args))
	}
	n, inQuote := 0, false
	for i := 0; i < len(query); i++ {
		c := query[i]
		if c == '\'' {
			inQuote = !inQuote
		}
		if c != '?' || inQuote || n >= len(args) {
			b.WriteByte(c)
			continue
		}
		a := args[n]
		n++
		if !hasSlice {
			fmt.Fprintf(&b, "$%d", n)
			continue
		}
		if !isListArg(a) {
			out = append(out, a)
			fmt.Fprintf(&b, "$%d", len(out))
			continue
		}
		v := reflect.ValueOf(a)
		if v.Len() == 0 {
			b.WriteString("(NULL)") // matches nothing, like an empty list
			continue
		}
		b.WriteByte('(')
		for j := range v.Len() {
			if j > 0 {
				b.WriteString(", ")
			}
			out = append(out, v.Index(j).Interface())
			fmt.Fprintf(&b, "$%d", len(out))
		}
		b.WriteByte(')')
	}
	q := b.String()
	if !hasSlice {
		rebound.Store(query, q)
	}
	return q, out
}

// rebound caches rebind's answers for queries without list arguments: the
// write path sends the same few dozen statements over and over.
var rebound sync.Map

func isListArg(a any) bool {
	if a == nil {
		return false
	}
	k := reflect.TypeOf(a).Kind()
	return k == reflect.Slice && reflect.TypeOf(a).Elem().Kind() != reflect.Uint8
}

// Write runs fn in a write transaction and commits it, retrying the whole
// of it when the database reports a serialization failure or a deadlock. fn
// may run more than once, so it must not have effects outside tx.
func (s *Store) Write(ctx context.Context, fn func(tx *Tx) error) error {
	appended := false
	err := s.retry(ctx, func() error {
		if s.pool == nil {
			return s.DB.WithContext(ctx).Transaction(func(gdb *gorm.DB) error {
				t := &Tx{ctx: ctx, s: s, gdb: gdb}
				if err := fn(t); err != nil {
					return err
				}
				appended = t.appended
				return t.flush()
			})
		}
		if a, err, ok := s.writeBatched(ctx, fn); ok {
			appended = a
			return err
		}
		var err error
		appended, err = s.writeGrouped(ctx, fn)
		return err
	})
	if err == nil {
		s.noteWrite(ctx)
	}
	if err == nil && appended {
		// Committed events get their feed positions from the sequencer,
		// after commit and off the write path: a channel send, no round trip.
		s.kickSequencer()
	}
	return err
}

func (s *Store) writePostgres(ctx context.Context, fn func(tx *Tx) error) error {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer conn.Release()
	t := &Tx{ctx: ctx, s: s, conn: conn}
	t.Later(failWith("begin"), "BEGIN")
	err = fn(t)
	if err == nil {
		err = t.commit()
	}
	if err != nil {
		t.rollback()
	}
	return err
}

// commit sends what is pending and COMMIT (PostgreSQL). COMMIT joins the
// batch of the last writes only when every pending statement is decided on
// the server; when Go still has to judge one (laterChecked, selectLater),
// the batch goes first and COMMIT follows in a round trip of its own, so
// that a rejection in Go can never come after the commit.
func (t *Tx) commit() error {
	judged := false
	for _, st := range t.pending {
		judged = judged || st.judgedInGo()
	}
	switch {
	case judged:
		if err := t.flush(); err != nil {
			return err
		}
	case !t.sent:
		// Nothing had to be read: the whole command is one batch, and
		// PostgreSQL runs a batch (one Sync) as one implicit transaction,
		// so BEGIN and COMMIT are not needed.
		t.pending = t.pending[1:]
		return t.flush()
	}
	t.pending = append(t.pending, txStmt{sql: "COMMIT", onErr: failWith("commit"), commit: true})
	return t.flush()
}

// rollback ends a transaction that failed; a connection that cannot is
// closed, so the pool never hands out one inside a transaction.
func (t *Tx) rollback() {
	pc := t.conn.Conn().PgConn()
	if pc.IsClosed() || pc.TxStatus() == 'I' {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := t.conn.Exec(ctx, "ROLLBACK"); err != nil {
		_ = t.conn.Conn().Close(ctx)
	}
}

// retry runs fn until it succeeds or fails with an error that retrying
// cannot fix, with a short jittered backoff, at most 8 times.
func (s *Store) retry(ctx context.Context, fn func() error) error {
	var err error
	for attempt := 0; attempt < 8; attempt++ {
		err = fn()
		if err == nil || !retryable(err) {
			return err
		}
		backoff := time.Duration(1<<attempt)*time.Millisecond + time.Duration(rand.IntN(1000))*time.Microsecond
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(backoff):
		}
	}
	return err
}
