package models

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"
)

// Listing and searching sessions: one function, ListSessions, serves
// GET /api/v1/sessions and the console's session list; the console inbox
// searches with the same word predicate (searchMatch).

// Bounds of a session listing.
const (
	DefaultSessionsLimit = 50
	MaxSessionsLimit     = 500
	// MaxSearchLen bounds q, so that a search stays a handful of index probes.
	MaxSearchLen = 200
	// MaxSearchPhrases bounds the whitespace-separated terms of q.
	MaxSearchPhrases = 16
)

// SessionQuery filters and pages ListSessions. Zero values mean "any".
// Add a filter by adding a field, its check in Validate and its predicate in
// sessionFilterSQL; the keyset order stays as it is.
type SessionQuery struct {
	// Statuses keeps sessions in any of these statuses.
	Statuses  []Status
	Queue     string
	TicketRef string
	ParentID  string
	// Q keeps sessions whose goal, ticket_ref or notes contain every term of
	// Q as words (see searchPhrases).
	Q string
	// UpdatedAfter keeps sessions updated strictly after this time.
	UpdatedAfter time.Time
	// Limit is the page size, 1..MaxSessionsLimit; 0 means DefaultSessionsLimit.
	Limit int
	// Cursor continues from a previous page (SessionPage.NextCursor).
	Cursor string
	// Stalled keeps only stalled sessions: open, with a next step that has
	// no route (see Stalled in routes.go).
	Stalled bool
}

// SessionSummary is one session of a listing: projection columns only, never
// the state body, so that a page costs the same whatever the sessions hold.
type SessionSummary struct {
	ID           string
	ParentID     *string
	TicketRef    string
	Goal         string
	Status       Status
	Priority     int
	StateVersion int64
	Queue        string
	CurrentStep  string
	Assignee     string
	// NextStep is the step an open session waits for (stalled when it has
	// no route).
	NextStep  string
	CreatedAt UTCTime
	UpdatedAt UTCTime
}

// SessionPage is one page of a listing, newest updated_at first.
type SessionPage struct {
	Sessions []SessionSummary
	// NextCursor continues the listing; empty on the last page.
	NextCursor string
}

// sessionKey is the position of a row in the listing order (updated_at
// DESC, id DESC).
type sessionKey struct {
	UpdatedAt UTCTime `json:"u"`
	ID        string  `json:"i"`
}

func decodeSessionCursor(s string) (sessionKey, error) {
	var k sessionKey
	if err := decodeCursor(s, &k); err != nil || k.ID == "" || k.UpdatedAt.IsZero() {
		return k, fmt.Errorf("not a cursor of this listing")
	}
	return k, nil
}

// Validate lists every problem with the query.
func (q SessionQuery) Validate() error {
	v := &ValidationError{}
	CheckNUL(v, "", q) // every text field; see NULMessage
	for _, st := range q.Statuses {
		if !st.Valid() {
			v.Add("status", "unknown status %q; known: %s", st, statusList())
		}
	}
	if q.Queue != "" && !namePattern.MatchString(q.Queue) {
		v.Add("queue", "must be 1-64 letters, digits, '.', '_' or '-'")
	}
	if len(q.TicketRef) > MaxTicketRef {
		v.Add("ticket_ref", "must be at most %d characters", MaxTicketRef)
	}
	if len(q.ParentID) > MaxTicketRef {
		v.Add("parent_id", "must be at most %d characters", MaxTicketRef)
	}
	switch phrases := searchPhrases(q.Q); {
	case len(q.Q) > MaxSearchLen:
		v.Add("q", "must be at most %d characters", MaxSearchLen)
	case strings.TrimSpace(q.Q) != "" && len(phrases) == 0:
		v.Add("q", "must contain a letter or a digit")
	case len(phrases) > MaxSearchPhrases:
		v.Add("q", "must have at most %d terms", MaxSearchPhrases)
	}
	if q.Limit < 0 || q.Limit > MaxSessionsLimit {
		v.Add("limit", "must be between 1 and %d", MaxSessionsLimit)
	}
	if q.Cursor != "" {
		if _, err := decodeSessionCursor(q.Cursor); err != nil {
			v.Add("cursor", "is not a cursor of this listing; pass next_cursor back unchanged")
		}
	}
	return v.Err()
}

func statusList() string {
	names := make([]string, len(AllStatuses))
	for i, s := range AllStatuses {
		names[i] = string(s)
	}
	return strings.Join(names, ", ")
}

const sessionSummaryColumns = "id, parent_id, ticket_ref, goal, status, priority, state_version, queue, current_step, assignee, next_step, created_at, updated_at"

// ListSessions returns one page of sessions matching q, most recently
// updated first (ties broken by id), and the cursor of the next page.
//
// Paging is by keyset on (updated_at, id): a page costs one index range read
// however deep it is, and a reader following next_cursor sees no session
// twice. A session written while the reader pages moves to the front of the
// order (it is newer now); sessions not written meanwhile are all seen.
//
// Every filter seeks an index of migration 00009 that ends in (updated_at,
// id), so a page is read in order and cut at the page size. Several statuses
// are one ordered branch per status, merged (UNION ALL then a sort of at most
// statuses × (limit+1) rows), rather than one IN list, which an index on
// (status, updated_at) cannot return in updated_at order.
func (s *Store) ListSessions(ctx context.Context, q SessionQuery) (SessionPage, error) {
	query, args, limit, err := s.listSessionsSQL(q)
	if err != nil {
		return SessionPage{}, err
	}
	var rows []SessionSummary
	if err := s.read(ctx).Raw(query, args...).Scan(&rows).Error; err != nil {
		return SessionPage{}, fmt.Errorf("list sessions: %w", err)
	}
	// The branches of several statuses come back merged by the database;
	// sort again so both dialects agree on ties whatever the plan.
	sort.SliceStable(rows, func(i, j int) bool { return sessionAfter(rows[i], rows[j]) })
	page := SessionPage{Sessions: rows}
	if len(rows) > limit {
		page.Sessions = rows[:limit]
		last := page.Sessions[limit-1]
		page.NextCursor = encodeCursor(sessionKey{UpdatedAt: last.UpdatedAt, ID: last.ID})
	}
	if page.Sessions == nil {
		page.Sessions = []SessionSummary{}
	}
	return page, nil
}

// sessionAfter is the listing order: newer updated_at first, then greater id.
func sessionAfter(a, b SessionSummary) bool {
	if !a.UpdatedAt.Equal(b.UpdatedAt.Time) {
		return a.UpdatedAt.After(b.UpdatedAt.Time)
	}
	return a.ID > b.ID
}

// listSessionsSQL builds the page query of q, fetching one row more than the
// page to tell whether a next page exists.
func (s *Store) listSessionsSQL(q SessionQuery) (string, []any, int, error) {
	q.Queue, q.TicketRef, q.ParentID, q.Q = strings.TrimSpace(q.Queue), strings.TrimSpace(q.TicketRef), strings.TrimSpace(q.ParentID), strings.TrimSpace(q.Q)
	if err := q.Validate(); err != nil {
		return "", nil, 0, err
	}
	limit := q.Limit
	if limit == 0 {
		limit = DefaultSessionsLimit
	}
	filter, filterArgs := s.sessionFilterSQL(q)
	if q.Cursor != "" {
		k, _ := decodeSessionCursor(q.Cursor) // checked by Validate
		filter += " AND (updated_at, id) < (" + s.timeParam() + ", ?)"
		filterArgs = append(filterArgs, k.UpdatedAt, k.ID)
	}
	const order = " ORDER BY updated_at DESC, id DESC LIMIT ?"
	statuses := slices.Compact(slices.Sorted(slices.Values(q.Statuses)))
	if len(statuses) <= 1 {
		where, args := "TRUE", filterArgs
		if len(statuses) == 1 {
			where, args = "status = ?", append([]any{statuses[0]}, filterArgs...)
		}
		return "SELECT " + sessionSummaryColumns + " FROM sessions WHERE " + where + filter + order, append(args, limit+1), limit, nil
	}
	var (
		branches []string
		args     []any
	)
	for i, st := range statuses {
		branches = append(branches, "SELECT * FROM (SELECT "+sessionSummaryColumns+" FROM sessions WHERE status = ?"+filter+order+") AS s"+strconv.Itoa(i))
		args = append(append(append(args, st), filterArgs...), limit+1)
	}
	return "SELECT * FROM (" + strings.Join(branches, "\nUNION ALL\n") + ") AS u" + order, append(args, limit+1), limit, nil
}

// sessionFilterSQL is the WHERE part of every filter but status and the
// cursor, each starting with " AND ".
func (s *Store) sessionFilterSQL(q SessionQuery) (string, []any) {
	var (
		b    strings.Builder
		args []any
	)
	if q.Queue != "" {
		b.WriteString(" AND queue = ?")
		args = append(args, q.Queue)
	}
	if q.TicketRef != "" {
		b.WriteString(" AND ticket_ref = ?")
		args = append(args, q.TicketRef)
	}
	if q.ParentID != "" {
		b.WriteString(" AND parent_id = ?")
		args = append(args, q.ParentID)
	}
	if !q.UpdatedAfter.IsZero() {
		b.WriteString(" AND updated_at > " + s.timeParam())
		args = append(args, NewUTCTime(q.UpdatedAfter))
	}
	if phrases := searchPhrases(q.Q); len(phrases) > 0 {
		m, a := s.searchMatch(phrases)
		b.WriteString(" AND " + m)
		args = append(args, a...)
	}
	if q.Stalled {
		b.WriteString(" AND " + stalledSQL)
	}
	return b.String(), args
}

// searchDocumentSQL is the document of the word search on PostgreSQL, as
// migration 00033's trigger computes it into sessions.search_doc (which
// both search indexes cover): ticket, goal and notes, ASCII punctuation
// turned into spaces (spelled with \x3f and \x60 escapes so that the SQL
// holds no '?' for the placeholder rewriting, nor a backquote). Searches
// read the stored column; this expression is kept for the test that holds
// the trigger to it (TestSearchDocumentStored).
const searchDocumentSQL = `to_tsvector('simple'::regconfig, translate(ticket_ref || ' ' || goal || ' ' || search_notes, E'!"#$%&\'()*+,-./:;<=>\x3f@[\\]^_\x60{|}~', '                                '))`

// searchMatch is the predicate "the session's goal, ticket_ref or notes
// contain every phrase": a GIN-indexed tsvector match on PostgreSQL, an FTS5
// match on SQLite. On PostgreSQL it reads the stored document (migration
// 00033), so a search that walks sessions newest first pays a tsvector
// match per row, not a to_tsvector. The phrases hold only letters, digits and single spaces
// (searchPhrases), so the query text needs no escaping in either syntax.
func (s *Store) searchMatch(phrases []string) (string, []any) {
	if s.Dialect == Postgres {
		// 'refund' <-> 'order' & 't' <-> '1182'
		parts := make([]string, len(phrases))
		for i, p := range phrases {
			parts[i] = "'" + strings.ReplaceAll(p, " ", "' <-> '") + "'"
		}
		return "search_doc @@ to_tsquery('simple', ?)", []any{strings.Join(parts, " & ")}
	}
	// "refund order" AND "t 1182"
	parts := make([]string, len(phrases))
	for i, p := range phrases {
		parts[i] = `"` + p + `"`
	}
	return "sessions.rowid IN (SELECT rowid FROM sessions_fts WHERE sessions_fts MATCH ?)", []any{strings.Join(parts, " AND ")}
}

// searchPhrases splits a search into its terms: each whitespace-separated
// chunk of q becomes the words it holds (runs of letters and digits), in
// order, joined by one space. A term matches when its words occur one after
// the other in the goal, the ticket_ref or the notes: "T-1182" matches the
// ticket T-1182 (words t, 1182), "refund" the goal "Refund order 1182".
// Matching ignores case; it neither stems nor drops stop words.
func searchPhrases(q string) []string {
	var out []string
	for _, chunk := range strings.Fields(q) {
		words := strings.FieldsFunc(chunk, func(r rune) bool {
			return !unicode.IsLetter(r) && !unicode.IsDigit(r) && !unicode.Is(unicode.Mn, r)
		})
		if len(words) > 0 {
			out = append(out, strings.Join(words, " "))
		}
	}
	return out
}

// searchNotes is the search_notes column of a state: the text of its notes,
// one per line. Migration 00009 computed the same for existing rows.
func searchNotes(st State) string {
	if len(st.Notes) == 0 {
		return ""
	}
	texts := make([]string, len(st.Notes))
	for i, n := range st.Notes {
		texts[i] = n.Text
	}
	return strings.Join(texts, "\n")
}
