package handlers

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/taskpilots/handoff/models"
)

// Webhooks (README "Receiving webhooks"): admin tokens only.

// webhookCreated is the answer to POST /webhooks; the secret is shown once,
// and again to a repeat with the same Idempotency-Key (the same caller).
type webhookCreated struct {
	ID     string `json:"id"`
	Secret string `json:"secret"`
}

// secretRotated is the answer to POST /webhooks/{id}/rotate-secret.
type secretRotated struct {
	ID     string `json:"id"`
	Secret string `json:"secret"`
	// OldSecretSignsUntil is when deliveries stop carrying a signature made
	// with the previous secret.
	OldSecretSignsUntil models.UTCTime `json:"old_secret_signs_until"`
}

type webhookList struct {
	Webhooks []models.WebhookView `json:"webhooks"`
}

type deliveryList struct {
	Deliveries []models.Delivery `json:"deliveries"`
}

// createWebhook serves POST /webhooks.
func (a *API) createWebhook(c echo.Context) error {
	var in models.WebhookInput
	key, err := bind(c, &in, func() error { return in.Validate() })
	if err != nil {
		return err
	}
	ctx, replayed := models.NoteReplay(c.Request().Context())
	w, secret, err := a.Store.CreateWebhook(ctx, actor(c), key, in)
	if err != nil {
		return err
	}
	markReplayed(c, *replayed)
	c.Response().Header().Set(echo.HeaderLocation, "/api/v1/webhooks/"+w.ID)
	return c.JSON(http.StatusCreated, webhookCreated{ID: w.ID, Secret: secret})
}

// listWebhooks serves GET /webhooks (no secrets).
func (a *API) listWebhooks(c echo.Context) error {
	ws, err := a.Store.ListWebhooks(c.Request().Context())
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, webhookList{Webhooks: ws})
}

// deleteWebhook serves DELETE /webhooks/{id}. With an Idempotency-Key a
// repeat answers 204 again.
func (a *API) deleteWebhook(c echo.Context) error {
	key, problem := idempotencyKey(c)
	if problem != "" {
		return &models.ValidationError{Fields: []models.FieldError{{Field: idempotencyHeader, Message: problem}}}
	}
	ctx, replayed := models.NoteReplay(c.Request().Context())
	if err := a.Store.DeleteWebhook(ctx, actor(c), key, c.Param("id")); err != nil {
		return err
	}
	markReplayed(c, *replayed)
	return c.NoContent(http.StatusNoContent)
}

// noFields is the body of the POSTs that take no input: an empty object,
// like every POST of the API, so that unknown fields are still refused.
type noFields struct{}

// rotateWebhookSecret serves POST /webhooks/{id}/rotate-secret.
func (a *API) rotateWebhookSecret(c echo.Context) error {
	var in noFields
	key, err := bind(c, &in, nil)
	if err != nil {
		return err
	}
	id := c.Param("id")
	ctx, replayed := models.NoteReplay(c.Request().Context())
	secret, until, err := a.Store.RotateWebhookSecret(ctx, actor(c), key, id)
	if err != nil {
		return err
	}
	markReplayed(c, *replayed)
	return c.JSON(http.StatusOK, secretRotated{ID: id, Secret: secret, OldSecretSignsUntil: until})
}

// listDeliveries serves GET /webhooks/{id}/deliveries?limit=N.
func (a *API) listDeliveries(c echo.Context) error {
	v := &models.ValidationError{}
	limit := queryInt(c, "limit", models.DefaultDeliveriesLimit, 1, models.MaxDeliveriesLimit, v)
	if err := v.Err(); err != nil {
		return err
	}
	ds, err := a.Store.ListWebhookDeliveries(c.Request().Context(), c.Param("id"), int(limit))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, deliveryList{Deliveries: ds})
}

// redeliver serves POST /webhooks/{id}/deliveries/{event_id}/redeliver.
func (a *API) redeliver(c echo.Context) error {
	var in noFields
	key, err := bind(c, &in, nil)
	if err != nil {
		return err
	}
	ctx, replayed := models.NoteReplay(c.Request().Context())
	if err := a.Store.RedeliverWebhook(ctx, actor(c), key, c.Param("id"), c.Param("event_id")); err != nil {
		return err
	}
	markReplayed(c, *replayed)
	return c.NoContent(http.StatusAccepted)
}
