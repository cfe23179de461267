package models

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Group commit (PostgreSQL). Several commands' write functions run one
// after another on one connection, in one transaction: a member whose
// function or statements fail gets its own error and leaves nothing, the
// others go on, and one COMMIT ends the group. So each command keeps its
// atomicity, its idempotency (its key insert commits or not with its
// writes) and its version check (members run in order, so a member sees
// what the ones before it wrote, and a second write to the same session
// sees the first), while the group pays for one commit instead of one per
// command. How a failed member leaves nothing: see runGroup.
//
// Round trips stay those of the single path: a member's last writes travel
// with the next member's first statements (the last member's with COMMIT).
// This is safe for the reason Tx's doc gives: those trailing writes are
// decided on the server (Later), so when one of them fails the server skips
// the rest of the batch, and nothing of it can commit; the failed member is
// dropped and the others run again (write functions may run more than
// once, see Write). A member that still has a statement Go must judge sends
// it before it ends, as commit does.
//
// Two producers of groups: Write's group commit (GroupCommit), which turns
// the writes that queue up while every lane is busy into one group, and
// SubmitResults, which makes one group of a batch of results.

// DefaultGroupLanes is how many writes or groups run at once with group
// commit before further writes queue up for the next group.
const DefaultGroupLanes = 4

// MaxGroupSize bounds the members of one group: the locks one transaction
// holds, and the work a member's failure makes the others do again.
const MaxGroupSize = 48

// GroupStats counts the groups the write path committed: how many, how many
// members they had in all, and the largest.
type GroupStats struct {
	Groups  int64
	Members int64
	Largest int64
}

type groupStats struct {
	groups, members, largest atomic.Int64
}

func (g *groupStats) add(n int) {
	g.groups.Add(1)
	g.members.Add(int64(n))
	for {
		l := g.largest.Load()
		if int64(n) <= l || g.largest.CompareAndSwap(l, int64(n)) {
			return
		}
	}
}

// GroupStats returns what group commit and SubmitResults have grouped so
// far (groups of one member are not counted: they are lone writes).
func (s *Store) GroupStats() GroupStats {
	return GroupStats{Groups: s.groups.stats.groups.Load(), Members: s.groups.stats.members.Load(), Largest: s.groups.stats.largest.Load()}
}

// groupCommit is Write's group commit: up to lanes writes (alone) or groups
// run at once; a write that finds every lane busy queues up, and the lane
// that frees next runs everything queued (up to MaxGroupSize) as one group.
// There is no timer: at low load every write runs at once, alone, exactly
// as without group commit.
type groupCommit struct {
	mu    sync.Mutex
	lanes int // 0: off
	busy  int
	queue []*groupMember
	stats groupStats
}

// SetGroupCommit turns group commit on with lanes lanes (0 turns it off;
// a negative value means DefaultGroupLanes). PostgreSQL only: SQLite's
// single connection serialises writers anyway. Set it before serving.
func (s *Store) SetGroupCommit(lanes int) {
	if lanes < 0 {
		lanes = DefaultGroupLanes
	}
	if s.pool == nil {
		lanes = 0
	}
	s.groups.mu.Lock()
	s.groups.lanes = lanes
	s.groups.mu.Unlock()
}

// groupMember is one write function waiting to run in a group.
type groupMember struct {
	ctx  context.Context
	fn   func(*Tx) error
	done chan struct{}
	// order sorts the members of a SubmitResults group (request order).
	order int
	// What the member came to: its error, and whether it appended events.
	err      error
	appended bool
	// dropped marks an err found on what the member read, in a pass that
	// was then rolled back: what it read may not commit, so the member
	// runs again in the next pass.
	dropped bool
}

func newMember(ctx context.Context, fn func(*Tx) error, order int) *groupMember {
	return &groupMember{ctx: ctx, fn: fn, done: make(chan struct{}), order: order}
}

// writeGrouped runs fn once (Write retries around it): alone when group
// commit is off or a lane is free, otherwise in the next group.
func (s *Store) writeGrouped(ctx context.Context, fn func(*Tx) error) (appended bool, err error) {
	g := &s.groups
	g.mu.Lock()
	if g.lanes == 0 {
		g.mu.Unlock()
		return s.writeAlone(ctx, fn)
	}
	if g.busy < g.lanes {
		g.busy++
		g.mu.Unlock()
		defer s.freeLane()
		return s.writeAlone(ctx, fn)
	}
	m := newMember(ctx, fn, 0)
	g.queue = append(g.queue, m)
	g.mu.Unlock()
	select {
	case <-m.done:
		return m.appended, m.err
	case <-ctx.Done():
		// Still queued: leave, nothing ran. Taken by a group already: the
		// group sees the cancellation before it starts the member, or the
		// member runs to its end; either way wait for the answer, so that a
		// caller is never told "cancelled" about a write that committed.
		g.mu.Lock()
		if i := slices.Index(g.queue, m); i >= 0 {
			g.queue = slices.Delete(g.queue, i, i+1)
			g.mu.Unlock()
			return false, ctx.Err()
		}
		g.mu.Unlock()
		<-m.done
		return m.appended, m.err
	}
}

// freeLane ends a lane's write or group: the lane goes to the writes that
// queued up meanwhile, as one group on a goroutine of its own (so that the
// write that freed the lane returns at once), or is freed.
func (s *Store) freeLane() {
	g := &s.groups
	g.mu.Lock()
	if len(g.queue) == 0 {
		g.busy--
		g.mu.Unlock()
		return
	}
	n := min(len(g.queue), MaxGroupSize)
	members := slices.Clone(g.queue[:n])
	g.queue = slices.Delete(g.queue, 0, n)
	g.mu.Unlock()
	go func() {
		defer s.freeLane()
		if len(members) == 1 {
			m := members[0]
			if m.err = m.ctx.Err(); m.err == nil {
				m.appended, m.err = s.writeAlone(m.ctx, m.fn)
			}
			close(m.done)
			return
		}
		s.runGroup(members)
	}()
}

// writeAlone is the single path: fn in a transaction of its own.
func (s *Store) writeAlone(ctx context.Context, fn func(*Tx) error) (bool, error) {
	var t *Tx
	err := s.writePostgres(ctx, func(tx *Tx) error { t = tx; return fn(tx) })
	return t != nil && t.appended, err
}

// groupTx is what the members' Txs of one group share: the attribution of
// a failure in a member's first batch, which may hold the previous
// member's last writes, and what the member has sent.
type groupTx struct {
	// The first batch of the running member holds, from its start: group
	// control (BEGIN) and the previous member's trailing writes in
	// [tailStart, tailEnd); prefix is the length of all that.
	tailStart, tailEnd, prefix int
	// sent is set once the member's first batch went out; wrote once a
	// statement of its own that is not a read did.
	sent, wrote bool
	// prevErr is the previous member's failure, seen in this batch.
	prevErr error
	// broken is a failure of the group as a whole (its connection or a
	// control statement): no member can commit.
	broken error
}

// errNeighbour is the error of a member's statements that were void
// because the previous member's trailing writes failed in the same batch.
var errNeighbour = errors.New("group: the previous member failed in this batch")

// note attributes the outcome of a member's batch (at is the index of the
// failed statement, -1 for the batch as a whole) and records what the
// member has sent.
func (g *groupTx) note(t *Tx, at int) {
	n := g.prefix
	g.prefix = 0
	g.sent = true
	for i := n; i < len(t.pending) && (t.err == nil || i <= at); i++ {
		if t.pending[i].pg == nil {
			g.wrote = true
		}
	}
	switch {
	case t.err == nil:
	case at < 0 || t.conn.Conn().PgConn().IsClosed():
		g.broken = t.err
	case at >= g.tailStart && at < g.tailEnd:
		g.prevErr, t.err = t.err, errNeighbour
	case at < n:
		g.broken = t.err
	}
}

// errRedo ends a pass of a group whose transaction had to be rolled back
// because a member failed after it wrote: the members still standing run
// again, in a new transaction, without it.
var errRedo = errors.New("group: run again without the failed member")

// runGroup runs members as one group transaction (see the top of this
// file) and closes their done channels with their outcomes set.
//
// Members run without savepoints, optimistically: a member that fails
// before it wrote anything (a stale version, a fenced lease, found by its
// reads) simply drops out, its row locks held to the end of the group; a
// member whose writes fail on the server, or that fails after it wrote,
// aborts the pass: the transaction is rolled back and the others run again
// without it. Failures are rare on the hot path, and a savepoint per member
// would cost two statements and a subtransaction each time.
func (s *Store) runGroup(members []*groupMember) {
	defer func() {
		for _, m := range members {
			close(m.done)
		}
	}()
	s.groups.stats.add(len(members))
	// The group's statements must not be cut short by one member's
	// cancellation (the connection is everyone's); a member's context is
	// looked at before it starts.
	ctx := context.Background()
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		for _, m := range members {
			m.err = fmt.Errorf("begin: %w", err)
		}
		return
	}
	defer conn.Release()
	var live []*groupMember
	var txs map[*groupMember]*Tx
	var broken error
	// Each pass drops at least one member, so there are at most
	// len(members) passes.
	for range len(members) + 1 {
		live, txs = nil, map[*groupMember]*Tx{}
		for _, m := range members {
			if m.dropped {
				m.err, m.dropped = nil, false
			}
		}
		broken = s.groupPass(ctx, conn, members, &live, txs)
		if !errors.Is(broken, errRedo) {
			break
		}
		s.wire.statements.Add(1)
		s.wire.roundTrips.Add(1)
		if _, err := conn.Exec(ctx, "ROLLBACK"); err != nil {
			broken = fmt.Errorf("group: roll back: %w", err)
			break
		}
	}
	for _, m := range members {
		m.dropped = false
	}
	if broken != nil {
		// Nothing committed: every member not failed already (those
		// live, and those the group never reached) fails with the group.
		for _, m := range members {
			if m.err == nil {
				m.err = broken
			}
		}
		live = nil
	}
	for _, m := range live {
		m.appended = txs[m].appended
	}
	if pc := conn.Conn().PgConn(); !pc.IsClosed() && pc.TxStatus() != 'I' {
		(&Tx{conn: conn}).rollback()
	}
}

// groupPass runs the members without an error yet in one transaction and
// commits it. It returns nil when it committed (live holds the members
// whose writes did), errRedo when a member failed in a way that needs the
// transaction rolled back (its error is set), or the group's failure.
func (s *Store) groupPass(ctx context.Context, conn *pgxpool.Conn, members []*groupMember, live *[]*groupMember, txs map[*groupMember]*Tx) error {
	g := &groupTx{}
	carry := []txStmt{{sql: "BEGIN", onErr: failWith("begin")}}
	g.tailStart, g.tailEnd = 1, 1
	var prev *groupMember
	for _, m := range members {
		if m.err != nil {
			continue
		}
		if err := m.ctx.Err(); err != nil {
			m.err = err
			continue
		}
		t := &Tx{ctx: context.WithoutCancel(m.ctx), s: s, conn: conn, group: g, sent: true}
		t.pending = slices.Clone(carry)
		g.prefix, g.sent, g.wrote = len(t.pending), false, false
		err := m.fn(t)
		if err == nil && (len(t.pending) > 0 && !g.sent || slices.ContainsFunc(t.pending, txStmt.judgedInGo)) {
			// Send what Go must judge before the member ends; and a
			// member that sent nothing yet sends now, so that a batch
			// never holds more than one member's own statements.
			err = t.flush()
		}
		switch {
		case g.broken != nil:
			return g.broken
		case g.prevErr != nil:
			// The previous member's trailing writes failed.
			prev.err = g.prevErr
			return errRedo
		case err != nil && (g.wrote || t.err != nil):
			// The member wrote, or its statements failed on the server
			// (the transaction is aborted): only a rollback undoes it.
			m.err = err
			return errRedo
		case err != nil:
			// Failed on what it read, before writing: it drops out. If
			// it sent nothing, carry still goes with the next member.
			m.err, m.dropped = err, true
			if g.sent {
				carry = nil
				g.tailStart, g.tailEnd = 0, 0
			}
		default:
			carry = slices.Clone(t.pending)
			g.tailStart, g.tailEnd = 0, len(carry)
			prev = m
			*live = append(*live, m)
			txs[m] = t
		}
	}
	if len(*live) == 0 {
		return nil // nothing to commit; runGroup rolls back what was begun
	}
	t := &Tx{ctx: ctx, s: s, conn: conn, group: g, sent: true}
	t.pending = append(carry, txStmt{sql: "COMMIT", onErr: failWith("commit"), commit: true})
	g.prefix = len(t.pending) - 1
	err := t.flush()
	switch {
	case err == nil:
		return nil
	case g.prevErr != nil:
		prev.err = g.prevErr
		return errRedo
	case g.broken != nil:
		return g.broken
	}
	return err
}

// resultBatch gathers the writes of one SubmitResults call into one
// group: every item runs SubmitResult on a goroutine of its own, whose
// first write joins the batch; the last item to join, or to finish without
// writing (a contract error), runs the group.
type resultBatch struct {
	mu      sync.Mutex
	waiting int
	members []*groupMember
}

// batchSlot is one item's place in a resultBatch, carried in its context.
type batchSlot struct {
	b      *resultBatch
	order  int
	joined bool
}

type batchSlotKey struct{}

// join adds an item's write to the batch and waits for the group.
func (b *resultBatch) join(s *Store, m *groupMember) {
	b.arrive(s, m)
	<-m.done
}

// leave is an item that finished without joining.
func (b *resultBatch) leave(s *Store) { b.arrive(s, nil) }

// arrive counts an item in, with its write m if it has one; the last item
// to arrive runs the group.
func (b *resultBatch) arrive(s *Store, m *groupMember) {
	b.mu.Lock()
	if m != nil {
		b.members = append(b.members, m)
	}
	b.waiting--
	last := b.waiting == 0
	b.mu.Unlock()
	if last {
		b.run(s)
	}
}

func (b *resultBatch) run(s *Store) {
	members := b.members
	if len(members) == 0 {
		return
	}
	slices.SortFunc(members, func(x, y *groupMember) int { return x.order - y.order })
	if len(members) == 1 {
		m := members[0]
		m.appended, m.err = s.writeAlone(m.ctx, m.fn)
		close(m.done)
		return
	}
	s.runGroup(members)
}

// writeBatched runs fn in the item's batch when this is the item's first
// write (ok false otherwise: a retry, or a later write such as a parent's
// join, goes the usual way).
func (s *Store) writeBatched(ctx context.Context, fn func(*Tx) error) (appended bool, err error, ok bool) {
	slot, _ := ctx.Value(batchSlotKey{}).(*batchSlot)
	if slot == nil || slot.joined {
		return false, nil, false
	}
	slot.joined = true
	m := newMember(ctx, fn, slot.order)
	slot.b.join(s, m)
	return m.appended, m.err, true
}
