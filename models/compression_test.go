package models_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
)

// TestLongColumnsUseLZ4 checks migration 39: where PostgreSQL has lz4, a
// session's state, event payloads and idempotent outcomes are compressed
// with it (pglz cost 7.7 % of the server's CPU in bench cycles), and a
// compressed state reads back whole.
func TestLongColumnsUseLZ4(t *testing.T) {
	t.Parallel()
	s := storetest.New(t, models.Postgres)
	ctx := context.Background()

	want := "l"
	if err := s.DB.Exec(`CREATE TEMP TABLE lz4_probe (t text COMPRESSION lz4)`).Error; err != nil {
		if !strings.Contains(err.Error(), "0A000") {
			t.Fatal(err)
		}
		want = "" // built without lz4: the migration keeps pglz
	}
	var cols []struct {
		Rel, Att, Compression string
	}
	if err := s.DB.Raw(`SELECT attrelid::regclass::text AS rel, attname AS att, attcompression::text AS compression
		FROM pg_attribute WHERE (attrelid, attname) IN (('session_states'::regclass, 'state'),
			('events'::regclass, 'payload'), ('idempotency_keys'::regclass, 'outcome')) ORDER BY 1`).Scan(&cols).Error; err != nil {
		t.Fatal(err)
	}
	if len(cols) != 3 {
		t.Fatalf("columns: %+v", cols)
	}
	for _, c := range cols {
		if c.Compression != want {
			t.Errorf("%s.%s compression %q, want %q", c.Rel, c.Att, c.Compression, want)
		}
	}
	if want == "" {
		return
	}

	// A state well past the 2 KB at which PostgreSQL compresses.
	long := strings.Repeat("The customer asked again where the parcel is. ", 200)
	id := storetest.Session(ctx, t, s, &storetest.SessionOpts{Facts: map[string]any{"history": long}})
	var got string
	if err := s.DB.Raw(`SELECT coalesce(pg_column_compression(state), 'none') FROM session_states WHERE session_id = ?`, id).Scan(&got).Error; err != nil {
		t.Fatal(err)
	}
	if got != "lz4" {
		t.Fatalf("state of %s compressed with %q, want lz4", id, got)
	}
	sess, err := s.GetSession(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	var st models.State
	if err := json.Unmarshal([]byte(sess.State), &st); err != nil {
		t.Fatal(err)
	}
	if got, _ := st.Facts["history"].(string); got != long {
		t.Fatalf("state read back with a history of %d bytes (%T), want the %d written", len(got), st.Facts["history"], len(long))
	}
}
