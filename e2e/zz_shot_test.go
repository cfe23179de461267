package e2e

import (
	"context"
	"os"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/taskpilots/handoff/models"
)

func TestZZShot(t *testing.T) {
	e := newEnv(t)
	ana := e.user(t, "Ana Agent", models.RoleAgent)
	id := e.workerEscalated(t, []models.Evidence{{Claim: "order paid 2026-11-20", Source: "orders-db:1182"}, {Claim: "customer asked twice", Source: "ticket T-1182"}})
	e.workerEscalated(t, nil)
	v := int64(4)
	e.s.ClaimEscalation(context.Background(), id, ana, "", models.ClaimInput{ExpectedVersion: &v})
	ctx := tab(t)
	e.login(t, ctx, ana, "/console")
	var a, b []byte
	run(t, ctx, chromedp.EmulateViewport(1280, 900), chromedp.Navigate(e.base+"/console"), chromedp.FullScreenshot(&a, 100),
		chromedp.Navigate(e.base+"/console/sessions/"+id), chromedp.FullScreenshot(&b, 100))
	os.WriteFile("/tmp/inbox.png", a, 0o644)
	os.WriteFile("/tmp/session.png", b, 0o644)
}
