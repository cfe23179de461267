package handlers

import (
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/views"
)

// AdminTokens serves GET /console/admin/tokens.
func AdminTokens(s *models.Store) echo.HandlerFunc {
	return func(c echo.Context) error {
		return renderTokens(c, s, http.StatusOK, views.AdminTokensData{})
	}
}

func renderTokens(c echo.Context, s *models.Store, status int, d views.AdminTokensData) error {
	ts, err := s.ListTokens(c.Request().Context())
	if err != nil {
		return err
	}
	d.Tokens = ts
	return Render(c, status, views.AdminTokensPage(d))
}

// AdminCreateToken serves POST /console/admin/tokens. The secret is shown
// once, on the page this answers with; only its hash is stored.
func AdminCreateToken(s *models.Store) echo.HandlerFunc {
	return func(c echo.Context) error {
		name, role := strings.TrimSpace(c.FormValue("name")), models.Role(c.FormValue("role"))
		secret, t, err := s.AdminCreateToken(c.Request().Context(), *CurrentUser(c), name, role)
		if errs, ok := fieldErrors(err); ok {
			return renderTokens(c, s, http.StatusUnprocessableEntity, views.AdminTokensData{
				Form: map[string]string{"name": name, "role": string(role)}, Errors: errs,
			})
		}
		if err != nil {
			return err
		}
		return renderTokens(c, s, http.StatusOK, views.AdminTokensData{
			Secret: &views.Secret{Label: "New " + string(t.Role) + " token", For: t.Name, Value: secret},
		})
	}
}

// AdminRevokeToken serves POST /console/admin/tokens/:id/revoke.
func AdminRevokeToken(s *models.Store) echo.HandlerFunc {
	return func(c echo.Context) error {
		t, err := s.AdminRevokeToken(c.Request().Context(), *CurrentUser(c), c.Param("id"))
		if err != nil {
			return err
		}
		if err := AddFlash(c, views.Banner{Kind: "success", Text: "Revoked " + t.Name + ": it no longer authenticates."}); err != nil {
			return err
		}
		return c.Redirect(http.StatusSeeOther, "/console/admin/tokens")
	}
}
