package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"
)

func init() {
	commands["healthcheck"] = command{
		summary: "ask a running server's /readyz; exit 0 when it is ready (for container health checks)",
		run:     runHealthcheck,
	}
}

// runHealthcheck exists because the container image has no shell, curl or
// wget (it holds the static binary only): Docker's HEALTHCHECK runs the
// binary itself. /readyz answers 200 only when the database answers, so an
// orchestrator stops routing to a replica that lost its database.
func runHealthcheck(ctx context.Context, env *cliEnv, args []string) error {
	fs := newFlagSet(env, "healthcheck")
	url := fs.String("url", envOr(env, "TASKPILOTS_HEALTHCHECK_URL", "http://127.0.0.1:8080/readyz"),
		"URL to ask (env TASKPILOTS_HEALTHCHECK_URL)")
	timeout := fs.Duration("timeout", 3*time.Second, "give up after this long")
	if err := fs.Parse(args); err != nil {
		return &exitError{code: 2, err: err}
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, *url, nil)
	if err != nil {
		return &exitError{code: 2, err: fmt.Errorf("--url %q: %w", *url, err)}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("not healthy: %w", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("not healthy: %s answered %d: %s", *url, resp.StatusCode, body)
	}
	fmt.Fprintf(env.stdout, "healthy: %s answered %d\n", *url, resp.StatusCode)
	return nil
}
