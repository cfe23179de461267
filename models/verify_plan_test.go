package models_test

import (
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
)

// TestVerifyBatchPlan: verify lists sessions a batch at a time, each with its
// state; a batch in the middle of 20,000 sessions must read about a batch of
// states, not every state before it (the merge join of the two primary keys
// started at the first state when the join did not repeat the keyset
// bound, so the whole run read sessions²/2000 states).
func TestVerifyBatchPlan(t *testing.T) {
	s := storetest.New(t, models.Postgres)
	for _, q := range []string{
		`INSERT INTO sessions (id, goal, status, state_version, last_seq, last_hash, created_at, updated_at)
		 SELECT 'ses_' || lpad(g::text, 10, '0'), 'g', 'open', 1, 1, md5(g::text) || md5(g::text), now(), now() FROM generate_series(1, 20000) g`,
		`INSERT INTO session_states (session_id, state) SELECT id, '{"version":1}' FROM sessions`,
		`ANALYZE sessions; ANALYZE session_states`,
	} {
		if err := s.DB.Exec(q).Error; err != nil {
			t.Fatal(err)
		}
	}
	sql := strings.NewReplacer("$1", "'ses_0000010000'", "$2::text[]", "NULL::text[]", "$2", "NULL::text[]").Replace(models.VerifySessionsSQL)
	plan, _ := explainAnalyze(t, s, sql)
	m := regexp.MustCompile(`on session_states st .*?rows=(\d+) loops`).FindStringSubmatch(plan)
	if m == nil {
		t.Fatalf("no scan of session_states in the plan:\n%s", plan)
	}
	if n, _ := strconv.Atoi(m[1]); n > 1001 {
		t.Fatalf("one batch of 1,000 sessions read %d states:\n%s", n, plan)
	}
}
