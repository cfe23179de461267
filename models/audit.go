package models

import (
	"bufio"
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"gorm.io/gorm"
)

// The audit trail: every event of every session, newest first, filtered and
// paged by keyset over (created_at, id), and exported as CSV, JSONL or a
// per-session transcript that anyone can re-verify.
//
// Each filter is served by an index of the events table (migration 00001 and
// 00003): session (session_id, seq), actor (actor, created_at, id), type
// (type, created_at, id), time range and the unfiltered trail (created_at,
// id); a ticket is resolved to its few sessions first. So a page costs the
// same with a million events as with a thousand, and exports read in keyset
// batches of bounded size.

// Limits of the audit trail.
const (
	DefaultAuditLimit = 50
	MaxAuditLimit     = 500
	// AuditExportBatch is how many events an export reads per query; memory
	// is bounded by it, whatever the number of events exported.
	AuditExportBatch  = 1000
	maxAuditFilterLen = 200
)

// AuditFilter narrows the audit trail. Empty fields do not filter; From and
// To bound created_at as [From, To).
type AuditFilter struct {
	SessionID string
	TicketRef string
	// Actor is an event actor ("user:usr_…", "token:ctl") or a user's email,
	// which stands for that user.
	Actor string
	Type  EventType
	From  time.Time
	To    time.Time
}

// Validate lists every problem with the filter.
func (f AuditFilter) Validate() error {
	v := &ValidationError{}
	CheckNUL(v, "", f) // every text field; see NULMessage
	for field, val := range map[string]string{"session": f.SessionID, "ticket": f.TicketRef, "actor": f.Actor} {
		if len(val) > maxAuditFilterLen {
			v.Add(field, "must be at most %d characters", maxAuditFilterLen)
		}
	}
	if f.Type != "" && !knownEventType(f.Type) {
		v.Add("type", "is not an event type")
	}
	if !f.From.IsZero() && !f.To.IsZero() && !f.To.After(f.From) {
		v.Add("to", "must be after from")
	}
	return v.Err()
}

// Empty reports whether the filter selects every event.
func (f AuditFilter) Empty() bool { return f == AuditFilter{} }

func knownEventType(t EventType) bool {
	for _, x := range AllEventTypes {
		if x == t {
			return true
		}
	}
	return false
}

// resolveActor turns an email into the actor of its user; anything else is
// kept as typed. An unknown email matches nothing rather than everything.
func (s *Store) resolveActor(ctx context.Context, f AuditFilter) (AuditFilter, error) {
	a := strings.TrimSpace(f.Actor)
	f.Actor = a
	if a == "" || strings.Contains(a, ":") || !strings.Contains(a, "@") {
		return f, nil
	}
	var ids []string
	if err := s.read(ctx).Model(&User{}).Where("email = ?", strings.ToLower(a)).Limit(1).Pluck("id", &ids).Error; err != nil {
		return f, fmt.Errorf("audit: resolve actor %q: %w", a, err)
	}
	if len(ids) > 0 {
		f.Actor = User{ID: ids[0]}.Actor()
	}
	return f, nil
}

// auditQuery selects the events matching f.
func (s *Store) auditQuery(ctx context.Context, f AuditFilter) *gorm.DB {
	return auditWhere(s.read(ctx), f)
}

func auditWhere(db *gorm.DB, f AuditFilter) *gorm.DB {
	q := db.Model(&Event{})
	if f.SessionID != "" {
		q = q.Where("session_id = ?", f.SessionID)
	}
	if f.TicketRef != "" {
		q = q.Where("session_id IN (SELECT id FROM sessions WHERE ticket_ref = ?)", f.TicketRef)
	}
	if f.Actor != "" {
		q = q.Where("actor = ?", f.Actor)
	}
	if f.Type != "" {
		q = q.Where("type = ?", f.Type)
	}
	if !f.From.IsZero() {
		q = q.Where("created_at >= ?", NewUTCTime(f.From))
	}
	if !f.To.IsZero() {
		q = q.Where("created_at < ?", NewUTCTime(f.To))
	}
	return q
}

// auditKey is the keyset of the trail's order: newest first, id breaking ties.
type auditKey struct {
	CreatedAt UTCTime `json:"t"`
	ID        string  `json:"i"`
}

func encodeAuditCursor(e Event) string {
	return encodeCursor(auditKey{CreatedAt: e.CreatedAt, ID: e.ID})
}

func decodeAuditCursor(s string) (auditKey, error) {
	var k auditKey
	if err := decodeCursor(s, &k); err != nil || k.ID == "" || k.CreatedAt.IsZero() {
		return k, &ValidationError{Fields: []FieldError{{Field: "before", Message: "is not a cursor of the audit trail"}}}
	}
	return k, nil
}

// before continues the trail after the event k (older ones). The row-value
// comparison lets the index seek to the cursor instead of counting past an
// offset.
func (s *Store) before(q *gorm.DB, k auditKey) *gorm.DB {
	return q.Where("(created_at, id) < ("+s.timeParam()+", ?)", k.CreatedAt, k.ID)
}

// AuditOpts selects one page of the audit trail.
type AuditOpts struct {
	AuditFilter
	// Before is the cursor of the page: events older than it ("" for the
	// newest page).
	Before string
	Limit  int
}

// AuditPage is one page of the trail.
type AuditPage struct {
	Events []Event
	// Next is the cursor of the next (older) page; empty on the last page.
	Next string
	// Filter is the filter as applied (an email resolved to its actor).
	Filter AuditFilter
}

// AuditEvents returns one page of the audit trail, newest first.
func (s *Store) AuditEvents(ctx context.Context, o AuditOpts) (AuditPage, error) {
	if err := o.AuditFilter.Validate(); err != nil {
		return AuditPage{}, err
	}
	if o.Limit <= 0 {
		o.Limit = DefaultAuditLimit
	}
	o.Limit = min(o.Limit, MaxAuditLimit)
	f, err := s.resolveActor(ctx, o.AuditFilter)
	if err != nil {
		return AuditPage{}, err
	}
	q := s.auditQuery(ctx, f)
	if o.Before != "" {
		k, err := decodeAuditCursor(o.Before)
		if err != nil {
			return AuditPage{}, err
		}
		q = s.before(q, k)
	}
	var evs []Event
	if err := q.Order("created_at DESC, id DESC").Limit(o.Limit + 1).Find(&evs).Error; err != nil {
		return AuditPage{}, fmt.Errorf("audit trail: %w", err)
	}
	page := AuditPage{Events: evs, Filter: f}
	if len(evs) > o.Limit {
		page.Events = evs[:o.Limit]
		page.Next = encodeAuditCursor(page.Events[o.Limit-1])
	}
	return page, nil
}

// AuditPageSQL returns the SQL of the first page of f, for EXPLAIN in tests
// and for operators checking a plan.
func (s *Store) AuditPageSQL(ctx context.Context, f AuditFilter, cursor bool) (string, error) {
	f, err := s.resolveActor(ctx, f)
	if err != nil {
		return "", err
	}
	return s.DB.WithContext(ctx).ToSQL(func(tx *gorm.DB) *gorm.DB {
		q := auditWhere(tx, f)
		if cursor {
			q = s.before(q, auditKey{CreatedAt: NewUTCTime(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)), ID: "evt_~"})
		}
		var evs []Event
		return q.Order("created_at DESC, id DESC").Limit(DefaultAuditLimit + 1).Find(&evs)
	}), nil
}

// EachAuditEvent calls fn for every event matching f, newest first, reading
// AuditExportBatch events per query and calling batchDone after each batch
// (exports flush there). No connection is held while fn runs, so a slow
// client cannot block the database; memory is bounded by one batch.
func (s *Store) EachAuditEvent(ctx context.Context, f AuditFilter, fn func(Event) error, batchDone func() error) error {
	if err := f.Validate(); err != nil {
		return err
	}
	f, err := s.resolveActor(ctx, f)
	if err != nil {
		return err
	}
	var (
		batch  []Event
		cursor *auditKey
	)
	for {
		q := s.auditQuery(ctx, f)
		if cursor != nil {
			q = s.before(q, *cursor)
		}
		batch = batch[:0]
		if err := q.Order("created_at DESC, id DESC").Limit(AuditExportBatch).Find(&batch).Error; err != nil {
			return fmt.Errorf("audit export: %w", err)
		}
		for _, e := range batch {
			if err := fn(e); err != nil {
				return err
			}
		}
		if batchDone != nil {
			if err := batchDone(); err != nil {
				return err
			}
		}
		if len(batch) < AuditExportBatch {
			return nil
		}
		last := batch[len(batch)-1]
		cursor = &auditKey{CreatedAt: last.CreatedAt, ID: last.ID}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
}

// ExportEvent is an event as exports write it: every stored field, with
// created_at in the fixed-width form the hash covers, so that the hash can be
// recomputed from the export alone.
type ExportEvent struct {
	ID             string    `json:"id"`
	SessionID      string    `json:"session_id"`
	Seq            int64     `json:"seq"`
	Type           EventType `json:"type"`
	Actor          string    `json:"actor"`
	VersionBefore  int64     `json:"version_before"`
	VersionAfter   int64     `json:"version_after"`
	Payload        string    `json:"payload"`
	IdempotencyKey *string   `json:"idempotency_key"`
	PrevHash       string    `json:"prev_hash"`
	Hash           string    `json:"hash"`
	CreatedAt      string    `json:"created_at"`
}

// ExportOf converts an event for export.
func ExportOf(e Event) ExportEvent {
	return ExportEvent{
		ID: e.ID, SessionID: e.SessionID, Seq: e.Seq, Type: e.Type, Actor: e.Actor,
		VersionBefore: e.VersionBefore, VersionAfter: e.VersionAfter, Payload: e.Payload,
		IdempotencyKey: e.IdempotencyKey, PrevHash: e.PrevHash, Hash: e.Hash, CreatedAt: e.CreatedAt.String(),
	}
}

// AuditCSVHeader is the header row of the CSV export.
var AuditCSVHeader = []string{
	"created_at", "id", "session_id", "seq", "type", "actor", "version_before", "version_after",
	"idempotency_key", "prev_hash", "hash", "payload",
}

// countingWriter counts what passes through it.
type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// flush pushes buffered output to the client when w can (an HTTP response).
func flush(w io.Writer) {
	if f, ok := w.(interface{ Flush() }); ok {
		f.Flush()
	}
}

// spreadsheetSafe defuses a cell that a spreadsheet would run as a formula
// (OWASP "CSV injection"): it gets a leading apostrophe. Only free text
// (actors, idempotency keys) can start that way; JSONL keeps exact values.
func spreadsheetSafe(s string) string {
	if s != "" && strings.ContainsRune("=+-@\t\r", rune(s[0])) {
		return "'" + s
	}
	return s
}

// ExportAuditCSV writes the events matching f as CSV, newest first, batch by
// batch, flushing w after each batch. It returns the bytes written.
func (s *Store) ExportAuditCSV(ctx context.Context, w io.Writer, f AuditFilter) (int64, error) {
	cw := &countingWriter{w: w}
	bw := bufio.NewWriterSize(cw, 32<<10)
	out := csv.NewWriter(bw)
	if err := out.Write(AuditCSVHeader); err != nil {
		return cw.n, err
	}
	rec := make([]string, len(AuditCSVHeader))
	err := s.EachAuditEvent(ctx, f, func(e Event) error {
		key := ""
		if e.IdempotencyKey != nil {
			key = *e.IdempotencyKey
		}
		rec[0], rec[1], rec[2] = e.CreatedAt.String(), e.ID, e.SessionID
		rec[3], rec[4], rec[5] = strconv.FormatInt(e.Seq, 10), string(e.Type), spreadsheetSafe(e.Actor)
		rec[6], rec[7] = strconv.FormatInt(e.VersionBefore, 10), strconv.FormatInt(e.VersionAfter, 10)
		rec[8], rec[9], rec[10], rec[11] = spreadsheetSafe(key), e.PrevHash, e.Hash, e.Payload
		return out.Write(rec)
	}, func() error {
		out.Flush()
		if err := out.Error(); err != nil {
			return err
		}
		if err := bw.Flush(); err != nil {
			return err
		}
		flush(w)
		return nil
	})
	return cw.n, err
}

// ExportAuditJSONL writes the events matching f as JSON Lines (one
// ExportEvent per line), newest first, flushing w after each batch.
func (s *Store) ExportAuditJSONL(ctx context.Context, w io.Writer, f AuditFilter) (int64, error) {
	cw := &countingWriter{w: w}
	bw := bufio.NewWriterSize(cw, 32<<10)
	enc := json.NewEncoder(bw)
	err := s.EachAuditEvent(ctx, f, func(e Event) error {
		return enc.Encode(ExportOf(e))
	}, func() error {
		if err := bw.Flush(); err != nil {
			return err
		}
		flush(w)
		return nil
	})
	return cw.n, err
}

// TranscriptFormat names the transcript's layout.
const TranscriptFormat = "taskpilots.transcript.v1"

// TranscriptNote heads every transcript.
const TranscriptNote = "This is the complete event log of one session, in order, as stored. " +
	"Every event carries the SHA-256 hash of its content and the hash of the event before it (prev_hash), " +
	"so changing, removing or reordering any event breaks the chain. Follow the recipe to re-verify it " +
	"without TaskPilots; `taskpilots verify` and the admin console check the same chain and also replay the state. " +
	"Cutting events off the end (and fixing last_hash) would keep the chain intact: the checkpoint section, when present, " +
	"is a signed statement of how many events this session had and the hash of the last, with the proof that links it " +
	"to the signed root; `taskpilots verify --transcript FILE --checkpoint-pubkey KEY` checks all of it offline."

// TranscriptRecipe says how to recompute the chain of a transcript.
var TranscriptRecipe = []string{
	"1. Take the events in order; seq runs 1, 2, … n, and each version_before equals the previous event's version_after " +
		"(version_after is one more for an event that changes the work, the same for an audit-only one such as a review score).",
	"2. The first event's prev_hash is \"\"; every later event's prev_hash must equal the previous event's hash.",
	"3. For each event build this text, with no spaces, keys in exactly this order: " +
		`{"session_id":S,"seq":N,"type":S,"actor":S,"version_before":N,"version_after":N,"payload":P,"idempotency_key":S,"prev_hash":S,"created_at":S} ` +
		"where S is the field as a JSON string (idempotency_key null becomes \"\"; escape <, > and & as \\u003c, \\u003e, \\u0026 " +
		"as Go's encoding/json does), N the number, P the payload text inserted verbatim (it is already compact JSON), " +
		"and created_at as given (UTC, six fraction digits).",
	"4. The lowercase hex SHA-256 of that UTF-8 text must equal the event's hash.",
	"5. The last event's hash must equal last_hash.",
}

// TranscriptPython is the recipe as a short Python 3 program.
const TranscriptPython = `import hashlib, json, sys
t = json.load(open(sys.argv[1], encoding="utf-8"))
def s(v):
    v = json.dumps(v, ensure_ascii=False)
    for a, b in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("\u2028", "\\u2028"), ("\u2029", "\\u2029")):
        v = v.replace(a, b)
    return v
prev = ""
for e in t["events"]:
    text = ('{"session_id":%s,"seq":%d,"type":%s,"actor":%s,"version_before":%d,"version_after":%d,'
            '"payload":%s,"idempotency_key":%s,"prev_hash":%s,"created_at":%s}') % (
        s(e["session_id"]), e["seq"], s(e["type"]), s(e["actor"]), e["version_before"], e["version_after"],
        e["payload"], s(e["idempotency_key"] or ""), s(e["prev_hash"]), s(e["created_at"]))
    assert e["prev_hash"] == prev, "chain broken at seq %d" % e["seq"]
    assert hashlib.sha256(text.encode("utf-8")).hexdigest() == e["hash"], "hash mismatch at seq %d" % e["seq"]
    prev = e["hash"]
assert prev == t["last_hash"], "last_hash mismatch"
print("ok:", len(t["events"]), "events, chain intact")
`

// TranscriptVerification is the verification part of a transcript.
type TranscriptVerification struct {
	Algorithm string   `json:"algorithm"`
	Recipe    []string `json:"recipe"`
	Python    string   `json:"python"`
}

// transcriptHead is everything of a transcript but its events, which are
// streamed after it.
type transcriptHead struct {
	Format       string                 `json:"format"`
	SessionID    string                 `json:"session_id"`
	TicketRef    string                 `json:"ticket_ref"`
	Goal         string                 `json:"goal"`
	StateVersion int64                  `json:"state_version"`
	LastSeq      int64                  `json:"last_seq"`
	LastHash     string                 `json:"last_hash"`
	ExportedAt   string                 `json:"exported_at"`
	ExportedBy   string                 `json:"exported_by"`
	Note         string                 `json:"note"`
	Verification TranscriptVerification `json:"verification"`
	// Checkpoint is the newest signed checkpoint covering the session, with
	// the session's inclusion proof; absent when none covers it.
	Checkpoint *TranscriptCheckpoint `json:"checkpoint,omitempty"`
}

// Transcript is a decoded transcript (tests and tools read it back).
type Transcript struct {
	transcriptHead
	Events []ExportEvent `json:"events"`
}

// WriteTranscript writes the transcript of a session as one JSON document:
// a head (ids, the note, the verification recipe and cp, the checkpoint
// covering the session, if any) and every event up to the version read with
// the head, streamed page by page. cp must have been made before the head is
// read (TranscriptCheckpointFor), so that the events reach its count.
func (s *Store) WriteTranscript(ctx context.Context, w io.Writer, sessionID, exportedBy string, cp *TranscriptCheckpoint) error {
	row, err := s.GetSession(ctx, sessionID)
	if err != nil {
		return err
	}
	head := transcriptHead{
		Format: TranscriptFormat, SessionID: row.ID, TicketRef: row.TicketRef, Goal: row.Goal,
		StateVersion: row.StateVersion, LastSeq: row.LastSeq, LastHash: row.LastHash, ExportedAt: NewUTCTime(s.now()).String(),
		ExportedBy: exportedBy, Note: TranscriptNote,
		Verification: TranscriptVerification{Algorithm: "sha256", Recipe: TranscriptRecipe, Python: TranscriptPython},
		Checkpoint:   cp,
	}
	b, err := json.MarshalIndent(head, "", "  ")
	if err != nil {
		return err
	}
	bw := bufio.NewWriterSize(w, 32<<10)
	// Splice the events array into the head object: the head's closing brace
	// is replaced by the array.
	bw.Write(b[:len(b)-2])
	bw.WriteString(",\n  \"events\": [")
	var after int64
	first := true
	// Up to the seq read with the head, so that last_hash is the hash of
	// the last event written out.
	for after < row.LastSeq {
		evs, err := s.ListEvents(ctx, sessionID, after, 1000)
		if err != nil {
			return err
		}
		if len(evs) == 0 || evs[0].Seq > row.LastSeq {
			break
		}
		for _, e := range evs {
			if e.Seq > row.LastSeq {
				break
			}
			eb, err := json.Marshal(ExportOf(e))
			if err != nil {
				return err
			}
			if !first {
				bw.WriteString(",")
			}
			first = false
			bw.WriteString("\n    ")
			bw.Write(eb)
			after = e.Seq
		}
		if err := bw.Flush(); err != nil {
			return err
		}
		flush(w)
	}
	bw.WriteString("\n  ]\n}\n")
	return bw.Flush()
}
