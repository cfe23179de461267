package handlers

import (
	"fmt"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/views"
)

// AdminVerifyPage serves GET /console/admin/verify: the current or last run
// of the background verification.
func AdminVerifyPage(s *models.Store, v *models.Verifier, cp *models.Checkpointer) echo.HandlerFunc {
	return func(c echo.Context) error {
		d, err := verifyData(c, s, v)
		if err != nil {
			return err
		}
		d.Checkpoints, err = checkpointData(c, s, cp)
		if err != nil {
			return err
		}
		if l := d.Checkpoints.Latest; l != nil {
			// The page names the admin who signed it, like the run's starter.
			more, err := s.DisplayNames(c.Request().Context(), l.CreatedBy)
			if err != nil {
				return fmt.Errorf("verify page: %w", err)
			}
			for k, v := range more {
				d.Names[k] = v
			}
		}
		return Render(c, http.StatusOK, views.AdminVerifyPage(d))
	}
}

func checkpointData(c echo.Context, s *models.Store, cp *models.Checkpointer) (views.CheckpointData, error) {
	d := views.CheckpointData{Enabled: cp.Enabled()}
	if d.Enabled {
		d.PublicKey = cp.Key.PublicKey
		d.Every = cp.Every
	}
	latest, err := s.LatestCheckpoint(c.Request().Context())
	switch {
	case err == nil:
		d.Latest = &latest
	case !models.IsNotFound(err):
		return d, fmt.Errorf("verify page: %w", err)
	}
	return d, nil
}

// AdminVerifyStatus serves GET /console/admin/verify/status, the fragment
// htmx polls while a run is in progress.
func AdminVerifyStatus(s *models.Store, v *models.Verifier) echo.HandlerFunc {
	return func(c echo.Context) error {
		d, err := verifyData(c, s, v)
		if err != nil {
			return err
		}
		return Render(c, http.StatusOK, views.VerifyStatus(d))
	}
}

func verifyData(c echo.Context, s *models.Store, v *models.Verifier) (views.AdminVerifyData, error) {
	d := views.AdminVerifyData{Run: v.Status(), Now: s.Now().UTC()}
	names, err := s.DisplayNames(c.Request().Context(), d.Run.StartedBy)
	if err != nil {
		return d, fmt.Errorf("verify page: %w", err)
	}
	d.Names = names
	return d, nil
}

// AdminVerifyStart serves POST /console/admin/verify: start a run unless one
// is running (one at a time per process) and go back to the page.
func AdminVerifyStart(v *models.Verifier) echo.HandlerFunc {
	return func(c echo.Context) error {
		started, err := v.Start(c.Request().Context(), *CurrentUser(c))
		if err != nil {
			return err
		}
		b := views.Banner{Kind: "info", Text: "Verification started; this page shows its progress."}
		if !started {
			b = views.Banner{Kind: "warning", Text: "A verification is already running; here is its progress."}
		}
		if err := AddFlash(c, b); err != nil {
			return err
		}
		return c.Redirect(http.StatusSeeOther, "/console/admin/verify")
	}
}
