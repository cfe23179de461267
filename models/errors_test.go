package models

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// TestUnavailableErrors checks that losing the database is told apart from
// rejecting a request, so that clients are told to retry (503), not that
// the server failed (500).
func TestUnavailableErrors(t *testing.T) {
	t.Parallel()
	cases := []struct {
		err  error
		want Code
	}{
		{&pgconn.PgError{Code: "57P01"}, EUNAVAILABLE},
		{fmt.Errorf("claim: %w", &pgconn.PgError{Code: "08006"}), EUNAVAILABLE},
		{&pgconn.PgError{Code: "23505"}, EINTERNAL},
		{errors.New("boom"), EINTERNAL},
		{&ConflictError{}, ECONFLICT},
	}
	for _, c := range cases {
		if got := ErrorCode(c.err); got != c.want {
			t.Errorf("ErrorCode(%v) = %s, want %s", c.err, got, c.want)
		}
	}
}

// TestUnavailableWhenPortClosed checks that a real failed connection is
// reported as EUNAVAILABLE rather than a generic internal error.
func TestUnavailableWhenPortClosed(t *testing.T) {
	t.Parallel()
	s, err := Open(context.Background(), "postgres://postgres@127.0.0.1:1/none?sslmode=disable&connect_timeout=2", OpenOpts{})
	if err == nil {
		s.Close()
		t.Fatal("open on a closed port succeeded")
	}
	if got := ErrorCode(err); got != EUNAVAILABLE {
		t.Fatalf("ErrorCode(%v) = %s, want %s", err, got, EUNAVAILABLE)
	}
}
