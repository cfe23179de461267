package handlers

import (
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/views"
)

// AdminWebhooks serves GET /console/admin/webhooks.
func AdminWebhooks(s *models.Store) echo.HandlerFunc {
	return func(c echo.Context) error {
		return renderWebhooks(c, s, http.StatusOK, views.AdminWebhooksData{})
	}
}

func renderWebhooks(c echo.Context, s *models.Store, status int, d views.AdminWebhooksData) error {
	ws, err := s.ListWebhooks(c.Request().Context())
	if err != nil {
		return err
	}
	d.Webhooks = ws
	return Render(c, status, views.AdminWebhooksPage(d))
}

// splitTypes reads the form's comma- or space-separated event types.
func splitTypes(v string) []string {
	return strings.FieldsFunc(v, func(r rune) bool { return r == ',' || r == ' ' || r == '\n' || r == '\t' })
}

// AdminCreateWebhook serves POST /console/admin/webhooks. The secret is
// shown once, on the page this answers with.
func AdminCreateWebhook(s *models.Store) echo.HandlerFunc {
	return func(c echo.Context) error {
		form := map[string]string{"url": c.FormValue("url"), "types": c.FormValue("types"), "description": c.FormValue("description")}
		in := models.WebhookInput{URL: form["url"], Types: splitTypes(form["types"]), Description: form["description"]}
		w, secret, err := s.CreateWebhook(c.Request().Context(), CurrentUser(c).Actor(), "", in)
		if errs, ok := fieldErrors(err); ok {
			// The API names types[i]; the form has one types field.
			for k, msg := range errs {
				if strings.HasPrefix(k, "types[") {
					if prev := errs["types"]; prev != "" {
						msg = prev + "; " + msg
					}
					errs["types"] = msg
					delete(errs, k)
				}
			}
			return renderWebhooks(c, s, http.StatusUnprocessableEntity, views.AdminWebhooksData{Form: form, Errors: errs})
		}
		if err != nil {
			return err
		}
		return renderWebhooks(c, s, http.StatusOK, views.AdminWebhooksData{
			Secret: &views.Secret{Label: "Signing secret", For: w.URL, Value: secret},
		})
	}
}

// AdminWebhook serves GET /console/admin/webhooks/:id: the webhook and its
// delivery log.
func AdminWebhook(s *models.Store) echo.HandlerFunc {
	return func(c echo.Context) error {
		return renderWebhook(c, s, c.Param("id"), nil)
	}
}

func renderWebhook(c echo.Context, s *models.Store, id string, secret *views.Secret) error {
	ctx := c.Request().Context()
	w, err := s.GetWebhook(ctx, id)
	if err != nil {
		return err
	}
	ds, err := s.ListWebhookDeliveries(ctx, id, 200)
	if err != nil {
		return err
	}
	return Render(c, http.StatusOK, views.AdminWebhookPage(views.AdminWebhookData{Webhook: w, Deliveries: ds, Secret: secret}))
}

// AdminDeleteWebhook serves POST /console/admin/webhooks/:id/delete.
func AdminDeleteWebhook(s *models.Store) echo.HandlerFunc {
	return func(c echo.Context) error {
		if err := s.DeleteWebhook(c.Request().Context(), CurrentUser(c).Actor(), "", c.Param("id")); err != nil {
			return err
		}
		if err := AddFlash(c, views.Banner{Kind: "success", Text: "Deleted the webhook: nothing more is sent to it."}); err != nil {
			return err
		}
		return c.Redirect(http.StatusSeeOther, "/console/admin/webhooks")
	}
}

// AdminRotateWebhook serves POST /console/admin/webhooks/:id/rotate-secret;
// the new secret is shown once.
func AdminRotateWebhook(s *models.Store) echo.HandlerFunc {
	return func(c echo.Context) error {
		id := c.Param("id")
		secret, _, err := s.RotateWebhookSecret(c.Request().Context(), CurrentUser(c).Actor(), "", id)
		if err != nil {
			return err
		}
		return renderWebhook(c, s, id, &views.Secret{Label: "New signing secret", For: id + " (the old one keeps signing for 24 hours)", Value: secret})
	}
}

// AdminRedeliverWebhook serves
// POST /console/admin/webhooks/:id/deliveries/:event_id/redeliver.
func AdminRedeliverWebhook(s *models.Store) echo.HandlerFunc {
	return func(c echo.Context) error {
		id, ev := c.Param("id"), c.Param("event_id")
		if err := s.RedeliverWebhook(c.Request().Context(), CurrentUser(c).Actor(), "", id, ev); err != nil {
			return err
		}
		if err := AddFlash(c, views.Banner{Kind: "success", Text: "Queued " + ev + " for delivery again."}); err != nil {
			return err
		}
		return c.Redirect(http.StatusSeeOther, "/console/admin/webhooks/"+id)
	}
}
