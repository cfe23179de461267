package handlers

import (
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/views"
)

// ReviewNext serves POST /console/reviews/next: claim the oldest item the
// reviewer may score and open it; back to the queue when there is none.
func ReviewNext(s *models.Store, p models.ReviewPolicy) echo.HandlerFunc {
	return func(c echo.Context) error {
		return openNextReview(c, s, p, "")
	}
}

// openNextReview claims the next item and redirects to it; done, when set,
// is the banner of what was just achieved.
func openNextReview(c echo.Context, s *models.Store, p models.ReviewPolicy, done string) error {
	ctx := c.Request().Context()
	k, ok, err := s.ClaimNextReview(ctx, *CurrentUser(c), p)
	if err != nil {
		return err
	}
	if !ok {
		msg := "Nothing left to review for you right now."
		if done != "" {
			msg = done + " " + msg
		}
		if err := AddFlash(c, views.Banner{Kind: "success", Text: msg}); err != nil {
			return err
		}
		return c.Redirect(http.StatusSeeOther, "/console/reviews")
	}
	if done != "" {
		if err := AddFlash(c, views.Banner{Kind: "success", Text: done + " Here is the next item."}); err != nil {
			return err
		}
	}
	return c.Redirect(http.StatusSeeOther, string(views.ReviewURL(k, "")))
}

// ReviewClaim serves POST /console/reviews/:id/:version/claim.
func ReviewClaim(s *models.Store, p models.ReviewPolicy) echo.HandlerFunc {
	return func(c echo.Context) error {
		k, err := reviewKey(c)
		if err != nil {
			return err
		}
		if _, err := s.ClaimReview(c.Request().Context(), k, *CurrentUser(c), p); err != nil {
			return refuseReview(c, s, k, err, nil)
		}
		return c.Redirect(http.StatusSeeOther, string(views.ReviewURL(k, "")))
	}
}

// ReviewRelease serves POST /console/reviews/:id/:version/release.
func ReviewRelease(s *models.Store) echo.HandlerFunc {
	return func(c echo.Context) error {
		k, err := reviewKey(c)
		if err != nil {
			return err
		}
		if err := s.ReleaseReview(c.Request().Context(), k, *CurrentUser(c)); err != nil {
			return err
		}
		if err := AddFlash(c, views.Banner{Kind: "info", Text: "Released: the item is back in the queue."}); err != nil {
			return err
		}
		return c.Redirect(http.StatusSeeOther, "/console/reviews")
	}
}

// ReviewScore serves POST /console/reviews/:id/:version/score: record the
// score as a review.scored event and open the next item. Invalid input
// re-renders the page with 422 and keeps what was chosen.
func ReviewScore(s *models.Store, p models.ReviewPolicy) echo.HandlerFunc {
	return func(c echo.Context) error {
		k, err := reviewKey(c)
		if err != nil {
			return err
		}
		in := models.ScoreInput{Key: k, Scores: map[string]int{}, Comment: c.FormValue("comment")}
		values := map[string]string{"comment": in.Comment}
		for _, cr := range models.Rubric {
			raw := strings.TrimSpace(c.FormValue(cr.Key))
			values[cr.Key] = raw
			if raw == "" {
				continue
			}
			n, err := strconv.Atoi(raw)
			if err != nil {
				n = -1 // reported by Validate as out of range
			}
			in.Scores[cr.Key] = n
		}
		out, err := s.ScoreReview(c.Request().Context(), *CurrentUser(c), c.FormValue("idempotency_key"), in)
		if err != nil {
			return refuseReview(c, s, k, err, values)
		}
		done := "Score saved."
		if out.Replayed {
			done = "That score was already saved."
		}
		return openNextReview(c, s, p, done)
	}
}

// refuseReview answers a refused claim or score with the item page: inline
// errors (422) or a banner saying why (403, 409). Unknown items and internal
// errors go to the error handler.
func refuseReview(c echo.Context, s *models.Store, k models.ReviewKey, err error, values map[string]string) error {
	status := StatusFor(err)
	code := models.ErrorCode(err)
	if status >= 500 || code == models.ENOTFOUND || code == models.EUNAUTH {
		return err
	}
	d, lerr := loadReviewItem(c, s, k)
	if lerr != nil {
		return lerr
	}
	d.Values = values
	var (
		ve    *models.ValidationError
		taken *models.ReviewTakenError
	)
	switch {
	case errors.As(err, &ve):
		d.Errors = make(map[string]string, len(ve.Fields))
		for _, f := range ve.Fields {
			d.Errors[f.Field] = f.Message
		}
	case errors.As(err, &taken):
		d.Problem = "Nothing was saved: " + taken.Reason + "."
	case errors.Is(err, models.ErrOwnDecision):
		d.Problem = "Nothing was saved: you decided this escalation, so another reviewer must score it."
	case code == models.EFORBIDDEN:
		d.Problem = "Nothing was saved: your role cannot score escalation packages."
	default:
		d.Problem = "Nothing was saved: " + ProblemFor(err).Detail
	}
	return Render(c, status, views.ReviewItemPage(d))
}
