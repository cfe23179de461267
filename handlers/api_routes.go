package handlers

import (
	"net/http"
	"net/url"

	"github.com/labstack/echo/v4"

	"github.com/taskpilots/handoff/models"
)

// routeList is the answer to GET /routes.
type routeList struct {
	Routes []models.Route `json:"routes"`
}

// stepParam is the {step} of a route's path. Echo matches on the escaped
// path when the request needed one (a step with an encoded '/'), and then
// leaves the parameter escaped.
func stepParam(c echo.Context) (string, error) {
	step := c.Param("step")
	if c.Request().URL.RawPath == "" {
		return step, nil
	}
	s, err := url.PathUnescape(step)
	if err != nil {
		return "", &models.ValidationError{Fields: []models.FieldError{{Field: "step", Message: "is not a valid path segment"}}}
	}
	return s, nil
}

// putRoute serves PUT /routes/{step}: creates or replaces the route.
func (a *API) putRoute(c echo.Context) error {
	step, err := stepParam(c)
	if err != nil {
		return err
	}
	var in models.RouteInput
	key, err := bind(c, &in, func() error { return in.Validate(step) })
	if err != nil {
		return err
	}
	ctx, replayed := models.NoteReplay(c.Request().Context())
	r, err := a.Store.PutRoute(ctx, actor(c), key, step, in)
	if err != nil {
		return err
	}
	markReplayed(c, *replayed)
	return c.JSON(http.StatusOK, r)
}

// listRoutes serves GET /routes.
func (a *API) listRoutes(c echo.Context) error {
	rs, err := a.Store.ListRoutes(c.Request().Context())
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, routeList{Routes: rs})
}

// getRoute serves GET /routes/{step}.
func (a *API) getRoute(c echo.Context) error {
	step, err := stepParam(c)
	if err != nil {
		return err
	}
	r, err := a.Store.GetRoute(c.Request().Context(), step)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, r)
}

// deleteRoute serves DELETE /routes/{step}: 204, or 404 for a step without
// a route. With an Idempotency-Key a repeat answers 204 again.
func (a *API) deleteRoute(c echo.Context) error {
	step, err := stepParam(c)
	if err != nil {
		return err
	}
	key, problem := idempotencyKey(c)
	if problem != "" {
		return &models.ValidationError{Fields: []models.FieldError{{Field: idempotencyHeader, Message: problem}}}
	}
	ctx, replayed := models.NoteReplay(c.Request().Context())
	if _, err := a.Store.DeleteRoute(ctx, actor(c), key, step); err != nil {
		return err
	}
	markReplayed(c, *replayed)
	return c.NoContent(http.StatusNoContent)
}

// drainRoute serves POST /routes/{step}/drain {"limit":N}: delegates, by
// the route, the sessions that are open and wait on the step.
func (a *API) drainRoute(c echo.Context) error {
	step, err := stepParam(c)
	if err != nil {
		return err
	}
	var in models.DrainInput
	key, err := bind(c, &in, func() error { return in.Validate() })
	if err != nil {
		return err
	}
	ctx, replayed := models.NoteReplay(c.Request().Context())
	res, err := a.Store.DrainRoute(ctx, actor(c), key, step, in)
	if err != nil {
		return err
	}
	markReplayed(c, *replayed)
	return c.JSON(http.StatusOK, res)
}
