package handlers

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/views"
)

// ConsoleSession serves GET /console/sessions/:id: the escalation package,
// the takeover forms, the packet, related sessions, the timeline (?type=),
// the state at a version (?version=) and the diff of two versions
// (?from=&to=).
func ConsoleSession(s *models.Store) echo.HandlerFunc {
	return func(c echo.Context) error {
		d, err := loadSessionPage(c, s, c.Param("id"))
		if err != nil {
			return err
		}
		status := http.StatusOK
		if d.TimelineError != "" {
			status = http.StatusUnprocessableEntity
		}
		if err := loadHistory(c, s, &d); err != nil {
			var ve *models.ValidationError
			if !errors.As(err, &ve) {
				return err
			}
			d.HistoryError = "The version " + ve.Fields[0].Message + "."
			status = http.StatusUnprocessableEntity
		}
		return Render(c, status, views.SessionPage(d))
	}
}

// loadSessionPage reads the session and everything the page names, and
// decides which takeover forms the current user gets.
func loadSessionPage(c echo.Context, s *models.Store, id string) (views.SessionPageData, error) {
	ctx := c.Request().Context()
	q, timelineErr := timelineQuery(c)
	detail, err := s.GetSessionDetailPage(ctx, id, models.ReaderOfUser(*CurrentUser(c)), q)
	if err != nil {
		return views.SessionPageData{}, err
	}
	d := views.SessionPageData{
		SessionDetail: detail,
		Now:           s.Now().UTC(),
		Actions:       models.TakeoverActions(detail.State, *CurrentUser(c)),
		TypeFilter:    q.Type,
		FormKey:       models.RandomSecret(12),
		TimelineError: timelineErr,
	}
	if d.Names, err = s.DisplayNames(ctx, detail.Actors()...); err != nil {
		return d, fmt.Errorf("session %s: %w", id, err)
	}
	return d, nil
}

// timelineQuery reads the timeline page of ?before= and ?type=. A page that
// cannot be read falls back to the newest page with the reason, so that the
// rest of the page still works.
func timelineQuery(c echo.Context) (models.TimelineQuery, string) {
	q := models.TimelineQuery{Type: models.EventType(strings.TrimSpace(c.QueryParam("type")))}
	if q.Type != "" && !slices.Contains(models.AllEventTypes, q.Type) {
		return models.TimelineQuery{}, "There is no event type “" + string(q.Type) + "”; showing every type."
	}
	if raw := strings.TrimSpace(c.QueryParam("before")); raw != "" {
		b, err := strconv.ParseInt(raw, 10, 64)
		if err != nil || b < 1 {
			return models.TimelineQuery{Type: q.Type}, "The timeline position must be a positive whole number; showing the newest events."
		}
		q.Before = b
	}
	return q, ""
}

// loadHistory fills the state at ?version= and the diff of ?from= and ?to=.
func loadHistory(c echo.Context, s *models.Store, d *views.SessionPageData) error {
	ctx := c.Request().Context()
	id := d.Row.ID
	if raw := c.QueryParam("version"); raw != "" {
		v, err := versionParam("version", raw)
		if err != nil {
			return err
		}
		st, err := s.StateAt(ctx, id, v)
		if err != nil {
			return err
		}
		d.At, d.AtVersion = &st, v
	}
	rawFrom, rawTo := c.QueryParam("from"), c.QueryParam("to")
	if rawFrom == "" && rawTo == "" {
		return nil
	}
	from, err := versionParam("from", rawFrom)
	if err != nil {
		return err
	}
	to, err := versionParam("to", rawTo)
	if err != nil {
		return err
	}
	a, err := s.StateAt(ctx, id, from)
	if err != nil {
		return err
	}
	b, err := s.StateAt(ctx, id, to)
	if err != nil {
		return err
	}
	if d.Diff, err = models.DiffStates(a, b); err != nil {
		return fmt.Errorf("session %s: diff %d..%d: %w", id, from, to, err)
	}
	d.DiffFrom, d.DiffTo, d.ShowDiff = from, to, true
	return nil
}

func versionParam(field, raw string) (int64, error) {
	v, err := strconv.ParseInt(strings.TrimSpace(raw), 10, 64)
	if err != nil {
		return 0, &models.ValidationError{Fields: []models.FieldError{{Field: field, Message: "must be a whole number"}}}
	}
	return v, nil
}

// ConsoleSessionChanges serves GET /console/sessions/:id/changes?version=V,
// which the session page polls: 204 while the session is still at V, else
// the notice of what moved it on. Only the notice is swapped, so nothing
// typed into the page's forms is lost.
func ConsoleSessionChanges(s *models.Store) echo.HandlerFunc {
	return func(c echo.Context) error {
		v, err := strconv.ParseInt(strings.TrimSpace(c.QueryParam("version")), 10, 64)
		if err != nil || v < 0 {
			return c.String(http.StatusBadRequest, "version must be a whole number")
		}
		ctx := c.Request().Context()
		id := c.Param("id")
		ch, err := s.ChangesSince(ctx, id, v)
		if err != nil {
			return err
		}
		if ch.Version <= v {
			return c.NoContent(http.StatusNoContent)
		}
		actors := make([]string, len(ch.Events))
		for i, e := range ch.Events {
			actors[i] = e.Actor
		}
		names, err := s.DisplayNames(ctx, actors...)
		if err != nil {
			return fmt.Errorf("session %s: changes: %w", id, err)
		}
		// A fragment: no layout, never cached.
		c.Response().Header().Set("Cache-Control", "no-store")
		return Render(c, http.StatusOK, views.ChangeNotice(id, v, ch, names))
	}
}
