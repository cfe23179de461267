package models

import (
	"context"
	"database/sql"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"gorm.io/gorm"
)

// Several windows of one request (the dashboard's window and its trend
// buckets) computed with shared reads: one read of the rollup state; one
// read of the sessions of every folded span (the partial hours at the
// windows' ends, or a whole window without a rolled-up hour) and then
// their histories, 500 sessions a statement, each history folded once for
// every span it belongs to; one statement for the whole hours' counters of
// every window, one for their distinct sessions, one (per 500 sessions) for
// which of the ends' sessions those hours counted, and one for the rejected
// writes of every window. Each per-window read is a branch of a UNION ALL
// that is, word for word, the one-window statement with the window's
// number in front (TestMetricsRollupPlansAtScale EXPLAINs both forms), so
// the statements of a request no longer grow with its trend buckets: the
// dashboard sent about 60 a request, four per bucket.

// windowPlan is how one window is read: the rolled-up whole hours [ua, ub)
// when hours is set, and the spans folded from the event log (its partial
// hours at the ends, or the whole window when it has no rolled-up hour).
type windowPlan struct {
	from, to UTCTime
	hours    bool
	ua, ub   UTCTime
	spans    [][2]UTCTime
}

// planWindow plans [from, to) given how far the rollups reach (ok false
// before the first pass), exactly as one window is read alone. The rolled-up
// part [ua, ub) starts and ends on bucket boundaries: whole hours where the
// hours are rolled up whole, slices in the hour after them. A session's
// previous bucket (metric_session_firsts.prev) is then before ua exactly
// when it is outside [ua, ub), because no bucket straddles ua.
func planWindow(from, to UTCTime, st rollupState, ok bool) windowPlan {
	p := windowPlan{from: from, to: to}
	a, b := ceilHour(from.Time), floorHour(to.Time)
	if ok {
		if !floorHour(from.Time).Before(st.hours) {
			a = ceilSlice(from.Time)
		}
		if !b.Before(st.hours) {
			b = floorSlice(to.Time)
		}
		if st.through.Before(b) {
			b = st.through
		}
	}
	if !ok || !a.Before(b) {
		p.spans = [][2]UTCTime{{from, to}}
		return p
	}
	p.hours, p.ua, p.ub = true, NewUTCTime(a), NewUTCTime(b)
	for _, span := range [][2]UTCTime{{from, p.ua}, {p.ub, to}} {
		if span[0].Time.Before(span[1].Time) {
			p.spans = append(p.spans, span)
		}
	}
	return p
}

// spanKey identifies a folded span.
func spanKey(span [2]UTCTime) [2]int64 { return [2]int64{span[0].UnixNano(), span[1].UnixNano()} }

// newEdgeFold is an empty fold of span that remembers the flags of the
// sessions it saw, per queue.
func newEdgeFold(span [2]UTCTime) *edgeFold {
	e := &edgeFold{fold: newMetricsFold(span[0].Time, span[1].Time), sessions: map[string]map[string]uint8{}}
	e.fold.onActive = func(sf *sessionFold) {
		m := e.sessions[sf.id]
		if m == nil {
			m = map[string]uint8{}
			e.sessions[sf.id] = m
		}
		for q, fl := range sessionFlags(sf) {
			m[q] |= fl
		}
	}
	return e
}

// unionByWindow joins one branch of base per window, each with the
// window's number as its first column (w).
func unionByWindow(base string, windows []int) string {
	var b strings.Builder
	for i, k := range windows {
		if i > 0 {
			b.WriteString("\nUNION ALL\n")
		}
		rest, distinct := strings.CutPrefix(base, "SELECT DISTINCT ")
		if distinct {
			b.WriteString("SELECT DISTINCT ")
		} else {
			rest = strings.TrimPrefix(base, "SELECT ")
			b.WriteString("SELECT ")
		}
		b.WriteString(strconv.Itoa(k) + " AS w, " + rest)
	}
	return b.String()
}

// foldSpans folds the events of every span (each inside or equal to a
// window) with two kinds of statements for all of them: one that finds the
// sessions with an event in each span (a branch per span, over
// events_created_idx), then, 500 sessions a statement, their histories up
// to the latest end of their spans (events_session_seq_key). Each event is
// applied to the fold of every span of its session that it precedes, so
// every fold sees exactly the events its own foldEvents would read.
func (s *Store) foldSpans(db *gorm.DB, spans [][2]UTCTime) (map[[2]int64]*edgeFold, error) {
	out := map[[2]int64]*edgeFold{}
	var uniq [][2]UTCTime
	for _, sp := range spans {
		if out[spanKey(sp)] == nil {
			out[spanKey(sp)] = newEdgeFold(sp)
			uniq = append(uniq, sp)
		}
	}
	if len(uniq) == 0 {
		return out, nil
	}
	branches := make([]int, len(uniq))
	args := make([]any, 0, 2*len(uniq))
	for i, sp := range uniq {
		branches[i] = i
		args = append(args, sp[0], sp[1])
	}
	var found []struct {
		W         int
		SessionID string
	}
	// Planned for its spans every time (see customPlan): they are
	// usually minutes long, sometimes a busy hour.
	if err := s.customPlan(db).Raw(unionByWindow(spanSessionsSQL, branches), args...).Scan(&found).Error; err != nil {
		return nil, fmt.Errorf("metrics: sessions of the windows' ends: %w", err)
	}
	of := map[string][]int{} // the spans of each session
	var ids []string
	for _, r := range found {
		if of[r.SessionID] == nil {
			ids = append(ids, r.SessionID)
		}
		of[r.SessionID] = append(of[r.SessionID], r.W)
	}
	sort.Strings(ids)
	folds := make([]*edgeFold, len(uniq))
	for i, sp := range uniq {
		folds[i] = out[spanKey(sp)]
	}
	size := foldChunkSize
	if s.foldChunkOverride > 0 {
		size = s.foldChunkOverride
	}
	for len(ids) > 0 {
		chunk := ids[:min(len(ids), size)]
		ids = ids[len(chunk):]
		to := UTCTime{}
		for _, id := range chunk {
			for _, k := range of[id] {
				if uniq[k][1].After(to.Time) {
					to = uniq[k][1]
				}
			}
		}
		if err := foldChunkSpans(db, chunk, to, func(sid string) []spanFold {
			ks := of[sid]
			sf := make([]spanFold, len(ks))
			for i, k := range ks {
				f := folds[k].fold
				sf[i] = spanFold{fold: f, to: uniq[k][1].Time, sf: f.newSession(sid)}
			}
			return sf
		}); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// spanFold is one session's history being folded for one span.
type spanFold struct {
	fold *metricsFold
	to   time.Time
	sf   *sessionFold
}

// foldChunkSpans reads the histories (up to to) of some sessions and
// applies each event to the session's folds (open returns them, one per
// span of the session) whose span ends after it, as foldChunk does for one
// fold.
func foldChunkSpans(db *gorm.DB, ids []string, to UTCTime, open func(sid string) []spanFold) error {
	rows, err := db.Raw(foldEventsSQL, metricPayloadTypes, ids, to).Rows()
	if err != nil {
		return fmt.Errorf("metrics: load events: %w", err)
	}
	defer rows.Close()
	var (
		cur     string
		started bool
		folds   []spanFold
	)
	finish := func() {
		for _, f := range folds {
			f.fold.finish(f.sf)
		}
	}
	for rows.Next() {
		ev, err := scanFoldEvent(rows)
		if err != nil {
			return err
		}
		if !started || cur != ev.sessionID {
			finish()
			started, cur, folds = true, ev.sessionID, open(ev.sessionID)
		}
		for _, f := range folds {
			if !ev.at.Before(f.to) {
				continue // after this span's end: its own read would stop before it
			}
			f.fold.step(f.sf, ev)
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("metrics: read events: %w", err)
	}
	finish()
	return nil
}

// windowsMetrics computes windowMetrics (with the rollups) for every
// window of wins, validated, with the reads of all of them shared (see the
// top of this file). The figures are each window's own.
//
// The reads share one snapshot: the rollup state decides which buckets
// and spans the windows read, and a pass that commits meanwhile (an hour
// replacing its slices) would otherwise count the events of the spans
// folded at the windows' ends twice.
func (s *Store) windowsMetrics(ctx context.Context, wins []MetricsOpts) (out []ProductMetrics, err error) {
	var opts *sql.TxOptions
	if s.Dialect == Postgres {
		// SQLite's read transaction is a snapshot already.
		opts = &sql.TxOptions{Isolation: sql.LevelRepeatableRead, ReadOnly: true}
	}
	err = s.read(ctx).Transaction(func(db *gorm.DB) error {
		out, err = s.windowsMetricsIn(db, wins)
		return err
	}, opts)
	return out, err
}

func (s *Store) windowsMetricsIn(db *gorm.DB, wins []MetricsOpts) ([]ProductMetrics, error) {
	st, ok, err := readRollupState(db)
	if err != nil {
		return nil, err
	}
	plans := make([]windowPlan, len(wins))
	var spans [][2]UTCTime
	for i, o := range wins {
		plans[i] = planWindow(NewUTCTime(o.From), NewUTCTime(o.To), st, ok)
		spans = append(spans, plans[i].spans...)
	}
	if s.metricsPlanHook != nil {
		s.metricsPlanHook()
	}
	edges, err := s.foldSpans(db, spans)
	if err != nil {
		return nil, err
	}
	folds := make([]*metricsFold, len(wins))
	var withHours []int
	for i, p := range plans {
		f := newMetricsFold(p.from.Time, p.to.Time)
		folds[i] = f
		if !p.hours {
			// The whole window folded: its fold's figures, sessions
			// included, as foldEvents gives them.
			e := edges[spanKey(p.spans[0])].fold
			f.mergeCounters(e)
			copySessionCounts(f.overall, e.overall)
			for q, a := range e.queues {
				copySessionCounts(f.queue(q), a)
			}
			continue
		}
		withHours = append(withHours, i)
		for _, sp := range p.spans {
			f.mergeCounters(edges[spanKey(sp)].fold)
		}
	}
	if len(withHours) > 0 {
		if err := s.readRollups(db, plans, folds, withHours, edges); err != nil {
			return nil, err
		}
	}
	if err := s.foldRejectionsOf(db, plans, folds); err != nil {
		return nil, err
	}
	out := make([]ProductMetrics, len(wins))
	for i, f := range folds {
		pm := ProductMetrics{From: plans[i].from.Time, To: plans[i].to.Time, Overall: f.overall.set(), Queues: map[string]MetricSet{}}
		for q, a := range f.queues {
			pm.Queues[q] = a.set()
		}
		out[i] = pm.ForQueue(wins[i].Queue)
	}
	return out, nil
}

// copySessionCounts adds the distinct session counts of src to dst.
func copySessionCounts(dst, src *metricAcc) {
	dst.sessions += src.sessions
	dst.reworked += src.reworked
	dst.infraAffected += src.infraAffected
}

// readRollups adds to the folds of the windows withHours their whole hours'
// counters and distinct sessions, and the sessions of their folded ends
// that those hours did not count.
func (s *Store) readRollups(db *gorm.DB, plans []windowPlan, folds []*metricsFold, withHours []int, edges map[[2]int64]*edgeFold) error {
	var sumArgs, sesArgs []any
	for _, k := range withHours {
		sumArgs = append(sumArgs, plans[k].ua, plans[k].ub)
		sesArgs = append(sesArgs, plans[k].ua, plans[k].ub, plans[k].ua)
	}
	var sums []struct {
		W     int
		Queue string
		Name  string
		Total int64
		Top   int64
	}
	if err := db.Raw(unionByWindow(rollupSumsSQL, withHours), sumArgs...).Scan(&sums).Error; err != nil {
		return fmt.Errorf("metrics: read rollups: %w", err)
	}
	for _, r := range sums {
		v := r.Total
		if strings.HasSuffix(r.Name, "_max") {
			v = r.Top
		}
		folds[r.W].accOf(r.Queue).addCounter(r.Name, v)
	}
	var counts []struct {
		W     int
		Queue string
		Kind  string
		N     int64
	}
	if err := db.Raw(unionByWindow(rollupSessionsSQL, withHours), sesArgs...).Scan(&counts).Error; err != nil {
		return fmt.Errorf("metrics: count rollup sessions: %w", err)
	}
	for _, c := range counts {
		acc := folds[c.W].accOf(c.Queue)
		switch c.Kind {
		case kindActive:
			acc.sessions += c.N
		case kindReworked:
			acc.reworked += c.N
		case kindInfra:
			acc.infraAffected += c.N
		}
	}
	// The ends' sessions of each window, each counted unless its whole
	// hours did.
	ends := map[int]map[string]map[string]uint8{}
	all := map[string]bool{}
	for _, k := range withHours {
		for _, sp := range plans[k].spans {
			for id, qs := range edges[spanKey(sp)].sessions {
				m := ends[k]
				if m == nil {
					m = map[string]map[string]uint8{}
					ends[k] = m
				}
				if m[id] == nil {
					m[id] = map[string]uint8{}
				}
				for q, fl := range qs {
					m[id][q] |= fl
				}
				all[id] = true
			}
		}
	}
	ids := make([]string, 0, len(all))
	for id := range all {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for len(ids) > 0 {
		chunk := ids[:min(len(ids), 500)]
		ids = ids[len(chunk):]
		var branches []int
		var args []any
		for _, k := range withHours {
			var mine []string
			for _, id := range chunk {
				if ends[k][id] != nil {
					mine = append(mine, id)
				}
			}
			if len(mine) > 0 {
				branches = append(branches, k)
				args = append(args, mine, plans[k].ua, plans[k].ub)
			}
		}
		var seen []struct {
			W         int
			SessionID string
			Queue     string
			Reworked  bool
			Infra     bool
		}
		if err := db.Raw(unionByWindow(rollupEdgeSessionsSQL, branches), args...).Scan(&seen).Error; err != nil {
			return fmt.Errorf("metrics: rollup sessions of the windows' ends: %w", err)
		}
		type key struct {
			w         int
			id, queue string
		}
		mid := map[key]uint8{}
		for _, r := range seen {
			fl := uint8(activeFlag)
			if r.Reworked {
				fl |= reworkedFlag
			}
			if r.Infra {
				fl |= infraFlag
			}
			mid[key{r.W, r.SessionID, r.Queue}] = fl
		}
		for _, k := range branches {
			for _, id := range chunk {
				for q, fl := range ends[k][id] {
					m := mid[key{k, id, q}]
					acc := folds[k].accOf(q)
					if m == 0 {
						acc.sessions++
					}
					if fl&reworkedFlag != 0 && m&reworkedFlag == 0 {
						acc.reworked++
					}
					if fl&infraFlag != 0 && m&infraFlag == 0 {
						acc.infraAffected++
					}
				}
			}
		}
	}
	return nil
}

// foldRejectionsOf adds the rejected writes counted in each window, per
// queue, in one statement (a branch per window).
func (s *Store) foldRejectionsOf(db *gorm.DB, plans []windowPlan, folds []*metricsFold) error {
	branches := make([]int, len(plans))
	args := make([]any, 0, 2*len(plans))
	for i, p := range plans {
		branches[i] = i
		args = append(args, p.from, p.to)
	}
	var rows []struct {
		W      int
		Queue  string
		Reason string
		N      int64
	}
	if err := db.Raw(unionByWindow(rejectionsSQL, branches), args...).Scan(&rows).Error; err != nil {
		return fmt.Errorf("metrics: count rejections: %w", err)
	}
	for _, r := range rows {
		addRejections(folds[r.W], r.Queue, r.Reason, r.N)
	}
	return nil
}
