package models_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
)

// queryCounter counts the SQL statements a store runs and the rows they
// return, through GORM callbacks on every kind of read.
type queryCounter struct {
	on         atomic.Bool
	statements atomic.Int64
	rows       atomic.Int64
}

func countQueries(t *testing.T, s *models.Store) *queryCounter {
	t.Helper()
	c := &queryCounter{}
	count := func(db *gorm.DB) {
		if c.on.Load() {
			c.statements.Add(1)
			c.rows.Add(db.Statement.RowsAffected)
		}
	}
	cb := s.DB.Callback()
	for name, err := range map[string]error{
		"query": cb.Query().After("gorm:query").Register("test:count_query", count),
		"row":   cb.Row().After("gorm:row").Register("test:count_row", count),
		"raw":   cb.Raw().After("gorm:raw").Register("test:count_raw", count),
	} {
		if err != nil {
			t.Fatalf("register %s callback: %v", name, err)
		}
	}
	return c
}

func (c *queryCounter) measure(fn func()) (statements, rows int64) {
	c.statements.Store(0)
	c.rows.Store(0)
	c.on.Store(true)
	fn()
	c.on.Store(false)
	return c.statements.Load(), c.rows.Load()
}

// longSession builds a session with n events: created and delegated
// through the write path, then pause/resume pairs. The pairs in the middle
// are built the way ExecuteTx builds them (Apply, ComputeHash, the chain)
// but inserted in batches, because 10,000 round trips per event would make
// the test slow on PostgreSQL; the last two go through Transition again, so
// the write path has to continue the chain from the stored row, and the
// test's Verify proves the whole log replays to the stored state.
func longSession(ctx context.Context, t *testing.T, s *models.Store, n int64) string {
	t.Helper()
	queue := "long-" + strings.ToLower(models.NewID("q")[2:12])
	sid, _ := storetest.Delegated(ctx, t, s, queue)
	row, err := s.GetSession(ctx, sid)
	if err != nil {
		t.Fatal(err)
	}
	st, err := row.Decode()
	if err != nil {
		t.Fatal(err)
	}
	payload, err := models.Canonical(models.ReasonPayload{Reason: "customer on holiday"})
	if err != nil {
		t.Fatal(err)
	}
	prev, at := row.LastHash, row.UpdatedAt.Time
	evs := make([]models.Event, 0, n)
	for st.Version < n-2 {
		typ := models.EventSessionPaused
		if st.Status == models.StatusPaused {
			typ = models.EventSessionResumed
		}
		at = at.Add(time.Millisecond)
		e := models.Event{
			ID: models.NewID("evt"), SessionID: sid, Seq: st.Version + 1, Type: typ, Actor: "test:controller",
			VersionBefore: st.Version, VersionAfter: st.Version + 1, Payload: string(payload), PrevHash: prev,
			CreatedAt: models.NewUTCTime(at),
		}
		e.Hash = models.ComputeHash(e)
		if st, err = models.Apply(st, e); err != nil {
			t.Fatalf("apply %d: %v", e.Seq, err)
		}
		prev = e.Hash
		evs = append(evs, e)
	}
	state, err := models.EncodeState(st)
	if err != nil {
		t.Fatal(err)
	}
	err = s.DB.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := tx.CreateInBatches(evs, 500).Error; err != nil {
			return err
		}
		if err := tx.Exec(`UPDATE session_states SET state = ? WHERE session_id = ?`, string(state), sid).Error; err != nil {
			return err
		}
		return tx.Exec(`UPDATE sessions SET state_version = ?, last_seq = ?, status = ?, last_hash = ?, updated_at = ? WHERE id = ?`,
			st.Version, st.Version, st.Status, prev, models.NewUTCTime(at), sid).Error
	})
	if err != nil {
		t.Fatalf("insert %d events: %v", len(evs), err)
	}
	for _, et := range []models.EventType{models.EventSessionPaused, models.EventSessionResumed} {
		v := st.Version
		out, err := s.Transition(ctx, sid, et, "test:controller", "", models.TransitionInput{ExpectedVersion: &v, Reason: "last ones"})
		if err != nil {
			t.Fatalf("%s at version %d: %v", et, v, err)
		}
		st.Version = out.StateVersion
	}
	return sid
}

// TestLatestStateCost reads the latest state of a session with 10,000
// events and of one with 10: both must cost exactly the same statements and
// rows, because the state is a projection row, not a replay of the history.
func TestLatestStateCost(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		long := longSession(ctx, t, s, 10_000)
		short := longSession(ctx, t, s, 10)
		c := countQueries(t, s)

		var rows [2]models.Session
		cost := func(i int, sid string) (int64, int64) {
			return c.measure(func() {
				var err error
				if rows[i], err = s.GetSession(ctx, sid); err != nil {
					t.Fatalf("get session: %v", err)
				}
			})
		}
		ls, lr := cost(0, long)
		ss, sr := cost(1, short)
		if ls != ss || lr != sr {
			t.Fatalf("latest state of 10,000 events: %d statements, %d rows; of 10 events: %d statements, %d rows", ls, lr, ss, sr)
		}
		if ls != 1 || lr != 1 {
			t.Fatalf("GetSession cost %d statements and %d rows, want 1 and 1", ls, lr)
		}
		if rows[0].StateVersion != 10_000 || rows[1].StateVersion != 10 {
			t.Fatalf("versions = %d, %d", rows[0].StateVersion, rows[1].StateVersion)
		}
		// The state itself does not grow with the history.
		if len(rows[0].State) > len(rows[1].State)+16 {
			t.Fatalf("state of the long session is %d bytes, of the short one %d", len(rows[0].State), len(rows[1].State))
		}
		// So the context packet, built from it, costs nothing more either.
		lst, _ := rows[0].Decode()
		sst, _ := rows[1].Decode()
		if lp, sp := mustJSON(t, models.BuildPacket(lst, "")), mustJSON(t, models.BuildPacket(sst, "")); len(lp) > len(sp)+16 {
			t.Fatalf("packet of the long session is %d bytes, of the short one %d", len(lp), len(sp))
		}

		// The fixture is a true log: it replays to the stored states.
		rep, err := s.Verify(ctx, models.VerifyOpts{})
		if err != nil || !rep.OK() || rep.Events != 10_010 {
			t.Fatalf("verify = %+v, %v", rep, err)
		}
	})
}
