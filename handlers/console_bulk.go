package handlers

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/views"
)

// NewBulkForm is the bulk form of a list for u: the actions the takeover
// policy lets u's role take, the people a reassign may choose, the list's
// filter when "all matching" can mean it, and a fresh idempotency key.
func NewBulkForm(ctx context.Context, s *models.Store, u *models.User, returnTo string, filter *models.BulkFilter) (views.BulkForm, error) {
	if u == nil {
		return views.BulkForm{}, nil
	}
	f := views.BulkForm{Actions: models.BulkActionsFor(*u), ReturnTo: returnTo, FormKey: "bulk-" + models.RandomSecret(12)}
	if filter != nil && !filter.Empty() {
		f.Filter = filter
	}
	// Without a store (the inbox's live refresh, which renders no form) the
	// people are not listed.
	if s != nil && slices.Contains(f.Actions, models.BulkReassign) {
		users, err := s.ListUsers(ctx)
		if err != nil {
			return f, fmt.Errorf("bulk form: %w", err)
		}
		for _, x := range users {
			if x.CanTakeOver() {
				f.Assignees = append(f.Assignees, x)
			}
		}
	}
	return f, nil
}

// ConsoleBulk serves POST /console/sessions/bulk: the bulk form of the
// inbox and the sessions list, run through models.Store.Bulk (the command of
// POST /api/v1/sessions/bulk) as the logged-in user, so the takeover policy
// decides per session. It answers with a page: the summary of what was
// applied and what was skipped and why (200), the form again with inline
// errors (422) or the reason the role may not (403), having written nothing.
// "Preview" is a dry run: the summary and the form to apply it.
func ConsoleBulk(s *models.Store) echo.HandlerFunc {
	return func(c echo.Context) error {
		u := CurrentUser(c)
		params, err := c.FormParams()
		if err != nil {
			return echo.NewHTTPError(http.StatusBadRequest, "The form could not be read.").SetInternal(err)
		}
		var filter *models.BulkFilter
		if bf := (models.BulkFilter{Status: params.Get("filter_status"), Queue: params.Get("filter_queue"),
			TicketRef: params.Get("filter_ticket_ref"), Q: params.Get("filter_q")}); !bf.Empty() {
			filter = &bf
		}
		form, err := NewBulkForm(c.Request().Context(), s, u, localReturn(params.Get("return_to")), filter)
		if err != nil {
			return err
		}
		if k := params.Get("idempotency_key"); k != "" {
			form.FormKey = k
		}
		form.Action = models.BulkAction(strings.TrimSpace(params.Get("action")))
		form.Reason = params.Get("reason")
		form.To = strings.TrimSpace(params.Get("to"))
		form.AllMatching = params.Get("all_matching") != ""
		in := models.BulkInput{Action: form.Action, Reason: form.Reason, DryRun: params.Get("dry_run") != "", To: form.To}
		if form.AllMatching {
			// The filter of the list the form came from; an empty one is
			// refused by Validate, which names "filter".
			in.Filter = &models.BulkFilter{}
			if filter != nil {
				in.Filter = filter
			}
		} else if ids := params["session_id"]; len(ids) > 0 {
			in.SessionIDs = ids
		} else {
			in.SessionIDs = []string{}
		}
		form.SessionIDs = in.SessionIDs
		res, err := s.Bulk(c.Request().Context(), models.BulkBy{User: u}, form.FormKey, in)
		if err != nil {
			return renderBulkRefused(c, form, err)
		}
		return Render(c, http.StatusOK, views.BulkPage(views.BulkPageData{Form: form, Result: &res, DryRun: in.DryRun}))
	}
}

// renderBulkRefused shows the form again with why nothing was done.
func renderBulkRefused(c echo.Context, form views.BulkForm, err error) error {
	status := StatusFor(err)
	var ve *models.ValidationError
	switch code := models.ErrorCode(err); {
	case errors.As(err, &ve):
		form.Errors = make(map[string]string, len(ve.Fields))
		for _, f := range ve.Fields {
			field, msg := bulkFieldText(f)
			if prev, ok := form.Errors[field]; ok {
				msg = prev + "; " + msg
			}
			form.Errors[field] = msg
		}
		if form.Errors["filter"] != "" && form.Filter == nil {
			// No filter field is on the page to show it next to.
			form.Problem = form.Errors["filter"]
		}
		for k, m := range form.Errors {
			if k != "action" && k != "reason" && k != "session_ids" && k != "filter" && (k != "to" || len(form.Assignees) == 0) {
				form.Problem = strings.TrimSpace(form.Problem + " " + m)
			}
		}
	case code == models.EFORBIDDEN:
		form.Problem = fmt.Sprintf("Nothing was done: your role (%s) cannot %s sessions.", CurrentUser(c).Role, strings.ToLower(form.Action.Label()))
	case code == models.EIDEMPOTENCY:
		form.Problem = "Nothing was done: this form was already used for another bulk action. Go back to the list, reload it and try again."
	default:
		return err
	}
	return Render(c, status, views.BulkPage(views.BulkPageData{Form: form}))
}

// bulkFieldText words a validation error of the bulk form for the console.
func bulkFieldText(f models.FieldError) (field, msg string) {
	switch {
	case f.Field == "session_ids" && strings.HasPrefix(f.Message, "is required"):
		return "session_ids", "Select at least one session, or tick “all matching this filter”."
	case f.Field == "session_ids" && strings.HasPrefix(f.Message, "must list at least"):
		return "session_ids", "Select at least one session, or tick “all matching this filter”."
	case f.Field == "action" && strings.HasPrefix(f.Message, "is required"):
		return "action", "Choose an action."
	case f.Field == "to" && strings.HasPrefix(f.Message, "is required"):
		return "to", "Choose the person to reassign the sessions to."
	case strings.HasPrefix(f.Field, "session_ids["):
		return "session_ids", "A selected session id is not valid: " + f.Message + "."
	case strings.HasPrefix(f.Field, "filter"):
		return "filter", "The filter " + strings.TrimPrefix(strings.TrimPrefix(f.Field, "filter"), ".") + " " + f.Message + "."
	}
	return f.Field, f.Message
}

// localReturn keeps a return address only when it is a console page of this
// site, so the form cannot be made to send anyone elsewhere.
func localReturn(p string) string {
	if strings.HasPrefix(p, "/console/") && !strings.HasPrefix(p, "//") && !strings.ContainsAny(p, "\\\r\n") {
		return p
	}
	return ""
}
