package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
)

// TestAPIDocsRenders opens the API reference in the browser under the
// page's real Content-Security-Policy: Redoc, served from /static/, renders
// the operations of the OpenAPI document with their examples, and the page
// breaks no policy apart from the one load the policy exists to stop
// (Redoc's badge logo on a CDN).
func TestAPIDocsRenders(t *testing.T) {
	e := newEnv(t)
	// Redoc parses the whole OpenAPI document in the page: seconds on a
	// quiet machine, far more on a loaded one.
	ctx := tabWithin(t, 90*time.Second)
	// Registered before any page script runs (DevTools scripts are exempt
	// from the policy), so that every violation is recorded.
	run(t, ctx, chromedp.ActionFunc(func(ctx context.Context) error {
		_, err := page.AddScriptToEvaluateOnNewDocument(`window.__csp = [];
			document.addEventListener("securitypolicyviolation", e =>
				window.__csp.push(e.violatedDirective + " " + e.blockedURI));`).Do(ctx)
		return err
	}))
	var heading, example string
	var violations []string
	run(t, ctx,
		chromedp.Navigate(e.base+"/api/docs"),
		// Redoc renders each operation under an h2 with its summary.
		chromedp.WaitVisible(`//h2[normalize-space()="Create a session"]`, chromedp.BySearch),
		chromedp.Text(`//h2[normalize-space()="Lease the next delegation of a queue, or up to max of them (long poll)"]`, &heading, chromedp.BySearch),
		chromedp.Text(`body`, &example, chromedp.ByQuery),
		chromedp.Evaluate(`window.__csp`, &violations),
	)
	if heading == "" {
		t.Fatal("the lease operation is not rendered")
	}
	// A response example of the document, rendered in the right panel.
	if !strings.Contains(example, "Refund order 1182 if eligible") {
		t.Error("the rendered page shows no example of the document")
	}
	for _, v := range violations {
		if !strings.Contains(v, "cdn.redoc.ly") {
			t.Errorf("Content-Security-Policy violation: %s", v)
		}
	}
}
