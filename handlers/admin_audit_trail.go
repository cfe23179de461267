package handlers

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/views"
)

// auditTimeLayouts are the accepted forms of the from/to filters: what a
// datetime-local input sends (UTC is meant), RFC 3339, or a bare date.
var auditTimeLayouts = []string{"2006-01-02T15:04", "2006-01-02T15:04:05", time.RFC3339Nano, "2006-01-02"}

func parseAuditTime(field, raw string, v *models.ValidationError) time.Time {
	if raw == "" {
		return time.Time{}
	}
	for _, l := range auditTimeLayouts {
		if t, err := time.ParseInLocation(l, raw, time.UTC); err == nil {
			return t.UTC()
		}
	}
	v.Add(field, "must be a date and time such as 2026-01-31T14:00")
	return time.Time{}
}

// bindAuditFilter reads the audit filter from the query string. It returns
// what was typed (for the form and links) and the filter, or the invalid
// fields.
func bindAuditFilter(c echo.Context) (views.AuditQuery, models.AuditFilter, error) {
	q := views.AuditQuery{
		Session: strings.TrimSpace(c.QueryParam("session")),
		Ticket:  strings.TrimSpace(c.QueryParam("ticket")),
		Actor:   strings.TrimSpace(c.QueryParam("actor")),
		Type:    strings.TrimSpace(c.QueryParam("type")),
		From:    strings.TrimSpace(c.QueryParam("from")),
		To:      strings.TrimSpace(c.QueryParam("to")),
	}
	v := &models.ValidationError{}
	f := models.AuditFilter{
		SessionID: q.Session, TicketRef: q.Ticket, Actor: q.Actor, Type: models.EventType(q.Type),
		From: parseAuditTime("from", q.From, v), To: parseAuditTime("to", q.To, v),
	}
	var fv *models.ValidationError
	if errors.As(f.Validate(), &fv) {
		for _, fe := range fv.Fields {
			// A time that did not parse is reported once, by the parser.
			if (fe.Field == "from" || fe.Field == "to") && hasField(v, fe.Field) {
				continue
			}
			v.Fields = append(v.Fields, fe)
		}
	}
	return q, f, v.Err()
}

func hasField(v *models.ValidationError, field string) bool {
	for _, f := range v.Fields {
		if f.Field == field {
			return true
		}
	}
	return false
}

// AuditTrail serves GET /console/audit: every event, newest first, with
// filters (?session= &ticket= &actor= &type= &from= &to=) and keyset pages
// (?before=). An invalid filter re-renders the form with 422.
func AuditTrail(s *models.Store) echo.HandlerFunc {
	return func(c echo.Context) error {
		q, f, err := bindAuditFilter(c)
		d := views.AuditTrailData{Query: q, Before: strings.TrimSpace(c.QueryParam("before"))}
		if err == nil {
			d.Page, err = s.AuditEvents(c.Request().Context(), models.AuditOpts{AuditFilter: f, Before: d.Before})
		}
		var ve *models.ValidationError
		if errors.As(err, &ve) {
			d.Errors = map[string]string{}
			// The filter's field names are the form's.
			for _, fe := range ve.Fields {
				d.Errors[fe.Field] = fe.Message
			}
			if msg := d.Errors["before"]; msg != "" {
				return echo.NewHTTPError(http.StatusUnprocessableEntity, "The page cursor "+msg+".")
			}
			return Render(c, http.StatusUnprocessableEntity, views.AuditTrailPage(d))
		}
		if err != nil {
			return err
		}
		actors := make([]string, 0, len(d.Page.Events))
		for _, e := range d.Page.Events {
			actors = append(actors, e.Actor)
		}
		if d.Names, err = s.DisplayNames(c.Request().Context(), actors...); err != nil {
			return fmt.Errorf("audit trail: %w", err)
		}
		return Render(c, http.StatusOK, views.AuditTrailPage(d))
	}
}

// Export formats of the audit trail.
const (
	ExportCSV   = "csv"
	ExportJSONL = "jsonl"
)

// AuditExport serves GET /console/audit/export.csv and export.jsonl: every
// event matching the filter, streamed batch by batch and flushed as it goes,
// so an export of millions of events needs the memory of one batch. The
// export is recorded in the admin log with its filter.
func AuditExport(s *models.Store, format string) echo.HandlerFunc {
	return func(c echo.Context) error {
		_, f, err := bindAuditFilter(c)
		if err != nil {
			return err
		}
		ctx := c.Request().Context()
		u := CurrentUser(c)
		if err := s.RecordAdminAction(ctx, *u, models.AdminAuditExport, "events", "", map[string]any{
			"format": format, "session": f.SessionID, "ticket": f.TicketRef, "actor": f.Actor, "type": f.Type,
			"from": timeOrEmpty(f.From), "to": timeOrEmpty(f.To),
		}); err != nil {
			return err
		}
		name := "taskpilots-audit-" + s.Now().UTC().Format("20060102T150405Z") + "." + format
		h := c.Response().Header()
		h.Set(echo.HeaderContentDisposition, `attachment; filename="`+name+`"`)
		h.Set("Cache-Control", "no-store")
		if format == ExportCSV {
			h.Set(echo.HeaderContentType, "text/csv; charset=utf-8")
		} else {
			h.Set(echo.HeaderContentType, "application/x-ndjson; charset=utf-8")
		}
		c.Response().WriteHeader(http.StatusOK)
		if format == ExportCSV {
			_, err = s.ExportAuditCSV(ctx, c.Response(), f)
		} else {
			_, err = s.ExportAuditJSONL(ctx, c.Response(), f)
		}
		// The status is sent; a failure now can only cut the download short,
		// and the error handler logs it.
		return err
	}
}

func timeOrEmpty(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339)
}

// SessionTranscript serves GET /console/audit/sessions/:id/transcript.json:
// every event of one session with its hashes, a note and a recipe to
// re-verify the chain without this software, and the newest signed
// checkpoint covering the session with its inclusion proof (signing one
// first when the session moved since the last), so that a cut tail shows.
func SessionTranscript(s *models.Store, cp *models.Checkpointer) echo.HandlerFunc {
	return func(c echo.Context) error {
		ctx := c.Request().Context()
		id := c.Param("id")
		if _, err := s.GetSession(ctx, id); err != nil {
			return err
		}
		u := CurrentUser(c)
		if err := s.RecordAdminAction(ctx, *u, models.AdminTranscript, "session", id, nil); err != nil {
			return err
		}
		proof, err := s.TranscriptCheckpointFor(ctx, id, cp, u.Actor())
		if err != nil {
			return err
		}
		h := c.Response().Header()
		h.Set(echo.HeaderContentDisposition, `attachment; filename="transcript-`+id+`.json"`)
		h.Set(echo.HeaderContentType, echo.MIMEApplicationJSON)
		h.Set("Cache-Control", "no-store")
		c.Response().WriteHeader(http.StatusOK)
		return s.WriteTranscript(ctx, c.Response(), id, u.Actor(), proof)
	}
}
