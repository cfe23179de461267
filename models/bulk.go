package models

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// Bulk actions (issue 14): one command applies a session control to many
// sessions, chosen by id or by a listing filter. It is not a new kind of
// write: each session goes through the same single-session command as its
// own transaction, under its own lock and at the version read for it, so a
// session either takes the action whole or is skipped with the reason. The
// takeover policy decides per session, exactly as for one session; the
// filter is ListSessions, so what the list shows is what the bulk touches.
//
// A bulk is not atomic across sessions, on purpose: one session that cannot
// be cancelled must not keep 499 others from being cancelled, and one long
// transaction over 500 sessions would hold 500 row locks against the
// workers. The answer says which sessions took the action and why the others
// did not.

// BulkAction is what a bulk applies to each session.
type BulkAction string

// The bulk actions. Cancel, pause, resume (a paused session) and escalate
// are the controller's transitions; release gives held sessions back to the
// inbox and reassign hands them to another person, which only people do
// (the console).
const (
	BulkCancel   BulkAction = "cancel"
	BulkPause    BulkAction = "pause"
	BulkResume   BulkAction = "resume"
	BulkEscalate BulkAction = "escalate"
	BulkRelease  BulkAction = "release"
	BulkReassign BulkAction = "reassign"
)

// APIBulkActions are the actions of POST /api/v1/sessions/bulk.
var APIBulkActions = []BulkAction{BulkCancel, BulkPause, BulkResume, BulkEscalate}

// ConsoleBulkActions are the console's: the API's, release and reassign.
var ConsoleBulkActions = []BulkAction{BulkCancel, BulkPause, BulkResume, BulkEscalate, BulkRelease, BulkReassign}

// MaxBulkSessions bounds one bulk, by ids or by filter. A filter matching
// more is refused (422 naming "filter") rather than cut: acting on the
// newest 500 of 2,000 sessions would look like "all matching" but not be.
const MaxBulkSessions = 500

// takeover is the policy action of a bulk action (release: the holder's).
func (a BulkAction) takeover() TakeoverAction {
	switch a {
	case BulkCancel:
		return ActCancel
	case BulkPause:
		return ActPause
	case BulkResume:
		return ActUnpause
	case BulkEscalate:
		return ActEscalate
	case BulkRelease:
		return ActRelease
	case BulkReassign:
		return ActReassign
	}
	return ""
}

// Label is the action as the console names it.
func (a BulkAction) Label() string {
	if a == "" {
		return ""
	}
	return strings.ToUpper(string(a[:1])) + string(a[1:])
}

// BulkActionsFor lists the bulk actions u may take on some session, in the
// console's order: the ones the takeover policy does not rule out by role.
func BulkActionsFor(u User) []BulkAction {
	var out []BulkAction
	for _, a := range ConsoleBulkActions {
		if roleError(a.takeover(), "", u) == nil {
			out = append(out, a)
		}
	}
	return out
}

// BulkRoles are the user roles the takeover policy lets take some bulk
// action (the console route lets them through; Bulk judges each session).
func BulkRoles() []Role {
	var out []Role
	for _, a := range ConsoleBulkActions {
		for _, r := range ActionRoles(a.takeover()) {
			if !slices.Contains(out, r) {
				out = append(out, r)
			}
		}
	}
	return out
}

// BulkFilter selects sessions the way GET /api/v1/sessions does (same
// names, same meaning, through ListSessions). Status may list several
// statuses separated by commas.
type BulkFilter struct {
	Status    string `json:"status"`
	Queue     string `json:"queue"`
	TicketRef string `json:"ticket_ref"`
	Q         string `json:"q"`
}

// Empty reports whether f names no criterion.
func (f BulkFilter) Empty() bool {
	return strings.TrimSpace(f.Status+f.Queue+f.TicketRef+f.Q) == ""
}

// query is f as a listing of at most MaxBulkSessions+1 sessions.
func (f BulkFilter) query() SessionQuery {
	q := SessionQuery{Queue: strings.TrimSpace(f.Queue), TicketRef: strings.TrimSpace(f.TicketRef),
		Q: strings.TrimSpace(f.Q), Limit: MaxBulkSessions}
	for _, st := range strings.Split(f.Status, ",") {
		if st = strings.TrimSpace(st); st != "" {
			q.Statuses = append(q.Statuses, Status(st))
		}
	}
	return q
}

// BulkInput is one bulk command: an action, the sessions (ids or a filter,
// exactly one of them) and a reason recorded on every session's event.
type BulkInput struct {
	Action     BulkAction  `json:"action"`
	SessionIDs []string    `json:"session_ids"`
	Filter     *BulkFilter `json:"filter"`
	Reason     string      `json:"reason"`
	// DryRun reports what would happen and writes nothing.
	DryRun bool `json:"dry_run"`
	// To is the person a reassign hands the sessions to (user id or
	// email); the console's alone, so not a field of the API's request.
	To string `json:"-"`
}

// BulkSkip is a session the bulk did not change, and why.
type BulkSkip struct {
	SessionID string `json:"session_id"`
	Detail    string `json:"detail"`
}

// BulkResult is a bulk's answer. Matched counts the sessions selected (the
// ids, without repeats, or the filter's matches); each is either in Applied
// or in Skipped. On a dry run Applied lists the sessions that would take the
// action now.
type BulkResult struct {
	Applied []string   `json:"applied"`
	Skipped []BulkSkip `json:"skipped"`
	Matched int        `json:"matched"`
	// Replayed is set when the answer is the stored one of an earlier
	// request with the same idempotency key.
	Replayed bool `json:"-"`
}

// BulkBy is who runs a bulk: a console user, judged by the takeover policy
// per session, or an API token (controller or admin), judged by the
// transition table as the single-session routes judge it.
type BulkBy struct {
	User  *User
	Token *APIToken
}

func (b BulkBy) actor() string {
	if b.User != nil {
		return b.User.Actor()
	}
	if b.Token != nil {
		return b.Token.Actor()
	}
	return ""
}

func (b BulkBy) actions() []BulkAction {
	if b.User != nil {
		return ConsoleBulkActions
	}
	return APIBulkActions
}

// policyAction is the takeover action by takes for a on a session held by
// holder: an admin's release of somebody else's claim is a forced release;
// anyone else's is a release, which the policy refuses them.
func (b BulkBy) policyAction(a BulkAction, holder string) TakeoverAction {
	if a == BulkRelease && b.User != nil && b.User.Role == RoleAdmin && holder != "" && holder != b.User.Actor() {
		return ActForceRelease
	}
	return a.takeover()
}

// sessionIDPattern is the shape of the ids NewID("ses") makes; anything else
// cannot name a session and is refused before anything is read.
var sessionIDPattern = regexp.MustCompile(`^ses_[0-9A-Za-z]{1,64}$`)

// Validate lists every problem with the input for the principal by (which
// actions it has). Nothing is read.
func (in BulkInput) Validate(by BulkBy) error {
	v := &ValidationError{}
	CheckNUL(v, "", in)
	if in.Action == "" {
		v.Add("action", "is required: one of %s", bulkActionList(by.actions()))
	} else if !slices.Contains(by.actions(), in.Action) {
		v.Add("action", "unknown action %q; known: %s", in.Action, bulkActionList(by.actions()))
	}
	switch {
	case in.SessionIDs != nil && in.Filter != nil:
		v.Add("filter", "give either session_ids or filter, not both")
	case in.SessionIDs == nil && in.Filter == nil:
		v.Add("session_ids", "is required unless a filter is given: list 1 to %d session ids, or send a filter", MaxBulkSessions)
	case in.SessionIDs != nil:
		switch n := len(in.SessionIDs); {
		case n == 0:
			v.Add("session_ids", "must list at least one session id")
		case n > MaxBulkSessions:
			v.Add("session_ids", "must list at most %d sessions (got %d); send several requests", MaxBulkSessions, n)
		default:
			for i, id := range in.SessionIDs {
				if !sessionIDPattern.MatchString(id) {
					v.Add(fmt.Sprintf("session_ids[%d]", i), "is not a session id (ses_…)")
				}
			}
		}
	default:
		if in.Filter.Empty() {
			v.Add("filter", "must name at least one of status, queue, ticket_ref or q")
			break
		}
		var ve *ValidationError
		if errors.As(in.Filter.query().Validate(), &ve) {
			for _, f := range ve.Fields {
				v.Add("filter."+f.Field, "%s", f.Message)
			}
		}
	}
	if in.Action == BulkReassign && strings.TrimSpace(in.To) == "" {
		v.Add("to", "is required: the agent or admin to hand the sessions to")
	}
	// Every single-session control takes an optional reason; the bulk
	// records the same one on each session.
	if len(in.Reason) > MaxItemLen {
		v.Add("reason", "must be at most %d bytes", MaxItemLen)
	}
	return v.Err()
}

func bulkActionList(as []BulkAction) string {
	names := make([]string, len(as))
	for i, a := range as {
		names[i] = string(a)
	}
	return strings.Join(names, ", ")
}

// bulkTarget is a selected session as the bulk reads it before acting: the
// projection columns the policy needs.
type bulkTarget struct {
	ID           string
	Status       Status
	Assignee     string
	StateVersion int64
	found        bool
}

func (t bulkTarget) state() State {
	return State{SessionID: t.ID, Status: t.Status, Assignee: t.Assignee, Version: t.StateVersion}
}

// Bulk runs in for by: each selected session takes the action through its
// single-session command, in its own transaction at the version read for it,
// or is skipped with the policy's reason. A session that changed between the
// read and its transaction is read again and judged once more (the second
// conflict in a row skips it). With DryRun nothing is written. With idemKey
// (not on a dry run) the whole answer is stored and a repeat gets it back
// (Replayed) without acting again; the same key with another request is
// ErrIdempotencyMismatch.
//
// Invalid input is a *ValidationError and writes nothing. An error from the
// database stops the bulk: the sessions already done stay done (each is
// whole) and the caller gets the error, not a partial answer.
func (s *Store) Bulk(ctx context.Context, by BulkBy, idemKey string, in BulkInput) (BulkResult, error) {
	actor := by.actor()
	if actor == "" {
		return BulkResult{}, fmt.Errorf("bulk %s: no user or token", in.Action)
	}
	if by.User == nil && by.Token.Role != RoleController && by.Token.Role != RoleAdmin {
		return BulkResult{}, fmt.Errorf("bulk %s by %s: %w", in.Action, actor, ErrForbidden)
	}
	if err := in.Validate(by); err != nil {
		return BulkResult{}, err
	}
	if by.User != nil {
		// The role part of the policy does not depend on the session: an
		// agent's bulk cancel is refused whole (403), not skipped 500 times.
		if err := roleError(in.Action.takeover(), "(bulk)", *by.User); err != nil {
			return BulkResult{}, err
		}
	}
	if HasNUL(idemKey) {
		return BulkResult{}, &ValidationError{Fields: []FieldError{{Field: "idempotency_key", Message: NULMessage}}}
	}
	in.Reason = strings.TrimSpace(in.Reason)
	var fp string
	if idemKey != "" && !in.DryRun {
		var err error
		if fp, err = Fingerprint("bulk", in, in.To); err != nil {
			return BulkResult{}, fmt.Errorf("bulk %s: %w", in.Action, err)
		}
		if prev, found, err := s.bulkAnswer(ctx, actor, idemKey, fp); err != nil || found {
			return prev, err
		}
	}
	var to string
	if in.Action == BulkReassign {
		target, err := s.reassignTarget(ctx, in.To)
		if err != nil {
			return BulkResult{}, err
		}
		to = target.Actor()
	}
	targets, err := s.bulkTargets(ctx, in)
	if err != nil {
		return BulkResult{}, err
	}
	res := BulkResult{Applied: []string{}, Skipped: []BulkSkip{}, Matched: len(targets)}
	for _, t := range targets {
		detail, err := s.bulkOne(ctx, by, in, to, t)
		if err != nil {
			return BulkResult{}, fmt.Errorf("bulk %s: session %s: %w", in.Action, t.ID, err)
		}
		if detail != "" {
			res.Skipped = append(res.Skipped, BulkSkip{SessionID: t.ID, Detail: detail})
		} else {
			res.Applied = append(res.Applied, t.ID)
		}
	}
	if fp != "" {
		return s.storeBulkAnswer(ctx, actor, idemKey, fp, res)
	}
	return res, nil
}

// bulkTargets reads the selected sessions, in the order given (ids, without
// repeats) or the listing's order (filter).
func (s *Store) bulkTargets(ctx context.Context, in BulkInput) ([]bulkTarget, error) {
	if in.Filter != nil {
		page, err := s.ListSessions(ctx, in.Filter.query())
		if err != nil {
			var ve *ValidationError
			if errors.As(err, &ve) {
				for i := range ve.Fields {
					ve.Fields[i].Field = "filter." + ve.Fields[i].Field
				}
			}
			return nil, err
		}
		if page.NextCursor != "" {
			return nil, &ValidationError{Fields: []FieldError{{Field: "filter",
				Message: fmt.Sprintf("matches more than %d sessions; narrow it (status, queue, ticket_ref, q) or send session_ids in batches", MaxBulkSessions)}}}
		}
		out := make([]bulkTarget, len(page.Sessions))
		for i, r := range page.Sessions {
			out[i] = bulkTarget{ID: r.ID, Status: r.Status, Assignee: r.Assignee, StateVersion: r.StateVersion, found: true}
		}
		return out, nil
	}
	var ids []string
	for _, id := range in.SessionIDs {
		if !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	var rows []bulkTarget
	if err := s.DB.WithContext(ctx).Model(&Session{}).Select("id, status, assignee, state_version").
		Where("id IN ?", ids).Scan(&rows).Error; err != nil {
		return nil, fmt.Errorf("bulk: read sessions: %w", err)
	}
	byID := make(map[string]bulkTarget, len(rows))
	for _, r := range rows {
		r.found = true
		byID[r.ID] = r
	}
	out := make([]bulkTarget, len(ids))
	for i, id := range ids {
		out[i] = byID[id]
		out[i].ID = id
	}
	return out, nil
}

// bulkOne takes the action on one session: "" when it did (or, on a dry
// run, would), else the reason it was skipped. The error is a failure of
// the database, which stops the bulk.
func (s *Store) bulkOne(ctx context.Context, by BulkBy, in BulkInput, to string, t bulkTarget) (string, error) {
	for attempt := 0; ; attempt++ {
		if !t.found {
			return "no such session", nil
		}
		if why := s.bulkRefusal(by, in.Action, t); why != "" {
			return why, nil
		}
		if to != "" && t.Assignee == to {
			return "held by that person already", nil
		}
		if in.DryRun {
			return "", nil
		}
		if s.bulkHook != nil {
			s.bulkHook(t.ID)
		}
		err := s.bulkExecute(ctx, by, in, t)
		var ce *ConflictError
		switch {
		case err == nil:
			return "", nil
		case errors.As(err, &ce) && attempt == 0:
			// Changed since it was read: judge it again on what it is now.
			row, gerr := s.GetSession(ctx, t.ID)
			if gerr != nil {
				return "", gerr
			}
			t = bulkTarget{ID: row.ID, Status: row.Status, Assignee: row.Assignee, StateVersion: row.StateVersion, found: true}
			continue
		case errors.As(err, &ce):
			return fmt.Sprintf("changed while the bulk ran (now at version %d); nothing was written to it", ce.CurrentVersion), nil
		}
		switch ErrorCode(err) {
		case ENOTFOUND:
			return "no such session", nil
		case EILLEGAL, EFORBIDDEN, EINVALID:
			// The command's own check under the lock refused it.
			if why := s.bulkRefusal(by, in.Action, t); why != "" {
				return why, nil
			}
			return err.Error(), nil
		}
		return "", err
	}
}

// bulkRefusal is the takeover policy's reason why by may not take the
// action on t now, or "".
func (s *Store) bulkRefusal(by BulkBy, a BulkAction, t bulkTarget) string {
	st := t.state()
	if by.User != nil {
		if ok, why := TakeoverPolicy(by.policyAction(a, st.Assignee), *by.User, st); !ok {
			return why
		}
		return ""
	}
	if r, why := controlRefusal(a.takeover(), st); r != allowed {
		return why
	}
	return ""
}

// bulkExecute runs the single-session command of the action on t at the
// version read for it.
func (s *Store) bulkExecute(ctx context.Context, by BulkBy, in BulkInput, t bulkTarget) error {
	v := t.StateVersion
	var err error
	switch {
	case in.Action == BulkReassign:
		_, err = s.Reassign(ctx, t.ID, *by.User, "", ReassignInput{ExpectedVersion: &v, To: in.To, Reason: in.Reason})
	case in.Action == BulkRelease:
		ri := ReleaseInput{ExpectedVersion: &v, Reason: in.Reason}
		if by.policyAction(in.Action, t.Assignee) == ActForceRelease {
			_, err = s.ForceRelease(ctx, t.ID, *by.User, "", ri)
		} else {
			_, err = s.Release(ctx, t.ID, *by.User, "", ri)
		}
	case by.User != nil:
		_, err = s.ControlSession(ctx, t.ID, *by.User, in.Action.takeover(), "", ControlInput{ExpectedVersion: &v, Reason: in.Reason})
	default:
		_, err = s.Transition(ctx, t.ID, controlEvent(in.Action.takeover()), by.Token.Actor(), "",
			TransitionInput{ExpectedVersion: &v, Reason: in.Reason})
	}
	return err
}

// bulkAnswer is the stored answer of an earlier bulk with this key, if any.
func (s *Store) bulkAnswer(ctx context.Context, actor, key, fp string) (BulkResult, bool, error) {
	out, found, err := lookupIdempotency(s.DB.WithContext(ctx), actor, key, fp)
	if err != nil || !found {
		return BulkResult{}, found, err
	}
	var res BulkResult
	if err := json.Unmarshal(out.Data, &res); err != nil {
		return BulkResult{}, true, fmt.Errorf("idempotency key %q: decode bulk answer: %w", key, err)
	}
	res.Replayed = true
	return res, true, nil
}

// storeBulkAnswer records the answer under the key, in the table (and scope)
// of every idempotent write, so a key is one request whatever it was. Two
// requests with one key at once both act (each session still once: the
// second finds it changed) and the first answer stored is the one both get.
func (s *Store) storeBulkAnswer(ctx context.Context, actor, key, fp string, res BulkResult) (BulkResult, error) {
	data, err := json.Marshal(res)
	if err != nil {
		return BulkResult{}, err
	}
	b, err := json.Marshal(Outcome{Data: data})
	if err != nil {
		return BulkResult{}, err
	}
	err = s.Write(ctx, func(tx *Tx) error {
		tx.Later(failWith("idempotency key %q", key),
			`INSERT INTO idempotency_keys (scope, key, fingerprint, outcome, created_at) VALUES (?, ?, ?, ?, ?)`,
			actor, key, fp, string(b), NewUTCTime(s.now()))
		return nil
	})
	if err != nil {
		if prev, found, lerr := s.bulkAnswer(ctx, actor, key, fp); found {
			return prev, lerr
		}
		return BulkResult{}, err
	}
	return res, nil
}
