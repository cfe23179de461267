package handlers

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/views"
)

// AdminCheckpointWrite serves POST /console/admin/checkpoints: sign a
// checkpoint now (if anything changed since the last) and go back to the
// verify page, which shows it. A refusal (the log changed behind the last
// checkpoint) is shown, not hidden: it is the finding.
func AdminCheckpointWrite(s *models.Store, cp *models.Checkpointer) echo.HandlerFunc {
	return func(c echo.Context) error {
		ctx := c.Request().Context()
		u := CurrentUser(c)
		b := views.Banner{Kind: "warning", Text: "Checkpoints are off: the server has no signing key (--checkpoint-key)."}
		if cp.Enabled() {
			ck, written, err := cp.Write(ctx, u.Actor())
			var refused *models.CheckpointRefusedError
			switch {
			case errors.As(err, &refused):
				b = views.Banner{Kind: "error", Text: refused.Error()}
			case err != nil:
				return err
			case written:
				b = views.Banner{Kind: "success", Text: fmt.Sprintf("Checkpoint %d signed over %d sessions and %d events.", ck.Seq, ck.Sessions, ck.Events)}
				detail := map[string]any{"seq": ck.Seq, "sessions": ck.Sessions, "events": ck.Events, "root": ck.Root}
				if err := s.RecordAdminAction(ctx, *u, models.AdminCheckpointWrite, "checkpoint", fmt.Sprint(ck.Seq), detail); err != nil {
					return err
				}
			default:
				b = views.Banner{Kind: "info", Text: fmt.Sprintf("Nothing changed since checkpoint %d; no new checkpoint was needed.", ck.Seq)}
			}
		}
		if err := AddFlash(c, b); err != nil {
			return err
		}
		return c.Redirect(http.StatusSeeOther, "/console/admin/verify")
	}
}

// AdminErase serves POST /console/admin/erase: erase one ticket's personal
// data (models.EraseTicket) and go back to the verify page with what was
// done, or why not.
func AdminErase(s *models.Store) echo.HandlerFunc {
	return func(c echo.Context) error {
		u := CurrentUser(c)
		ticket := c.FormValue("ticket")
		rep, err := s.EraseTicket(c.Request().Context(), *u, ticket, c.FormValue("reason"))
		var b views.Banner
		var ve *models.ValidationError
		switch {
		case errors.As(err, &ve), models.IsNotFound(err), errors.Is(err, models.ErrEraseRefused):
			b = views.Banner{Kind: "error", Text: "Nothing was erased: " + err.Error()}
		case err != nil:
			return err
		case rep.Changed == 0:
			b = views.Banner{Kind: "info", Text: fmt.Sprintf("Ticket %s: nothing left to erase (%d sessions, %d events erased before).", rep.TicketRef, len(rep.Sessions), rep.AlreadyErased)}
		default:
			b = views.Banner{Kind: "success", Text: fmt.Sprintf("Ticket %s erased: %d sessions, %d events (erasure %s).", rep.TicketRef, len(rep.Sessions), rep.Events, rep.ErasureID)}
		}
		if len(rep.Archived) > 0 {
			b.Text += fmt.Sprintf(" %d archived sessions of the ticket are in archive files, outside the database: delete those files too (taskpilots erase lists them).", len(rep.Archived))
		}
		if err := AddFlash(c, b); err != nil {
			return err
		}
		return c.Redirect(http.StatusSeeOther, "/console/admin/verify")
	}
}
