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

// ConsoleInbox serves GET /console and /console/inbox: the sessions in human
// hands, most urgent first, with filters, counts and keyset pages. An htmx
// request (the ten-second live refresh, the live search) gets the list and,
// out of band, every count and the title (views.InboxFragment), all from the
// same reading of the inbox. A filter the inbox cannot run (a search too
// long) is a 422 with the problem next to the search box.
func ConsoleInbox(s *models.Store) echo.HandlerFunc {
	return func(c echo.Context) error {
		f, err := bindInboxFilter(c)
		if err != nil {
			return err
		}
		u := CurrentUser(c)
		ctx := c.Request().Context()
		after := strings.TrimSpace(c.QueryParam("after"))
		d := views.InboxData{Filter: f, After: after, Now: s.Now().UTC()}
		status := http.StatusOK
		d.Page, err = s.Inbox(ctx, models.InboxOpts{InboxFilter: f, Me: models.AssigneeOf(*u), After: after})
		var ve *models.ValidationError
		switch {
		case errors.As(err, &ve):
			d.Errors, status = ve.Fields, http.StatusUnprocessableEntity
		case err != nil:
			return err
		}
		assignees := make([]string, 0, len(d.Page.Rows))
		for _, r := range d.Page.Rows {
			assignees = append(assignees, r.Assignee)
		}
		if d.Names, err = s.DisplayNames(ctx, assignees...); err != nil {
			return fmt.Errorf("inbox: %w", err)
		}
		if d.Tabs, err = s.InboxTabs(ctx); err != nil {
			return err
		}
		store := s
		if isHTMX(c) {
			store = nil // the fragment has the checkboxes, not the form
		}
		if d.Bulk, err = NewBulkForm(ctx, store, u, c.Request().URL.RequestURI(), inboxBulkFilter(f)); err != nil {
			return err
		}
		if isHTMX(c) {
			return Render(c, status, views.InboxFragment(d))
		}
		return Render(c, status, views.InboxPage(d))
	}
}

// bindInboxFilter reads the inbox filters from the query string; the values
// themselves are checked by InboxFilter.Validate.
func bindInboxFilter(c echo.Context) (models.InboxFilter, error) {
	f := models.InboxFilter{
		Status:     models.Status(strings.TrimSpace(c.QueryParam("status"))),
		Queue:      strings.TrimSpace(c.QueryParam("queue")),
		Assignment: strings.TrimSpace(c.QueryParam("assigned")),
		Search:     strings.TrimSpace(c.QueryParam("q")),
		Reason:     models.ReasonCode(strings.TrimSpace(c.QueryParam("reason"))),
	}
	if p := strings.TrimSpace(c.QueryParam("priority")); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil {
			return f, &models.ValidationError{Fields: []models.FieldError{{Field: "priority", Message: "must be a number between 1 and 5"}}}
		}
		f.Priority = n
	}
	return f, nil
}

// isHTMX reports whether the request comes from htmx (a fragment swap)
// rather than a full page load or a boosted navigation.
func isHTMX(c echo.Context) bool {
	h := c.Request().Header
	return h.Get("HX-Request") == "true" && h.Get("HX-Boosted") != "true"
}

// inboxBulkFilter is the inbox filter as a bulk filter (the listing's
// terms), or nil when it filters on what a listing cannot (priority,
// assignment, reason, the id-or-ticket search): then "all matching" is not
// offered, since it would act on other sessions than the inbox shows.
func inboxBulkFilter(f models.InboxFilter) *models.BulkFilter {
	if f.Priority != 0 || f.Assignment != "" || f.Reason != "" || f.Search != "" {
		return nil
	}
	st := string(f.Status)
	if st == "" {
		st = string(models.StatusEscalated) + "," + string(models.StatusHumanActive)
	}
	return &models.BulkFilter{Status: st, Queue: f.Queue}
}
