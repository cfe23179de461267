package handlers

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/views"
)

// ConsoleSession serves GET /console/sessions/:id: the escalation package,
// the takeover forms, the packet, related sessions, the timeline (?type=,
// paged back with ?before=seq, views.TimelinePage events a page), the state
// at a version (?version=) and the diff of two versions (?from=&to=).
func ConsoleSession(s *models.Store) echo.HandlerFunc {
	return func(c echo.Context) error {
		d, err := loadSessionPage(c, s, c.Param("id"))
		if err != nil {
			return err
		}
		if raw := c.QueryParam("before"); raw != "" {
			b, err := strconv.ParseInt(strings.TrimSpace(raw), 10, 64)
			if err != nil || b < 1 {
				return &models.ValidationError{Fields: []models.FieldError{{Field: "before", Message: "must be a whole number of at least 1"}}}
			}
			d.EventsBefore = b
		}
		status := http.StatusOK
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
	detail, err := s.GetSessionDetail(ctx, id, models.ReaderOfUser(*CurrentUser(c)))
	if err != nil {
		return views.SessionPageData{}, err
	}
	d := views.SessionPageData{
		SessionDetail: detail,
		Now:           s.Now().UTC(),
		Actions:       models.TakeoverActions(detail.State, *CurrentUser(c)),
		TypeFilter:    models.EventType(strings.TrimSpace(c.QueryParam("type"))),
		FormKey:       models.RandomSecret(12),
	}
	if d.Names, err = s.DisplayNames(ctx, detail.Actors()...); err != nil {
		return d, fmt.Errorf("session %s: %w", id, err)
	}
	return d, nil
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
