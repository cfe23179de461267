package models

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// The support console's read models: the inbox of sessions waiting for a
// human, and what the session page needs besides the state itself (the
// timeline, children, the diff between two versions).

// inboxStatuses are the statuses a session has while it is in human hands.
// They are spelled out as SQL literals, not parameters, so that the planner
// can match the partial indexes of migration 00004 whatever the plan cache does.
const inboxWhere = `status IN ('escalated', 'human_active')`

// Assignment filters of the inbox.
const (
	AssignedToMe = "me"
	Unassigned   = "unassigned"
)

// InboxFilter narrows the inbox. Zero values mean "any".
type InboxFilter struct {
	Status     Status // StatusEscalated or StatusHumanActive
	Queue      string
	Priority   int    // 1..5
	Assignment string // AssignedToMe or Unassigned
	// Search matches a session id exactly, or words of the goal, ticket_ref
	// and notes, with the word search of ListSessions.
	Search string
	// Reason is the escalation's reason code.
	Reason ReasonCode
}

// Validate lists every problem with the filter.
func (f InboxFilter) Validate() error {
	v := &ValidationError{}
	CheckNUL(v, "", f) // every text field; see NULMessage
	if f.Status != "" && f.Status != StatusEscalated && f.Status != StatusHumanActive {
		v.Add("status", "must be escalated or human_active")
	}
	if f.Queue != "" && !namePattern.MatchString(f.Queue) {
		v.Add("queue", "must be 1-64 letters, digits, '.', '_' or '-'")
	}
	if f.Priority != 0 && (f.Priority < 1 || f.Priority > 5) {
		v.Add("priority", "must be between 1 and 5")
	}
	if f.Assignment != "" && f.Assignment != AssignedToMe && f.Assignment != Unassigned {
		v.Add("assigned", "must be me or unassigned")
	}
	if f.Reason != "" && !f.Reason.Valid() {
		v.Add("reason", "must be one of %s", reasonList())
	}
	if len(f.Search) > MaxSearchLen {
		v.Add("q", "must be at most %d characters", MaxSearchLen)
	} else if len(searchPhrases(f.Search)) > MaxSearchPhrases {
		v.Add("q", "must have at most %d terms", MaxSearchPhrases)
	}
	return v.Err()
}

// InboxOpts asks for one page of the inbox.
type InboxOpts struct {
	InboxFilter
	// Me is the assignee value of the user looking (AssigneeOf), for the
	// "assigned to me" filter and its count.
	Me string
	// After is the cursor of the previous page's last row (InboxPage.Next).
	After string
	Limit int
}

// Inbox page sizes.
const (
	DefaultInboxLimit = 50
	MaxInboxLimit     = 200
)

// InboxRow is one session in the inbox: projection columns only, never the
// state body, so that a page costs the same whatever the sessions hold.
type InboxRow struct {
	ID           string
	TicketRef    string
	Goal         string
	Status       Status
	Priority     int
	StateVersion int64
	CurrentStep  string
	Queue        string
	Assignee     string
	EscalatedAt  UTCTime
	UpdatedAt    UTCTime
	ReasonCode   ReasonCode
	// SLA is the escalation's SLA clock at the time of the query.
	SLA SLAClock `gorm:"-"`
}

// InboxCounts are the faceted counts of the inbox: for each option of a
// filter, how many sessions match it together with the other active filters
// and the search, so that each number is what clicking it would show. Every
// count is bounded: a value above CountCap means "more than CountCap".
type InboxCounts struct {
	Total      int64 // matching every active filter and the search: the rows
	All        int64 // the whole inbox, no filter, no search
	Status     map[Status]int64
	Queue      map[string]int64
	Priority   map[int]int64
	Assignment map[string]int64 // AssignedToMe, Unassigned
	Reason     map[ReasonCode]int64
	// AnyStatus, AnyQueue, AnyPriority, AnyAssignment and AnyReason count
	// the "any" option of each filter.
	AnyStatus, AnyQueue, AnyPriority, AnyAssignment, AnyReason int64
}

// Queues lists the queues with sessions in the inbox, sorted.
func (c InboxCounts) Queues() []string {
	qs := make([]string, 0, len(c.Queue))
	for q := range c.Queue {
		qs = append(qs, q)
	}
	sort.Strings(qs)
	return qs
}

// InboxPage is one page of the inbox.
type InboxPage struct {
	Rows []InboxRow
	// Next is the cursor of the next page, empty on the last page.
	Next   string
	Counts InboxCounts
}

// inboxKey is the position of a row in the inbox order. The order itself is
// (SLA due, priority, escalated_at, id); the due time is derived from the
// priority and escalated_at with the SLA policy, so it is not stored.
type inboxKey struct {
	Priority    int     `json:"p"`
	EscalatedAt UTCTime `json:"e"`
	ID          string  `json:"i"`
}

func encodeInboxCursor(r InboxRow) string {
	return encodeCursor(inboxKey{Priority: r.Priority, EscalatedAt: r.EscalatedAt, ID: r.ID})
}

func decodeInboxCursor(s string) (inboxKey, error) {
	var k inboxKey
	if err := decodeCursor(s, &k); err != nil || k.ID == "" || k.EscalatedAt.IsZero() || k.Priority < MinPriority || k.Priority > MaxPriority {
		return k, &ValidationError{Fields: []FieldError{{Field: "after", Message: "is not a cursor of this inbox"}}}
	}
	return k, nil
}

// The priorities a session can have (CreateSessionInput.Validate).
const (
	MinPriority = 1
	MaxPriority = 5
)

// AssigneeOf is the assignee value the takeover commands record for u, so
// that the inbox can tell "assigned to me".
func AssigneeOf(u User) string { return u.Actor() }

const inboxColumns = "id, ticket_ref, goal, status, priority, state_version, current_step, queue, assignee, escalated_at, updated_at, reason_code"

// inboxMatchColumns are the columns of a search's matches (on PostgreSQL)
// that the page's order and cursor, the filters and the facet counts read.
const inboxMatchColumns = "id, status, priority, queue, assignee, escalated_at, reason_code"

// Inbox returns one page of the sessions in human hands, most urgent first
// (SLA due, then priority, then the longest waiting), and the counts of every
// filter option.
//
// The due time is escalated_at plus the SLA of the priority, so within one
// priority due order is escalated_at order. The page is therefore one query:
// a UNION ALL with a branch per priority, each a keyset range read in order
// from the partial indexes of migration 00004 and cut at the page size, and
// the branches are merged here. It costs the same on page 1 and page 2,000,
// with 100,000 sessions.
func (s *Store) Inbox(ctx context.Context, o InboxOpts) (InboxPage, error) {
	o.Search = strings.TrimSpace(o.Search)
	if err := o.InboxFilter.Validate(); err != nil {
		return InboxPage{}, err
	}
	if o.Limit <= 0 {
		o.Limit = DefaultInboxLimit
	}
	o.Limit = min(o.Limit, MaxInboxLimit)
	var after *inboxKey
	if o.After != "" {
		k, err := decodeInboxCursor(o.After)
		if err != nil {
			return InboxPage{}, err
		}
		after = &k
	}
	policy := s.slaPolicy()
	// A search first reads the inbox sessions it matches, once, through the
	// word-search index of the sessions in human hands (both statuses: the
	// status chips count the other one too); the branches then order and
	// cut those, and the facet counts group them. Without it, each branch
	// read its priority in order and computed every row's document until
	// it had a page: at a million events, over a thousand documents a page
	// view.
	from, prefix, args := "sessions", "", []any(nil)
	// The page's rows come from the dense copy of the inbox sessions on
	// PostgreSQL (migrations 00034 and 00035): through the partial indexes
	// of sessions every row of a page was a heap page of its own.
	pageFrom := from
	if s.Dialect == Postgres {
		pageFrom = "inbox_rows"
	}
	due, byDue := s.inboxDueSQL(policy)
	if o.Search != "" {
		where, a := s.inboxFilterSQL(InboxOpts{InboxFilter: InboxFilter{Search: o.Search}})
		materialized, src, columns := "", "sessions", inboxColumns
		if s.Dialect == Postgres {
			// The dense copy of the inbox sessions (migration 00034): the
			// matches sit on a few hundred pages instead of one page each.
			materialized, src = "MATERIALIZED ", "inbox_rows"
		}
		if byDue {
			// Only what the order, the filters and the facet counts read:
			// the page's rows fetch the rest by id (inboxMatchesPage). With
			// every column, copying a common word's matches (1,482 at a
			// million events) into the CTE took a third of the statement.
			columns = inboxMatchColumns
		}
		prefix = "WITH m AS " + materialized + "(SELECT " + columns + " FROM " + src + " WHERE " + inboxWhere + where + ")\n"
		from, pageFrom, args = "m", "m", a
	}
	unsearched := o
	unsearched.Search = ""
	filter, fa := s.inboxFilterSQL(unsearched)
	var page string
	if byDue && o.Search != "" {
		page, args = s.inboxMatchesPage(o, after, policy, due, filter, fa, args)
	} else {
		page, args = s.inboxBranchesPage(o, after, policy, pageFrom, filter, fa, args)
	}
	branches := []string{"SELECT 0 AS kind, r.*, 0 AS mine, 0 AS unassigned, 0 AS n FROM (" + page + ") AS r"}
	// The facet counts travel in the same statement (see inboxCounts).
	facets, facetArgs, cut, precounted := s.inboxFacetSQL(o, from)
	branches = append(branches, facets...)
	args = append(args, facetArgs...)
	rows, groups, queueSums, err := s.scanInbox(ctx, prefix+strings.Join(branches, "\nUNION ALL\n"), args)
	if err != nil {
		return InboxPage{}, err
	}
	now := s.now()
	for i := range rows {
		rows[i].SLA = policy.Clock(rows[i].Priority, rows[i].EscalatedAt.Time, now)
	}
	sort.Slice(rows, func(i, j int) bool { return inboxLess(rows[i], rows[j]) })
	out := InboxPage{Rows: rows}
	if len(rows) > o.Limit {
		out.Rows = rows[:o.Limit]
		out.Next = encodeInboxCursor(out.Rows[o.Limit-1])
	}
	out.Counts, err = s.inboxCounts(ctx, o, groups, queueSums, cut, precounted)
	return out, err
}

// inboxBranchesPage is the page part of the inbox statement over from: one
// branch per priority, each reading its rows in (escalated_at, id) order
// from an index that leads with its filter (inbox_rows' of migration 00035 on
// PostgreSQL, sessions' of migration 00004 on SQLite, or the search's matches)
// and cut at the page size, then merged. It returns the SQL and args with
// the page's arguments appended.
func (s *Store) inboxBranchesPage(o InboxOpts, after *inboxKey, policy SLAPolicy, from, filter string, fa, args []any) (string, []any) {
	var branches []string
	for p := MinPriority; p <= MaxPriority; p++ {
		if o.Priority != 0 && p != o.Priority {
			continue
		}
		// The priority and the limits are literals, not parameters: with
		// them unknown, a generic plan's estimate (a tenth of the rows per
		// LIMIT) stays above the custom plans' at a million events, so
		// PostgreSQL planned the statement again on every view, 1.0 ms
		// of a 1.1 ms execution (0.1 ms at ten thousand, where the
		// generic plan won). TestInboxScalesOnPostgres holds it to one plan.
		q := "SELECT " + inboxColumns + " FROM " + from + " WHERE " + inboxBase(o.InboxFilter) + " AND priority = " + strconv.Itoa(p) + filter
		args = append(args, fa...)
		if after != nil {
			// Rows of priority p after the cursor: due later, or due at the
			// same time with a greater (priority, escalated_at, id).
			due := after.EscalatedAt.Add(policy.For(after.Priority))
			at := NewUTCTime(due.Add(-policy.For(p)))
			switch {
			case p == after.Priority:
				q += " AND (escalated_at, id) > (" + s.timeParam() + ", ?)"
				args = append(args, after.EscalatedAt, after.ID)
			case p < after.Priority:
				q += " AND escalated_at > " + s.timeParam()
				args = append(args, at)
			default:
				q += " AND escalated_at >= " + s.timeParam()
				args = append(args, at)
			}
		}
		// One row more than the page tells whether there is a next page.
		q += " ORDER BY escalated_at, id LIMIT " + strconv.Itoa(o.Limit+1)
		branches = append(branches, "SELECT * FROM ("+q+") AS p"+strconv.Itoa(p))
	}
	page := "SELECT * FROM (" + strings.Join(branches, "\nUNION ALL\n") + ") AS u"
	if due, ok := s.inboxDueSQL(policy); ok && len(branches) > 1 {
		// Merged and cut to one page on the server, in the inbox order: the
		// branches hold up to five pages' worth of rows, which cost more to
		// send and scan than the rest of the inbox.
		page = "SELECT * FROM (SELECT * FROM (" + strings.Join(branches, "\nUNION ALL\n") + ") AS v\nORDER BY " + due + ", priority, escalated_at, id LIMIT " + strconv.Itoa(o.Limit+1) + ") AS u"
	}
	return page, args
}

// inboxMatchesPage is the page part of a search's inbox statement on
// PostgreSQL: the matches are materialized already (m), so one pass over
// them in the inbox order (due is inboxDueSQL), cut at the page size,
// replaces the five priority branches, each of which scanned and sorted
// every match. The cursor is the same row comparison as the branches'
// conditions: after the cursor's (due, priority, escalated_at, id).
func (s *Store) inboxMatchesPage(o InboxOpts, after *inboxKey, policy SLAPolicy, due, filter string, fa, args []any) (string, []any) {
	q := "SELECT id FROM m WHERE " + inboxBase(o.InboxFilter) + filter
	args = append(args, fa...)
	if o.Priority != 0 {
		q += " AND priority = " + strconv.Itoa(o.Priority)
	} else {
		// The branches read the known priorities only.
		q += " AND priority BETWEEN " + strconv.Itoa(MinPriority) + " AND " + strconv.Itoa(MaxPriority)
	}
	if after != nil {
		q += " AND (" + due + ", priority, escalated_at, id) > (" + s.timeParam() + ", ?, " + s.timeParam() + ", ?)"
		args = append(args, NewUTCTime(after.EscalatedAt.Add(policy.For(after.Priority))), after.Priority, after.EscalatedAt, after.ID)
	}
	// The page's ids in order, then their rows by primary key: m holds
	// the narrow inboxMatchColumns. Inbox sorts the page again, so the
	// join may return the rows in any order.
	return "SELECT i." + strings.ReplaceAll(inboxColumns, ", ", ", i.") + " FROM (" + q + " ORDER BY " + due + ", priority, escalated_at, id LIMIT " + strconv.Itoa(o.Limit+1) + ") AS u JOIN inbox_rows AS i ON i.id = u.id", args
}

// inboxDueSQL is the SLA due time of an inbox row in SQL, escalated_at plus
// the budget of its priority, exactly as SLAPolicy.Clock computes it, so
// that the server can merge the priority branches in the inbox order. Only
// on PostgreSQL (timestamptz arithmetic is exact to the microsecond; SQLite
// keeps times as text) and only for budgets in whole microseconds; otherwise
// the branches are merged here alone.
func (s *Store) inboxDueSQL(policy SLAPolicy) (string, bool) {
	if s.Dialect != Postgres {
		return "", false
	}
	var b strings.Builder
	b.WriteString("escalated_at + CASE priority")
	for p := MinPriority; p <= MaxPriority; p++ {
		d := policy.For(p)
		if d%time.Microsecond != 0 {
			return "", false
		}
		b.WriteString(" WHEN " + strconv.Itoa(p) + " THEN interval '" + strconv.FormatInt(d.Microseconds(), 10) + " microseconds'")
	}
	b.WriteString(" END")
	return b.String(), true
}

// scanInbox runs the inbox statement and scans its rows column by column
// (GORM's Scan resolved each of the up to five pages' worth of rows by
// reflection, which was most of the inbox's own CPU time): kind 0 is a
// row of the page, kind 1 a group of the facet count, kind 2 the sessions
// of one queue in the whole inbox (only with a search, see inboxFacetSQL),
// kind 3 one option's count of one facet (inboxPrecountedSQL), the queue's
// whole inbox in its state_version column.
func (s *Store) scanInbox(ctx context.Context, q string, args []any) (rows []InboxRow, groups []inboxFacetGroup, queueSums map[string]int64, err error) {
	rs, err := s.read(ctx).Raw(q, args...).Rows()
	if err != nil {
		return nil, nil, nil, fmt.Errorf("inbox: %w", err)
	}
	defer rs.Close()
	// Each column is scanned into an any and converted here: database/sql
	// assigns to an *any without conversion, where it converted every named
	// string and int column through reflection (an int64 into an int by
	// formatting and parsing it). The statement returns a row per facet
	// group besides the page (400 groups on the 1 M seed), and scanning was
	// 27–45% of the queue-filtered inbox's CPU in Go there (three profiles).
	var (
		vals [16]any
		dest [16]any
	)
	for i := range vals {
		dest[i] = &vals[i]
	}
	for rs.Next() {
		if err := rs.Scan(dest[:]...); err != nil {
			return nil, nil, nil, fmt.Errorf("inbox: scan: %w", err)
		}
		var c inboxScan
		kind, r, g, err := c.row(vals[:])
		if err != nil {
			return nil, nil, nil, fmt.Errorf("inbox: scan: %w", err)
		}
		switch kind {
		case 0:
			rows = append(rows, r)
		case 1, 3:
			g.Status, g.Queue, g.Priority, g.ReasonCode = r.Status, r.Queue, r.Priority, r.ReasonCode
			if kind == 3 {
				g.Facet = r.ID
				if g.Facet == "queue" {
					if queueSums == nil {
						queueSums = map[string]int64{}
					}
					queueSums[r.Queue] = r.StateVersion
				}
			}
			groups = append(groups, g)
		default:
			if queueSums == nil {
				queueSums = map[string]int64{}
			}
			queueSums[r.Queue] = g.N
		}
	}
	if err := rs.Err(); err != nil {
		return nil, nil, nil, fmt.Errorf("inbox: %w", err)
	}
	return rows, groups, queueSums, nil
}

// inboxScan converts one row of the inbox statement, as database/sql
// hands it over (string, int64, time.Time, []byte or nil, by dialect), into
// its kind and the page row or facet group it holds; the first conversion
// error sticks.
type inboxScan struct{ err error }

func (c *inboxScan) row(v []any) (int64, InboxRow, inboxFacetGroup, error) {
	kind := c.int(v[0])
	r := InboxRow{
		ID: c.str(v[1]), TicketRef: c.str(v[2]), Goal: c.str(v[3]), Status: Status(c.str(v[4])),
		Priority: int(c.int(v[5])), StateVersion: c.int(v[6]), CurrentStep: c.str(v[7]),
		Queue: c.str(v[8]), Assignee: c.str(v[9]), ReasonCode: ReasonCode(c.str(v[12])),
	}
	if c.err == nil {
		c.err = r.EscalatedAt.Scan(v[10])
	}
	if c.err == nil {
		c.err = r.UpdatedAt.Scan(v[11])
	}
	g := inboxFacetGroup{Mine: int(c.int(v[13])), Unassigned: int(c.int(v[14])), N: c.int(v[15])}
	return kind, r, g, c.err
}

func (c *inboxScan) str(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case []byte:
		return string(x)
	case nil:
		return ""
	}
	if c.err == nil {
		c.err = fmt.Errorf("want text, got %T", v)
	}
	return ""
}

func (c *inboxScan) int(v any) int64 {
	switch x := v.(type) {
	case int64:
		return x
	case nil:
		return 0
	}
	if c.err == nil {
		c.err = fmt.Errorf("want an integer, got %T", v)
	}
	return 0
}

// inboxLess is the inbox order: SLA due, priority, escalated_at, id.
func inboxLess(a, b InboxRow) bool {
	switch {
	case !a.SLA.DueAt.Equal(b.SLA.DueAt):
		return a.SLA.DueAt.Before(b.SLA.DueAt)
	case a.Priority != b.Priority:
		return a.Priority < b.Priority
	case !a.EscalatedAt.Equal(b.EscalatedAt.Time):
		return a.EscalatedAt.Before(b.EscalatedAt.Time)
	}
	return a.ID < b.ID
}

// inboxBase is the status part of the inbox's WHERE: the inbox statuses, or
// the one of the status filter. It is a literal either way (Validate allows
// only the two inbox statuses), which still implies the predicate of the
// partial indexes; adding the filter on top of the IN list instead would make
// the planner count the status's selectivity twice, underestimate the rows
// and sort them all rather than read sessions_inbox_status_idx in order.
func inboxBase(f InboxFilter) string {
	if f.Status != "" {
		return "status = '" + string(f.Status) + "'"
	}
	return inboxWhere
}

// inboxFilterSQL is the WHERE part of the filters other than the status
// (inboxBase) and the priority.
func (s *Store) inboxFilterSQL(o InboxOpts) (string, []any) {
	var (
		b    strings.Builder
		args []any
	)
	// The queue and the reason are literals, as the status and the
	// priority are (see inboxBranchesPage): as parameters they kept
	// PostgreSQL on custom plans, so every queue-filtered view was planned
	// again (0.77 ms of bind at a million events against 0.23 at ten
	// thousand). A literal needs no quoting when the name is one a queue
	// may have (namePattern: letters, digits, '.', '_', '-') or a known
	// reason code; anything else stays a parameter.
	if o.Queue != "" {
		if namePattern.MatchString(o.Queue) {
			b.WriteString(" AND queue = '" + o.Queue + "'")
		} else {
			b.WriteString(" AND queue = ?")
			args = append(args, o.Queue)
		}
	}
	switch o.Assignment {
	case AssignedToMe:
		b.WriteString(" AND assignee = ?")
		args = append(args, o.Me)
	case Unassigned:
		b.WriteString(" AND assignee = ''")
	}
	if o.Reason != "" {
		if o.Reason.Valid() {
			b.WriteString(" AND reason_code = '" + string(o.Reason) + "'")
		} else {
			b.WriteString(" AND reason_code = ?")
			args = append(args, o.Reason)
		}
	}
	if o.Search != "" {
		// The same word match as ListSessions, or a pasted session id.
		b.WriteString(" AND (id = ?")
		args = append(args, o.Search)
		if phrases := searchPhrases(o.Search); len(phrases) > 0 {
			m, a := s.searchMatch(phrases)
			b.WriteString(" OR " + m)
			args = append(args, a...)
		}
		b.WriteString(")")
	}
	return b.String(), args
}

// timeParam is a time placeholder: PostgreSQL gets the fixed-width text form
// that UTCTime binds as, cast to timestamptz; SQLite compares the text.
func (s *Store) timeParam() string {
	if s.Dialect == Postgres {
		return "?::timestamptz"
	}
	return "?"
}

// MaxInboxQueues bounds the queues the inbox offers as filter options.
const MaxInboxQueues = 100

// inboxCountOrder is the order of the inbox index that serves the count of f
// (see boundedCount): the partial index led by one of f's equality filters,
// so that the count reads only rows of that value.
func inboxCountOrder(f InboxFilter) string {
	switch {
	case f.Queue != "":
		return "queue, " + inboxOrder // sessions_inbox_queue_idx
	case f.Assignment != "":
		return "assignee, " + inboxOrder // sessions_inbox_assignee_idx
	case f.Reason != "":
		return "reason_code, " + inboxOrder // sessions_inbox_reason_idx
	case f.Status != "":
		return "status, " + inboxOrder // sessions_inbox_status_idx
	}
	return inboxOrder // sessions_inbox_idx
}

// MaxInboxFacetRows bounds the one-pass facet count (inboxCounts): up to
// this many inbox sessions matching the search, the counts come from one
// grouped read of them; beyond it, from one bounded count per option
// (inboxCountsBounded), whose cost is bounded by the options, not the rows.
const MaxInboxFacetRows = 20000

// inboxFacetGroup is one group of the one-pass facet count: the inbox
// sessions matching the search with these filter values.
//
// A group of kind 3 (Facet set) is one option of one facet instead, counted
// by the database (inboxPrecountedSQL): Facet names the filter, the field of
// that filter holds the option, and N counts the sessions with that option
// that match every other active filter.
type inboxFacetGroup struct {
	Facet      string
	Status     Status
	Queue      string
	Priority   int
	Mine       int
	Unassigned int
	ReasonCode ReasonCode
	N          int64
}

// inboxCounts computes every facet count of the inbox: for each option of
// each filter, the sessions matching it with the other active filters and
// the search, each bounded at CountCap+1 like every console count.
//
// Without a search the groups are the rows of inbox_counts, which the
// triggers of migration 00029 keep in the writing transactions: one row per
// (status, queue, priority, reason code, assignee) with its number of
// sessions, a few hundred rows whatever the backlog, read in the page's own
// statement (inboxFacetSQL); every option's number is summed here from the
// groups. A search cannot be maintained: then the groups are the search's
// matches, cut at MaxInboxFacetRows, and beyond the cut every option is a
// bounded count of its own (inboxCountsBounded). queueSums are the
// sessions per queue of the whole inbox from inbox_counts, for the queue
// options and the "any" count when there is a search (nil otherwise: then
// both come from the groups).
func (s *Store) inboxCounts(ctx context.Context, o InboxOpts, groups []inboxFacetGroup, queueSums map[string]int64, cut int64, precounted bool) (InboxCounts, error) {
	if queueSums == nil {
		queueSums = map[string]int64{}
		for _, g := range groups {
			queueSums[g.Queue] += g.N
		}
	}
	var all int64
	queues := make([]string, 0, len(queueSums))
	for q, n := range queueSums {
		all += n
		if q != "" && n > 0 {
			queues = append(queues, q)
		}
	}
	sort.Strings(queues)
	queues = queues[:min(len(queues), MaxInboxQueues)]
	if o.Queue != "" && !slices.Contains(queues, o.Queue) {
		queues = append(queues, o.Queue)
	}
	if precounted {
		return inboxPrecounted(o.InboxFilter, queues, groups, all), nil
	}
	var read int64
	for _, g := range groups {
		read += g.N
	}
	if read > cut {
		return s.inboxCountsBounded(ctx, o, queues)
	}
	return inboxFacetCounts(o.InboxFilter, queues, groups, all), nil
}

// noCut is the cut of facet groups read from inbox_counts: they are counts
// already, so their sum says nothing about the rows read.
const noCut = int64(^uint64(0) >> 1)

// inboxFacetSQL is the facet count's part of the inbox statement, over src
// (sessions, or the search's matches m): UNION ALL branches in the page
// rows' columns (see scanInbox), their arguments, the cut, and whether the
// rows are counted options (kind 3, inboxPrecountedSQL) rather than groups.
func (s *Store) inboxFacetSQL(o InboxOpts, src string) ([]string, []any, int64, bool) {
	// sum(n) is numeric on PostgreSQL; the cast keeps the UNION's column
	// an integer in both dialects.
	const counted = `SELECT 1, '', '', '', status, priority, 0, '', queue, '', NULL, NULL, reason_code, mine, unassigned, CAST(sum(n) AS BIGINT)
FROM (SELECT status, queue, priority, reason_code, CASE WHEN assignee = ? THEN 1 ELSE 0 END AS mine,
	CASE WHEN assignee = '' THEN 1 ELSE 0 END AS unassigned, n FROM inbox_counts WHERE n > 0) AS f
GROUP BY status, queue, priority, reason_code, mine, unassigned`
	if src == "sessions" {
		if q, ok := s.inboxPrecountedSQL(o.InboxFilter); ok {
			return []string{q}, []any{o.Me}, noCut, true
		}
		return []string{counted}, []any{o.Me}, noCut, false
	}
	cut := int64(MaxInboxFacetRows)
	if s.inboxFacetRows > 0 {
		cut = int64(s.inboxFacetRows)
	}
	// src holds inbox sessions only, so no status filter here: with one,
	// PostgreSQL estimated a hundredth of the matches, grouped them by
	// sorting rather than hashing, and the statement took a third longer
	// (1,516 matches at a million events).
	out := []string{`SELECT 1, '', '', '', status, priority, 0, '', queue, '', NULL, NULL, reason_code, mine, unassigned, count(*)
FROM (SELECT status, queue, priority, reason_code, CASE WHEN assignee = ? THEN 1 ELSE 0 END AS mine,
	CASE WHEN assignee = '' THEN 1 ELSE 0 END AS unassigned FROM ` + src + ` LIMIT ?) AS f
GROUP BY status, queue, priority, reason_code, mine, unassigned`,
		// The queue options and the "any" count of the whole inbox, search
		// or not: kind 2, one row per queue.
		`SELECT 2, '', '', '', '', 0, 0, '', queue, '', NULL, NULL, '', 0, 0, CAST(sum(n) AS BIGINT) FROM inbox_counts WHERE n > 0 GROUP BY queue`}
	return out, []any{o.Me, cut + 1}, cut, false
}

// inboxPrecountedSQL is the facet count of the inbox without a search: the
// counted groups of inbox_counts summed by the database into one row per
// option of each filter, each counting the sessions that match every other
// active filter, as inboxFacetCounts sums them from the groups. Its one
// argument is the looking user's assignee value. The groups are the product
// of statuses, queues, priorities, reasons and assignees (400 on the 1 M
// seed, each a row to send and scan); the options are their sum (about a
// hundred there). ok is false for a filter value that is not safe as a
// literal (Validate rejects those first); the groups are counted then.
func (s *Store) inboxPrecountedSQL(f InboxFilter) (string, bool) {
	if (f.Queue != "" && !namePattern.MatchString(f.Queue)) || (f.Reason != "" && !f.Reason.Valid()) {
		return "", false
	}
	// The conditions of the active filters, by facet; a facet's count
	// applies the others'. Priority 0 is no option: inboxFacetCounts skips
	// those groups too.
	conds := map[string]string{}
	if f.Status != "" {
		conds["status"] = "status = '" + string(f.Status) + "'"
	}
	if f.Queue != "" {
		conds["queue"] = "queue = '" + f.Queue + "'"
	}
	if f.Priority != 0 {
		conds["priority"] = "priority = " + strconv.Itoa(f.Priority)
	}
	switch f.Assignment {
	case AssignedToMe:
		conds["assignment"] = "mine = 1"
	case Unassigned:
		conds["assignment"] = "unassigned = 1"
	}
	if f.Reason != "" {
		conds["reason"] = "reason_code = '" + string(f.Reason) + "'"
	}
	others := func(facet string) string {
		w := []string{"priority <> 0"}
		for _, name := range []string{"status", "queue", "priority", "assignment", "reason"} {
			if c, ok := conds[name]; ok && name != facet {
				w = append(w, c)
			}
		}
		return strings.Join(w, " AND ")
	}
	// The queue options carry the queue's whole inbox too (in the
	// state_version column): the queues offered and the "all" count. The
	// times are typed: inside their own UNION, two NULLs would make text.
	const noTimes = "CAST(NULL AS TIMESTAMPTZ), CAST(NULL AS TIMESTAMPTZ)"
	branches := []string{
		`SELECT 3, 'status', '', '', status, 0, 0, '', '', '', ` + noTimes + `, '', 0, 0, CAST(sum(n) AS BIGINT) FROM fc WHERE ` + others("status") + ` GROUP BY status`,
		`SELECT 3, 'queue', '', '', '', 0, CAST(sum(n) AS BIGINT), '', queue, '', ` + noTimes + `, '', 0, 0, CAST(COALESCE(sum(n) FILTER (WHERE ` + others("queue") + `), 0) AS BIGINT) FROM fc GROUP BY queue`,
		`SELECT 3, 'priority', '', '', '', priority, 0, '', '', '', ` + noTimes + `, '', 0, 0, CAST(sum(n) AS BIGINT) FROM fc WHERE ` + others("priority") + ` GROUP BY priority`,
		`SELECT 3, 'assignment', '', '', '', 0, 0, '', '', '', ` + noTimes + `, '', mine, unassigned, CAST(sum(n) AS BIGINT) FROM fc WHERE ` + others("assignment") + ` GROUP BY mine, unassigned`,
		`SELECT 3, 'reason', '', '', '', 0, 0, '', '', '', ` + noTimes + `, reason_code, 0, 0, CAST(sum(n) AS BIGINT) FROM fc WHERE ` + others("reason") + ` GROUP BY reason_code`,
	}
	return `SELECT * FROM (WITH fc AS MATERIALIZED (SELECT status, queue, priority, reason_code,
	CASE WHEN assignee = ? THEN 1 ELSE 0 END AS mine, CASE WHEN assignee = '' THEN 1 ELSE 0 END AS unassigned, n
	FROM inbox_counts WHERE n > 0)
` + strings.Join(branches, "\nUNION ALL\n") + `) AS facets`, true
}

// inboxPrecounted fills the facet counts of f from the options counted by
// inboxPrecountedSQL; all is the count of the whole inbox. The total is the
// status options that the status filter keeps: they match every filter.
func inboxPrecounted(f InboxFilter, queues []string, options []inboxFacetGroup, all int64) InboxCounts {
	c := newInboxCounts(queues, all)
	for _, o := range options {
		switch o.Facet {
		case "status":
			c.AnyStatus += o.N
			if _, ok := c.Status[o.Status]; ok {
				c.Status[o.Status] += o.N
			}
			if f.Status == "" || o.Status == f.Status {
				c.Total += o.N
			}
		case "queue":
			c.AnyQueue += o.N
			if _, ok := c.Queue[o.Queue]; ok {
				c.Queue[o.Queue] += o.N
			}
		case "priority":
			c.AnyPriority += o.N
			if _, ok := c.Priority[o.Priority]; ok {
				c.Priority[o.Priority] += o.N
			}
		case "assignment":
			c.AnyAssignment += o.N
			if o.Mine == 1 {
				c.Assignment[AssignedToMe] += o.N
			}
			if o.Unassigned == 1 {
				c.Assignment[Unassigned] += o.N
			}
		case "reason":
			c.AnyReason += o.N
			if o.ReasonCode.Valid() {
				c.Reason[o.ReasonCode] += o.N
			}
		}
	}
	return capInboxCounts(c)
}

// newInboxCounts is the counts of an inbox with these queue options and
// all sessions, every option at zero.
func newInboxCounts(queues []string, all int64) InboxCounts {
	c := InboxCounts{
		All:    all,
		Status: map[Status]int64{StatusEscalated: 0, StatusHumanActive: 0}, Queue: map[string]int64{},
		Priority: map[int]int64{}, Assignment: map[string]int64{AssignedToMe: 0, Unassigned: 0},
		Reason: map[ReasonCode]int64{},
	}
	for _, q := range queues {
		c.Queue[q] = 0
	}
	for p := MinPriority; p <= MaxPriority; p++ {
		c.Priority[p] = 0
	}
	return c
}

// inboxFacetCounts sums the facet counts of f from the groups of the inbox
// sessions matching the search; all is the count of the whole inbox. Every
// count is capped at CountCap+1, as a bounded count would be.
func inboxFacetCounts(f InboxFilter, queues []string, groups []inboxFacetGroup, all int64) InboxCounts {
	c := newInboxCounts(queues, all)
	for _, g := range groups {
		if g.Priority == 0 {
			continue
		}
		status := f.Status == "" || g.Status == f.Status
		queue := f.Queue == "" || g.Queue == f.Queue
		priority := f.Priority == 0 || g.Priority == f.Priority
		assignment := f.Assignment == "" || (f.Assignment == AssignedToMe && g.Mine == 1) || (f.Assignment == Unassigned && g.Unassigned == 1)
		reason := f.Reason == "" || g.ReasonCode == f.Reason
		if queue && priority && assignment && reason {
			c.AnyStatus += g.N
			if _, ok := c.Status[g.Status]; ok {
				c.Status[g.Status] += g.N
			}
		}
		if status && priority && assignment && reason {
			c.AnyQueue += g.N
			if _, ok := c.Queue[g.Queue]; ok {
				c.Queue[g.Queue] += g.N
			}
		}
		if status && queue && assignment && reason {
			c.AnyPriority += g.N
			if _, ok := c.Priority[g.Priority]; ok {
				c.Priority[g.Priority] += g.N
			}
		}
		if status && queue && priority && reason {
			c.AnyAssignment += g.N
			if g.Mine == 1 {
				c.Assignment[AssignedToMe] += g.N
			}
			if g.Unassigned == 1 {
				c.Assignment[Unassigned] += g.N
			}
		}
		if status && queue && priority && assignment {
			c.AnyReason += g.N
			if g.ReasonCode.Valid() {
				c.Reason[g.ReasonCode] += g.N
			}
		}
		if status && queue && priority && assignment && reason {
			c.Total += g.N
		}
	}
	return capInboxCounts(c)
}

// capInboxCounts caps every count of c at CountCap+1.
func capInboxCounts(c InboxCounts) InboxCounts {
	const top = CountCap + 1
	capAll := func(m map[string]int64) {
		for k, v := range m {
			m[k] = min(v, top)
		}
	}
	for k, v := range c.Status {
		c.Status[k] = min(v, top)
	}
	for k, v := range c.Priority {
		c.Priority[k] = min(v, top)
	}
	for k, v := range c.Reason {
		c.Reason[k] = min(v, top)
	}
	capAll(c.Queue)
	capAll(c.Assignment)
	c.Total, c.All = min(c.Total, top), min(c.All, top)
	c.AnyStatus, c.AnyQueue, c.AnyPriority = min(c.AnyStatus, top), min(c.AnyQueue, top), min(c.AnyPriority, top)
	c.AnyAssignment, c.AnyReason = min(c.AnyAssignment, top), min(c.AnyReason, top)
	return c
}

// inboxCountsBounded computes every facet count as a bounded count (see CountCap)
// of the inbox rows matching that option with the other active filters and
// the search; equal filter combinations are counted once, and all of them
// in one statement. The cost is bounded by the number of options (statuses,
// queues, priorities, assignments, reason codes) times CountCap, whatever the
// number of sessions.
func (s *Store) inboxCountsBounded(ctx context.Context, o InboxOpts, queues []string) (InboxCounts, error) {
	var (
		qs   []countQuery
		keys = map[InboxFilter]int{}
	)
	// add registers the count of filter f and returns its key.
	add := func(f InboxFilter) int {
		if k, ok := keys[f]; ok {
			return k
		}
		k := len(qs)
		keys[f] = k
		where, args := s.inboxFilterSQL(InboxOpts{InboxFilter: f, Me: o.Me})
		if f.Priority != 0 {
			where = " AND priority = ?" + where
			args = append([]any{f.Priority}, args...)
		}
		qs = append(qs, countQuery{key: k, where: inboxBase(f) + where, order: inboxCountOrder(f), args: args})
		return k
	}
	f := o.InboxFilter
	total, all := add(f), add(InboxFilter{})
	type option[T comparable] struct {
		v T
		k int
	}
	var (
		statuses    []option[Status]
		queueOpts   []option[string]
		priorities  []option[int]
		assignments []option[string]
		reasons     []option[ReasonCode]
	)
	for _, st := range []Status{"", StatusEscalated, StatusHumanActive} {
		g := f
		g.Status = st
		statuses = append(statuses, option[Status]{st, add(g)})
	}
	for _, q := range append([]string{""}, queues...) {
		g := f
		g.Queue = q
		queueOpts = append(queueOpts, option[string]{q, add(g)})
	}
	for p := 0; p <= MaxPriority; p++ {
		if p != 0 && p < MinPriority {
			continue
		}
		g := f
		g.Priority = p
		priorities = append(priorities, option[int]{p, add(g)})
	}
	for _, a := range []string{"", AssignedToMe, Unassigned} {
		g := f
		g.Assignment = a
		assignments = append(assignments, option[string]{a, add(g)})
	}
	for _, r := range append([]ReasonCode{""}, AllReasonCodes...) {
		g := f
		g.Reason = r
		reasons = append(reasons, option[ReasonCode]{r, add(g)})
	}
	n, err := s.boundedCounts(ctx, qs)
	if err != nil {
		return InboxCounts{}, fmt.Errorf("inbox counts: %w", err)
	}
	c := InboxCounts{
		Total: n[total], All: n[all],
		Status: map[Status]int64{}, Queue: map[string]int64{}, Priority: map[int]int64{},
		Assignment: map[string]int64{}, Reason: map[ReasonCode]int64{},
	}
	for _, o := range statuses {
		if o.v == "" {
			c.AnyStatus = n[o.k]
		} else {
			c.Status[o.v] = n[o.k]
		}
	}
	for _, o := range queueOpts {
		if o.v == "" {
			c.AnyQueue = n[o.k]
		} else {
			c.Queue[o.v] = n[o.k]
		}
	}
	for _, o := range priorities {
		if o.v == 0 {
			c.AnyPriority = n[o.k]
		} else {
			c.Priority[o.v] = n[o.k]
		}
	}
	for _, o := range assignments {
		if o.v == "" {
			c.AnyAssignment = n[o.k]
		} else {
			c.Assignment[o.v] = n[o.k]
		}
	}
	for _, o := range reasons {
		if o.v == "" {
			c.AnyReason = n[o.k]
		} else if n[o.k] > 0 {
			c.Reason[o.v] = n[o.k]
		}
	}
	return c, nil
}

// DisplayNames maps assignee and actor values ("user:usr_…") to the names of
// their users, in one query for the whole page. Values that are not users
// (tokens, the system) map to themselves.
func (s *Store) DisplayNames(ctx context.Context, actors ...string) (map[string]string, error) {
	out := make(map[string]string, len(actors))
	var ids []string
	for _, a := range actors {
		if a == "" {
			continue
		}
		out[a] = a
		if id, ok := strings.CutPrefix(a, "user:"); ok {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return out, nil
	}
	var users []User
	if err := s.read(ctx).Select("id, name, email").Where("id IN ?", ids).Find(&users).Error; err != nil {
		return nil, fmt.Errorf("display names: %w", err)
	}
	for _, u := range users {
		out[u.Actor()] = u.Name
	}
	return out, nil
}

// Children returns the child sessions of a parent (fan-out), oldest first,
// without their state bodies.
func (s *Store) Children(ctx context.Context, parentID string) ([]Session, error) {
	var rows []Session
	err := s.read(ctx).Model(&Session{}).Omit("state").
		Where("parent_id = ?", parentID).Order("id").Limit(500).Find(&rows).Error
	if err != nil {
		return nil, fmt.Errorf("session %s: children: %w", parentID, err)
	}
	return rows, nil
}

// MaxTimelineEvents bounds the timeline of one session page.
const MaxTimelineEvents = 2000

// Timeline returns a session's events in order, only those of the given types
// when any are given, at most MaxTimelineEvents.
func (s *Store) Timeline(ctx context.Context, sessionID string, types ...EventType) ([]Event, error) {
	q := s.read(ctx).Where("session_id = ?", sessionID)
	if len(types) > 0 {
		q = q.Where("type IN ?", types)
	}
	var evs []Event
	if err := q.Order("seq").Limit(MaxTimelineEvents).Find(&evs).Error; err != nil {
		return nil, fmt.Errorf("session %s: timeline: %w", sessionID, err)
	}
	return evs, nil
}

// ChangeKind says how a field differs between two states.
type ChangeKind string

// The kinds of change in a state diff.
const (
	ChangeAdded   ChangeKind = "added"
	ChangeRemoved ChangeKind = "removed"
	ChangeChanged ChangeKind = "changed"
)

// FieldChange is one leaf field that differs between two states. Path is
// dotted with [i] for list items (facts.order_total, evidence[2].source);
// From and To are canonical JSON, empty when the field is absent.
type FieldChange struct {
	Path string
	Kind ChangeKind
	From string
	To   string
}

// DiffStates compares two states field by field over their canonical JSON,
// the same encoding that is stored and replayed, so the diff shows exactly
// what the events changed.
func DiffStates(from, to State) ([]FieldChange, error) {
	a, err := flatten(from)
	if err != nil {
		return nil, err
	}
	b, err := flatten(to)
	if err != nil {
		return nil, err
	}
	var out []FieldChange
	for p, av := range a {
		bv, ok := b[p]
		switch {
		case !ok:
			out = append(out, FieldChange{Path: p, Kind: ChangeRemoved, From: av})
		case av != bv:
			out = append(out, FieldChange{Path: p, Kind: ChangeChanged, From: av, To: bv})
		}
	}
	for p, bv := range b {
		if _, ok := a[p]; !ok {
			out = append(out, FieldChange{Path: p, Kind: ChangeAdded, To: bv})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out, nil
}

// flatten maps every leaf of st's canonical JSON to its path. Empty objects
// and lists are leaves too, so that "became empty" is a change.
func flatten(st State) (map[string]string, error) {
	b, err := Canonical(st)
	if err != nil {
		return nil, err
	}
	var v any
	if err := decodeJSON(b, &v); err != nil {
		return nil, err
	}
	out := map[string]string{}
	var walk func(path string, v any) error
	walk = func(path string, v any) error {
		switch x := v.(type) {
		case map[string]any:
			if len(x) > 0 {
				for k, c := range x {
					p := k
					if path != "" {
						p = path + "." + k
					}
					if err := walk(p, c); err != nil {
						return err
					}
				}
				return nil
			}
		case []any:
			if len(x) > 0 {
				for i, c := range x {
					if err := walk(path+"["+strconv.Itoa(i)+"]", c); err != nil {
						return err
					}
				}
				return nil
			}
		}
		leaf, err := json.Marshal(v)
		if err != nil {
			return err
		}
		out[path] = string(leaf)
		return nil
	}
	return out, walk("", v)
}

// TakeoverAction names a takeover form of the console; the names are also
// the last segment of the form's URL.
type TakeoverAction string

// The takeover actions.
const (
	ActClaim        TakeoverAction = "claim"
	ActRelease      TakeoverAction = "release"
	ActForceRelease TakeoverAction = "force-release"
	ActNote         TakeoverAction = "note"
	// ActResolveRisk is offered per open risk (CanResolveRisks), not in
	// the takeover panel.
	ActResolveRisk  TakeoverAction = "resolve-risk"
	ActRequestInput TakeoverAction = "request-input"
	ActResume       TakeoverAction = "resume"
	ActHandBack     TakeoverAction = "hand-back"
	ActComplete     TakeoverAction = "complete"
	ActReject       TakeoverAction = "reject"
	// ActProvideInput answers a session waiting in awaiting_input.
	ActProvideInput TakeoverAction = "provide-input"
)

// SessionDetail is what the console's session page shows, read in a few
// indexed queries whose cost does not grow with the session's history: the
// projection row and its state, one page of the timeline, the events the
// page's sentences need, the parent and the children.
type SessionDetail struct {
	Row   Session
	State State
	// Events are the newest events (a timeline page's worth) and the few
	// older ones the page's sentences name (timeline.go), oldest first; not
	// the whole history.
	Events []Event
	// Timeline is the page of the timeline asked for, newest first.
	Timeline TimelinePage
	Parent   *Session
	Children []Session
	// SLA is the escalation's SLA clock while the session is in human
	// hands; zero otherwise.
	SLA SLAClock
	// StalledOn is the step the session is stalled on (open, and its
	// next_step has no route), or "".
	StalledOn string
}

// ClaimedAt is when the current holder claimed the session (zero when nobody
// holds it).
func (d SessionDetail) ClaimedAt() UTCTime {
	if d.State.Status != StatusHumanActive {
		return UTCTime{}
	}
	for i := len(d.Events) - 1; i >= 0; i-- {
		if d.Events[i].Type == EventHumanClaimed {
			return d.Events[i].CreatedAt
		}
	}
	return UTCTime{}
}

// EventsSince returns the events after version v, for the conflict banner of
// a form rendered at v.
func (d SessionDetail) EventsSince(v int64) []Event {
	for i, e := range d.Events {
		if e.VersionAfter > v {
			return d.Events[i:]
		}
	}
	return nil
}

// Actors lists every actor and assignee the page names, for DisplayNames.
func (d SessionDetail) Actors() []string {
	out := []string{d.State.Assignee}
	if e := d.State.Escalation; e != nil {
		out = append(out, e.By)
	}
	for _, st := range d.State.CompletedSteps {
		out = append(out, st.By)
	}
	for _, n := range d.State.Notes {
		out = append(out, n.By)
	}
	seen := map[string]bool{}
	for _, evs := range [][]Event{d.Events, d.Timeline.Events} {
		for _, e := range evs {
			if !seen[e.Actor] {
				seen[e.Actor] = true
				out = append(out, e.Actor)
			}
		}
	}
	return out
}

// GetSessionDetail reads what the session page needs with the newest page
// of the timeline.
func (s *Store) GetSessionDetail(ctx context.Context, id string, r ReviewReader) (SessionDetail, error) {
	return s.GetSessionDetailPage(ctx, id, r, TimelineQuery{})
}

// GetSessionDetailPage reads what the session page needs, with the timeline
// page q, as r may see it: review scores are redacted where they are still
// blind to r.
func (s *Store) GetSessionDetailPage(ctx context.Context, id string, r ReviewReader, q TimelineQuery) (SessionDetail, error) {
	row, err := s.GetSession(ctx, id)
	if err != nil {
		return SessionDetail{}, err
	}
	d := SessionDetail{Row: row}
	if d.State, err = row.Decode(); err != nil {
		return SessionDetail{}, err
	}
	newest, err := s.ReadTimelinePage(ctx, id, TimelineQuery{})
	if err != nil {
		return SessionDetail{}, err
	}
	d.Timeline = newest
	if q.Before != 0 || q.Type != "" {
		if d.Timeline, err = s.ReadTimelinePage(ctx, id, q); err != nil {
			return SessionDetail{}, err
		}
	}
	if err := s.contextEvents(ctx, &d, newest.Events); err != nil {
		return SessionDetail{}, err
	}
	// One redaction pass over both lists, so that review items are read
	// at most once.
	all := append(append(make([]Event, 0, len(d.Events)+len(d.Timeline.Events)), d.Events...), d.Timeline.Events...)
	if all, err = s.RedactReviews(ctx, r, all); err != nil {
		return SessionDetail{}, err
	}
	d.Events, d.Timeline.Events = all[:len(d.Events):len(d.Events)], all[len(d.Events):]
	if row.ParentID != nil {
		p, err := s.GetSession(ctx, *row.ParentID)
		if err != nil {
			return SessionDetail{}, err
		}
		p.State = ""
		d.Parent = &p
	}
	if d.Children, err = s.Children(ctx, id); err != nil {
		return SessionDetail{}, err
	}
	if row.EscalatedAt.Valid && inHumanHands(row.Status) {
		d.SLA = s.SLAClock(row.Priority, row.EscalatedAt.Time.Time)
	}
	if d.StalledOn, err = s.StalledStep(ctx, row); err != nil {
		return SessionDetail{}, err
	}
	return d, nil
}
