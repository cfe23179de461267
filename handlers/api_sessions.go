package handlers

import (
	"encoding/json"
	"math"
	"net/http"
	"strconv"

	"github.com/labstack/echo/v4"

	"github.com/taskpilots/handoff/models"
)

// createSession serves POST /sessions.
func (a *API) createSession(c echo.Context) error {
	var in models.CreateSessionInput
	key, err := bind(c, &in, func() error { return in.Validate() })
	if err != nil {
		return err
	}
	out, err := a.Store.CreateSession(c.Request().Context(), actor(c), key, in)
	if err != nil {
		return err
	}
	c.Response().Header().Set(echo.HeaderLocation, c.Path()+"/"+out.SessionID)
	return writeOutcome(c, http.StatusCreated, out, written(out))
}

// sessionView is a session with its latest valid state.
type sessionView struct {
	SessionID    string          `json:"session_id"`
	ParentID     *string         `json:"parent_id"`
	TicketRef    string          `json:"ticket_ref"`
	Goal         string          `json:"goal"`
	Status       models.Status   `json:"status"`
	Priority     int             `json:"priority"`
	StateVersion int64           `json:"state_version"`
	CurrentStep  string          `json:"current_step"`
	Queue        string          `json:"queue"`
	Assignee     string          `json:"assignee"`
	State        json.RawMessage `json:"state"`
	EscalatedAt  models.NullTime `json:"escalated_at"`
	CreatedAt    models.UTCTime  `json:"created_at"`
	UpdatedAt    models.UTCTime  `json:"updated_at"`
}

// getSession serves GET /sessions/{id}: the projection row, one indexed read.
func (a *API) getSession(c echo.Context) error {
	row, err := a.Store.GetSession(c.Request().Context(), c.Param("id"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, sessionView{
		SessionID: row.ID, ParentID: row.ParentID, TicketRef: row.TicketRef, Goal: row.Goal,
		Status: row.Status, Priority: row.Priority, StateVersion: row.StateVersion,
		CurrentStep: row.CurrentStep, Queue: row.Queue, Assignee: row.Assignee,
		State: json.RawMessage(row.State), EscalatedAt: row.EscalatedAt,
		CreatedAt: row.CreatedAt, UpdatedAt: row.UpdatedAt,
	})
}

// eventView is one event; its payload is a JSON object, not a string.
type eventView struct {
	ID             string           `json:"id"`
	SessionID      string           `json:"session_id"`
	Seq            int64            `json:"seq"`
	Type           models.EventType `json:"type"`
	Actor          string           `json:"actor"`
	VersionBefore  int64            `json:"version_before"`
	VersionAfter   int64            `json:"version_after"`
	Payload        json.RawMessage  `json:"payload"`
	IdempotencyKey *string          `json:"idempotency_key"`
	Hash           string           `json:"hash"`
	PrevHash       string           `json:"prev_hash"`
	CreatedAt      models.UTCTime   `json:"created_at"`
	// Traceparent and Tracestate: the W3C trace context of the request that
	// caused the event (metadata, not hashed).
	Traceparent string `json:"traceparent,omitempty"`
	Tracestate  string `json:"tracestate,omitempty"`
}

type eventsPage struct {
	Events []eventView `json:"events"`
	// NextAfterSeq is the after_seq that continues the listing: the last
	// returned seq, or the requested after_seq when nothing was returned.
	NextAfterSeq int64 `json:"next_after_seq"`
}

// Paging bounds of GET /sessions/{id}/events.
const (
	defaultEventsLimit = 100
	maxEventsLimit     = 1000
)

// listEvents serves GET /sessions/{id}/events?after_seq=N&limit=M.
func (a *API) listEvents(c echo.Context) error {
	v := &models.ValidationError{}
	after := queryInt(c, "after_seq", 0, 0, math.MaxInt64, v)
	limit := queryInt(c, "limit", defaultEventsLimit, 1, maxEventsLimit, v)
	if err := v.Err(); err != nil {
		return err
	}
	ctx := c.Request().Context()
	id := c.Param("id")
	// An unknown session is a 404, not an empty page.
	if _, err := a.Store.GetSession(ctx, id); err != nil {
		return err
	}
	evs, err := a.Store.ListEvents(ctx, id, after, int(limit))
	if err != nil {
		return err
	}
	// Blind double review: scores still blind to this token are redacted.
	if evs, err = a.Store.RedactReviews(ctx, readerOf(c), evs); err != nil {
		return err
	}
	page := eventsPage{Events: make([]eventView, 0, len(evs)), NextAfterSeq: after}
	for _, e := range evs {
		payload := json.RawMessage(e.Payload)
		if !json.Valid(payload) {
			// A tampered row must still be shown (verify reports it), as text.
			payload, _ = json.Marshal(e.Payload)
		}
		page.Events = append(page.Events, eventView{
			ID: e.ID, SessionID: e.SessionID, Seq: e.Seq, Type: e.Type, Actor: e.Actor,
			VersionBefore: e.VersionBefore, VersionAfter: e.VersionAfter, Payload: payload,
			IdempotencyKey: e.IdempotencyKey, Hash: e.Hash, PrevHash: e.PrevHash, CreatedAt: e.CreatedAt,
			Traceparent: e.Traceparent, Tracestate: e.Tracestate,
		})
		page.NextAfterSeq = e.Seq
	}
	return c.JSON(http.StatusOK, page)
}

// stateAt serves GET /sessions/{id}/state?version=V: the state rebuilt by
// replaying its events up to version V (models.Store.StateAt), in the
// canonical encoding the session row stores (so version = current answers
// exactly the stored state).
func (a *API) stateAt(c echo.Context) error {
	v := &models.ValidationError{}
	if c.QueryParam("version") == "" {
		v.Add("version", "is required")
	}
	version := queryInt(c, "version", 0, 1, math.MaxInt64, v)
	if err := v.Err(); err != nil {
		return err
	}
	st, err := a.Store.StateAt(c.Request().Context(), c.Param("id"), version)
	if err != nil {
		return err
	}
	b, err := models.EncodeState(st)
	if err != nil {
		return err
	}
	return c.JSONBlob(http.StatusOK, b)
}

// packet serves GET /sessions/{id}/packet: the context packet built from the
// stored latest valid state, as JSON or (format=prompt) as text for a model
// with its stable prefix's length and hash in the Prefix-Bytes and
// Prefix-Hash headers.
func (a *API) packet(c echo.Context) error {
	format := c.QueryParam("format")
	if format != "" && format != "json" && format != "prompt" {
		return &models.ValidationError{Fields: []models.FieldError{{Field: "format", Message: "must be json or prompt"}}}
	}
	row, err := a.Store.GetSession(c.Request().Context(), c.Param("id"))
	if err != nil {
		return err
	}
	st, err := row.Decode()
	if err != nil {
		return err
	}
	p := models.BuildPacket(st, "")
	if format == "prompt" {
		pr := models.RenderPrompt(p)
		h := c.Response().Header()
		h.Set("Prefix-Bytes", strconv.Itoa(pr.PrefixBytes))
		h.Set("Prefix-Hash", pr.PrefixHash)
		return c.Blob(http.StatusOK, echo.MIMETextPlainCharsetUTF8, []byte(pr.Text))
	}
	// The exact bytes the budget measured.
	b, err := json.Marshal(p)
	if err != nil {
		return err
	}
	return c.JSONBlob(http.StatusOK, b)
}

// transition serves POST /sessions/{id}/pause|resume|escalate|cancel.
func (a *API) transition(t models.EventType) echo.HandlerFunc {
	return func(c echo.Context) error {
		var in models.TransitionInput
		key, err := bind(c, &in, func() error { return in.Validate() })
		if err != nil {
			return err
		}
		out, err := a.Store.Transition(c.Request().Context(), c.Param("id"), t, actor(c), key, in)
		if err != nil {
			return err
		}
		return writeOutcome(c, http.StatusOK, out, written(out))
	}
}
