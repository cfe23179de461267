package handlers

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/views"
)

// AdminQueues serves GET /console/admin/queues: every queue with flow
// control or leases out, and the settings form (?queue= prefills it).
func AdminQueues(s *models.Store) echo.HandlerFunc {
	return func(c echo.Context) error {
		form := map[string]string{}
		if q := c.QueryParam("queue"); q != "" {
			form["queue"] = q
			if f, err := s.GetQueueFlow(c.Request().Context(), q); err == nil {
				if f.MaxInFlight != nil {
					form["max_in_flight"] = strconv.Itoa(*f.MaxInFlight)
				}
				if f.MaxLeasesPerSecond != nil {
					form["max_leases_per_second"] = strconv.FormatFloat(*f.MaxLeasesPerSecond, 'g', -1, 64)
				}
			}
		}
		return renderQueues(c, s, http.StatusOK, views.AdminQueuesData{Form: form})
	}
}

func renderQueues(c echo.Context, s *models.Store, status int, d views.AdminQueuesData) error {
	qs, err := s.ListQueueFlows(c.Request().Context())
	if err != nil {
		return err
	}
	d.Queues = qs
	return Render(c, status, views.AdminQueuesPage(d))
}

// AdminPutQueue serves POST /console/admin/queues: sets a queue's flow
// control (empty fields: no limit), through the same models call as
// PUT /api/v1/queues/{queue}; invalid fields are shown inline.
func AdminPutQueue(s *models.Store) echo.HandlerFunc {
	return func(c echo.Context) error {
		form := map[string]string{
			"queue":                 strings.TrimSpace(c.FormValue("queue")),
			"max_in_flight":         strings.TrimSpace(c.FormValue("max_in_flight")),
			"max_leases_per_second": strings.TrimSpace(c.FormValue("max_leases_per_second")),
		}
		errs := map[string]string{}
		var in models.QueueFlowInput
		if v := form["max_in_flight"]; v != "" {
			n, err := strconv.Atoi(v)
			if err != nil {
				errs["max_in_flight"] = "must be a whole number, or empty for no limit"
			} else {
				in.MaxInFlight = &n
			}
		}
		if v := form["max_leases_per_second"]; v != "" {
			r, err := strconv.ParseFloat(v, 64)
			if err != nil {
				errs["max_leases_per_second"] = "must be a number, or empty for no limit"
			} else {
				in.MaxLeasesPerSecond = &r
			}
		}
		// Every problem at once: the models' checks too.
		if m, ok := fieldErrors(in.Validate(form["queue"])); ok {
			for k, v := range m {
				if _, taken := errs[k]; !taken {
					errs[k] = v
				}
			}
		}
		if len(errs) > 0 {
			return renderQueues(c, s, http.StatusUnprocessableEntity, views.AdminQueuesData{Form: form, Errors: errs})
		}
		_, err := s.PutQueueFlow(c.Request().Context(), CurrentUser(c).Actor(), "", form["queue"], in)
		if m, ok := fieldErrors(err); ok {
			return renderQueues(c, s, http.StatusUnprocessableEntity, views.AdminQueuesData{Form: form, Errors: m})
		}
		if err != nil {
			return err
		}
		if err := AddFlash(c, views.Banner{Kind: "success", Text: "Saved the flow control of " + form["queue"] + "."}); err != nil {
			return err
		}
		return c.Redirect(http.StatusSeeOther, "/console/admin/queues")
	}
}
