package handlers

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/views"
)

// ReviewQueue serves GET /console/reviews: the decided escalations that
// still need a score, oldest first (?assigned=me: the ones the reviewer
// holds; ?after= pages). It only reads: the write path queues each decided
// escalation with its decision (models.Store.queueReviewItem).
func ReviewQueue(s *models.Store, p models.ReviewPolicy) echo.HandlerFunc {
	return func(c echo.Context) error {
		ctx := c.Request().Context()
		d := views.ReviewQueueData{
			Mine:     c.QueryParam("assigned") == "me",
			After:    strings.TrimSpace(c.QueryParam("after")),
			Now:      s.Now().UTC(),
			ClaimTTL: claimTTL(p),
		}
		var err error
		d.Page, err = s.ReviewQueue(ctx, models.ReviewQueueOpts{Reviewer: *CurrentUser(c), Mine: d.Mine, After: d.After})
		if err != nil {
			return err
		}
		deciders := make([]string, 0, len(d.Page.Rows))
		for _, r := range d.Page.Rows {
			deciders = append(deciders, r.DecidedBy)
		}
		if d.Names, err = s.DisplayNames(ctx, deciders...); err != nil {
			return fmt.Errorf("review queue: %w", err)
		}
		return Render(c, http.StatusOK, views.ReviewQueuePage(d))
	}
}

func claimTTL(p models.ReviewPolicy) time.Duration {
	if p.ClaimTTL > 0 {
		return p.ClaimTTL
	}
	return models.DefaultReviewClaimTTL
}

// reviewKey reads the item of /console/reviews/:id/:version.
func reviewKey(c echo.Context) (models.ReviewKey, error) {
	v, err := strconv.ParseInt(c.Param("version"), 10, 64)
	if err != nil || v < 1 {
		return models.ReviewKey{}, echo.NewHTTPError(http.StatusNotFound, "There is no review item at this address.")
	}
	return models.ReviewKey{SessionID: c.Param("id"), AtVersion: v}, nil
}

// ReviewItem serves GET /console/reviews/:id/:version: the package as the
// agent got it, beside the rubric (when the reviewer holds the item).
func ReviewItem(s *models.Store) echo.HandlerFunc {
	return func(c echo.Context) error {
		k, err := reviewKey(c)
		if err != nil {
			return err
		}
		d, err := loadReviewItem(c, s, k)
		if err != nil {
			return err
		}
		return Render(c, http.StatusOK, views.ReviewItemPage(d))
	}
}

func loadReviewItem(c echo.Context, s *models.Store, k models.ReviewKey) (views.ReviewItemData, error) {
	ctx := c.Request().Context()
	v, err := s.GetReviewView(ctx, k, *CurrentUser(c))
	if err != nil {
		return views.ReviewItemData{}, err
	}
	d := views.ReviewItemData{View: v, Now: s.Now().UTC(), FormKey: models.RandomSecret(12)}
	actors := []string{v.Item.DecidedBy}
	if e := v.Package.Escalation; e != nil {
		actors = append(actors, e.By)
	}
	for _, st := range v.Package.CompletedSteps {
		actors = append(actors, st.By)
	}
	if d.Names, err = s.DisplayNames(ctx, actors...); err != nil {
		return d, fmt.Errorf("review item: %w", err)
	}
	return d, nil
}

// ReviewStatsWindows are the periods of the statistics page.
var ReviewStatsWindows = map[string]time.Duration{
	"30d":  30 * 24 * time.Hour,
	"90d":  90 * 24 * time.Hour,
	"365d": 365 * 24 * time.Hour,
}

// ReviewStats serves GET /console/reviews/stats?window=30d|90d|365d.
func ReviewStats(s *models.Store) echo.HandlerFunc {
	return func(c echo.Context) error {
		w := c.QueryParam("window")
		if w == "" {
			w = "90d"
		}
		span, ok := ReviewStatsWindows[w]
		if !ok {
			return &models.ValidationError{Fields: []models.FieldError{{Field: "window", Message: "must be one of 30d, 90d, 365d"}}}
		}
		to := s.Now().UTC().Truncate(time.Second).Add(time.Second)
		st, err := s.ReviewStatsFor(c.Request().Context(), models.ReviewStatsOpts{From: to.Add(-span), To: to})
		if err != nil {
			return err
		}
		return Render(c, http.StatusOK, views.ReviewStatsPage(views.ReviewStatsData{
			Stats: st, Window: w, Windows: []string{"30d", "90d", "365d"},
		}))
	}
}
