package handlers

import (
	"errors"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/views"
)

// AdminIndex serves GET /console/admin.
func AdminIndex(c echo.Context) error {
	return Render(c, http.StatusOK, views.AdminIndexPage())
}

// AdminUsers serves GET /console/admin/users.
func AdminUsers(s *models.Store) echo.HandlerFunc {
	return func(c echo.Context) error {
		return renderUsers(c, s, http.StatusOK, views.AdminUsersData{})
	}
}

func renderUsers(c echo.Context, s *models.Store, status int, d views.AdminUsersData) error {
	us, err := s.ListUsers(c.Request().Context())
	if err != nil {
		return err
	}
	d.Users, d.Me = us, CurrentUser(c).ID
	return Render(c, status, views.AdminUsersPage(d))
}

// fieldErrors maps a validation error to its fields' messages; ok is false
// for any other error.
func fieldErrors(err error) (map[string]string, bool) {
	var ve *models.ValidationError
	if !errors.As(err, &ve) {
		return nil, false
	}
	m := make(map[string]string, len(ve.Fields))
	for _, f := range ve.Fields {
		if prev, ok := m[f.Field]; ok {
			m[f.Field] = prev + "; " + f.Message
		} else {
			m[f.Field] = f.Message
		}
	}
	return m, true
}

// AdminCreateUser serves POST /console/admin/users. A generated password is
// shown once on the page it answers with; a typed one is not shown again.
func AdminCreateUser(s *models.Store) echo.HandlerFunc {
	return func(c echo.Context) error {
		in := models.CreateUserInput{
			Email: strings.TrimSpace(c.FormValue("email")), Name: strings.TrimSpace(c.FormValue("name")),
			Role: models.Role(c.FormValue("role")), Password: c.FormValue("password"),
		}
		u, generated, err := s.AdminCreateUser(c.Request().Context(), *CurrentUser(c), in)
		if errs, ok := fieldErrors(err); ok {
			form := map[string]string{"email": in.Email, "name": in.Name, "role": string(in.Role)}
			return renderUsers(c, s, http.StatusUnprocessableEntity, views.AdminUsersData{Form: form, Errors: errs})
		}
		if err != nil {
			return err
		}
		if generated == "" {
			if err := AddFlash(c, views.Banner{Kind: "success", Text: "Created " + u.Email + " (" + string(u.Role) + ")."}); err != nil {
				return err
			}
			return c.Redirect(http.StatusSeeOther, "/console/admin/users")
		}
		return renderUsers(c, s, http.StatusOK, views.AdminUsersData{
			Secret: &views.Secret{Label: "Generated password", For: u.Email, Value: generated},
		})
	}
}

// Actions on one user, the last segment of POST /console/admin/users/:id/….
const (
	UserDisable       = "disable"
	UserEnable        = "enable"
	UserRole          = "role"
	UserResetPassword = "reset-password"
)

// AdminUserActions lists the actions on a user, for route registration.
func AdminUserActions() []string {
	return []string{UserDisable, UserEnable, UserRole, UserResetPassword}
}

// AdminUserAction serves POST /console/admin/users/:id/<action>. Each change
// and its admin log row commit together (models); a reset password is shown
// once on the page it answers with.
func AdminUserAction(s *models.Store, action string) echo.HandlerFunc {
	return func(c echo.Context) error {
		ctx := c.Request().Context()
		admin := *CurrentUser(c)
		id := c.Param("id")
		var (
			u   models.User
			msg string
			err error
		)
		switch action {
		case UserDisable:
			u, err = s.SetUserDisabled(ctx, admin, id, true)
			msg = "Disabled " + u.Email + ": they are logged out and cannot log in."
		case UserEnable:
			u, err = s.SetUserDisabled(ctx, admin, id, false)
			msg = "Enabled " + u.Email + "."
		case UserRole:
			u, err = s.SetUserRole(ctx, admin, id, models.Role(c.FormValue("role")))
			msg = u.Email + " is now " + string(u.Role) + "."
		case UserResetPassword:
			var pw string
			pw, u, err = s.ResetPassword(ctx, admin, id)
			if err == nil {
				return renderUsers(c, s, http.StatusOK, views.AdminUsersData{
					Secret: &views.Secret{Label: "One-time password", For: u.Email, Value: pw},
				})
			}
		default:
			return echo.ErrNotFound
		}
		if err != nil {
			return refuseUserAction(c, s, admin, id, err)
		}
		if err := AddFlash(c, views.Banner{Kind: "success", Text: msg}); err != nil {
			return err
		}
		return c.Redirect(http.StatusSeeOther, "/console/admin/users")
	}
}

// refuseUserAction answers a refused change with the users page and a banner
// saying why (403, 422); nothing was changed.
func refuseUserAction(c echo.Context, s *models.Store, admin models.User, id string, err error) error {
	var problem string
	switch models.ErrorCode(err) {
	case models.EINVALID:
		errs, _ := fieldErrors(err)
		for f, m := range errs {
			problem += f + " " + m + ". "
		}
	case models.EFORBIDDEN:
		if id == admin.ID {
			problem = "You cannot change your own account here; ask another admin."
		} else {
			problem = "Your account is no longer an enabled admin."
		}
	default:
		return err
	}
	return renderUsers(c, s, StatusFor(err), views.AdminUsersData{Problem: "Nothing was changed: " + strings.TrimSpace(problem)})
}
