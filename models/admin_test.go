package models_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
)

func adminLog(t *testing.T, s *models.Store) []models.AdminAudit {
	t.Helper()
	var rows []models.AdminAudit
	if err := s.DB.Order("created_at, id").Find(&rows).Error; err != nil {
		t.Fatal(err)
	}
	return rows
}

func decodeView(t *testing.T, s *string, v any) {
	t.Helper()
	if s == nil {
		t.Fatal("missing before/after")
	}
	if err := json.Unmarshal([]byte(*s), v); err != nil {
		t.Fatal(err)
	}
}

func TestAdminUsers(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		root := mustUser(t, s, "root@example.com", models.RoleAdmin)
		agent := mustUser(t, s, "ann@example.com", models.RoleAgent)

		u, generated, err := s.AdminCreateUser(ctx, root, models.CreateUserInput{Email: " Rita@Example.com ", Name: "Rita", Role: models.RoleReviewer})
		if err != nil || generated == "" || u.Email != "rita@example.com" {
			t.Fatalf("create = %+v %q %v", u, generated, err)
		}
		if _, err := s.Authenticate(ctx, "rita@example.com", generated); err != nil {
			t.Fatalf("generated password does not log in: %v", err)
		}
		_, _, err = s.AdminCreateUser(ctx, root, models.CreateUserInput{Email: "rita@example.com", Name: "Dup", Role: models.RoleAgent, Password: "long enough pw"})
		wantFields(t, err, "email")
		_, _, err = s.AdminCreateUser(ctx, agent, models.CreateUserInput{Email: "x@example.com", Name: "X", Role: models.RoleAgent, Password: "long enough pw"})
		wantForbidden(t, err)

		if _, err := s.SetUserDisabled(ctx, root, u.ID, true); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Authenticate(ctx, "rita@example.com", generated); models.ErrorCode(err) != models.EUNAUTH {
			t.Fatalf("a disabled user logged in: %v", err)
		}
		if _, err := s.SetUserDisabled(ctx, root, u.ID, false); err != nil {
			t.Fatal(err)
		}
		if _, err := s.SetUserRole(ctx, root, u.ID, models.RoleAdmin); err != nil {
			t.Fatal(err)
		}
		_, err = s.SetUserRole(ctx, root, u.ID, "owner")
		wantFields(t, err, "role")
		pw, _, err := s.ResetPassword(ctx, root, u.ID)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Authenticate(ctx, "rita@example.com", generated); err == nil {
			t.Fatal("the old password still works")
		}
		if _, err := s.Authenticate(ctx, "rita@example.com", pw); err != nil {
			t.Fatalf("the new password does not: %v", err)
		}
		// Admins cannot change themselves (the last admin could lock
		// everyone out), and a demoted admin can no longer act.
		_, err = s.SetUserDisabled(ctx, root, root.ID, true)
		wantForbidden(t, err)
		rita, _ := s.GetUser(ctx, u.ID)
		if _, err := s.SetUserRole(ctx, rita, root.ID, models.RoleAgent); err != nil {
			t.Fatal(err)
		}
		_, err = s.SetUserDisabled(ctx, root, agent.ID, true)
		wantForbidden(t, err)
		_, err = s.SetUserDisabled(ctx, rita, "usr_missing", true)
		if models.ErrorCode(err) != models.ENOTFOUND {
			t.Fatalf("unknown user: %v", err)
		}

		log := adminLog(t, s)
		var actions []string
		for _, r := range log {
			actions = append(actions, r.Action)
			if (r.Before != nil && strings.Contains(*r.Before, "$2")) || (r.After != nil && strings.Contains(*r.After, "$2")) {
				t.Errorf("%s audit row holds a password hash", r.Action)
			}
		}
		want := "user.create,user.disable,user.enable,user.role,user.reset_password,user.role"
		if strings.Join(actions, ",") != want {
			t.Fatalf("admin log = %v, want %s", actions, want)
		}
		var before, after models.UserView
		decodeView(t, log[1].Before, &before)
		decodeView(t, log[1].After, &after)
		if log[1].Actor != root.Actor() || log[1].TargetID != u.ID || before.Disabled || !after.Disabled {
			t.Fatalf("disable row = %+v (%+v → %+v)", log[1], before, after)
		}
		if log[0].Before != nil || !strings.Contains(*log[0].After, "rita@example.com") {
			t.Fatalf("create row = %+v", log[0])
		}
	})
}

// TestAdminChangeIsAtomic: when the audit row cannot be written, the change
// is not made either.
func TestAdminChangeIsAtomic(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		root := mustUser(t, s, "root@example.com", models.RoleAdmin)
		agent := mustUser(t, s, "ann@example.com", models.RoleAgent)
		if err := s.DB.Exec(`DROP TABLE admin_audit`).Error; err != nil {
			t.Fatal(err)
		}
		if _, err := s.SetUserDisabled(ctx, root, agent.ID, true); err == nil {
			t.Fatal("disable without an admin log succeeded")
		}
		if u, _ := s.GetUser(ctx, agent.ID); u.Disabled {
			t.Fatal("the user was disabled without an audit row")
		}
		if _, _, err := s.AdminCreateToken(ctx, root, "ctl", models.RoleController); err == nil {
			t.Fatal("token creation without an admin log succeeded")
		}
		if ts, _ := s.ListTokens(ctx); len(ts) != 0 {
			t.Fatalf("a token was created without an audit row: %+v", ts)
		}
	})
}

func TestAdminTokens(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		root := mustUser(t, s, "root@example.com", models.RoleAdmin)
		secret, tok, err := s.AdminCreateToken(ctx, root, "billing-ctl", models.RoleController)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := s.AuthenticateToken(ctx, secret); err != nil || got.ID != tok.ID {
			t.Fatalf("new token does not authenticate: %v", err)
		}
		_, _, err = s.AdminCreateToken(ctx, root, "bad name", models.RoleAgent)
		wantFields(t, err, "name", "role")
		if _, err := s.AdminRevokeToken(ctx, root, tok.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := s.AuthenticateToken(ctx, secret); models.ErrorCode(err) != models.EUNAUTH {
			t.Fatalf("revoked token authenticates: %v", err)
		}
		// Revoking again changes nothing and writes no second row.
		if _, err := s.AdminRevokeToken(ctx, root, tok.ID); err != nil {
			t.Fatal(err)
		}
		log := adminLog(t, s)
		if len(log) != 2 || log[0].Action != models.AdminTokenCreate || log[1].Action != models.AdminTokenRevoke {
			t.Fatalf("admin log = %+v", log)
		}
		if strings.Contains(*log[0].After, secret) || strings.Contains(*log[0].After, "token_hash") {
			t.Fatalf("token audit holds a secret: %s", *log[0].After)
		}
		var after models.TokenView
		decodeView(t, log[1].After, &after)
		if after.RevokedAt == nil {
			t.Fatalf("revoke row after = %+v", after)
		}
		page, err := s.ListAdminAudit(ctx, models.AdminAuditOpts{Limit: 1})
		if err != nil || len(page.Rows) != 1 || page.Rows[0].Action != models.AdminTokenRevoke || page.Next == "" {
			t.Fatalf("first page = %+v, %v", page, err)
		}
		page, err = s.ListAdminAudit(ctx, models.AdminAuditOpts{Limit: 1, Before: page.Next})
		if err != nil || len(page.Rows) != 1 || page.Rows[0].Action != models.AdminTokenCreate || page.Next != "" {
			t.Fatalf("second page = %+v, %v", page, err)
		}
	})
}

func TestVerifier(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		root := mustUser(t, s, "root@example.com", models.RoleAdmin)
		agent := mustUser(t, s, "ann@example.com", models.RoleAgent)
		good := decided(ctx, t, s, agent, "refunds")
		bad := decided(ctx, t, s, agent, "refunds")
		v := &models.Verifier{Store: s}
		if st := v.Status(); st.Running || st.Report != nil {
			t.Fatalf("fresh verifier = %+v", st)
		}
		run := func() models.VerifyRun {
			t.Helper()
			started, err := v.Start(ctx, root)
			if err != nil || !started {
				t.Fatalf("start = %v, %v", started, err)
			}
			wctx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			if err := v.Wait(wctx); err != nil {
				t.Fatal(err)
			}
			return v.Status()
		}
		st := run()
		if st.Running || st.Report == nil || !st.Report.OK() || st.Done != 2 || st.Total != 2 || st.StartedBy != root.Actor() {
			t.Fatalf("run = %+v", st)
		}
		// Tamper with one event's payload and one session's state.
		if err := s.DB.Exec(`UPDATE events SET payload = '{"resolution":"nothing"}' WHERE session_id = ? AND seq = 6`, bad).Error; err != nil {
			t.Fatal(err)
		}
		st = run()
		if len(st.BrokenChains()) != 1 || st.BrokenChains()[0].SessionID != bad || st.BrokenChains()[0].Kind != models.ProblemHash {
			t.Fatalf("broken chains = %+v", st.BrokenChains())
		}
		if len(st.ReplayMismatches()) != 1 || st.ReplayMismatches()[0].SessionID != bad {
			t.Fatalf("replay mismatches = %+v", st.ReplayMismatches())
		}
		_ = good
		var actions []string
		for _, r := range adminLog(t, s) {
			actions = append(actions, r.Action)
		}
		if strings.Join(actions, ",") != "verify.start,verify.finish,verify.start,verify.finish" {
			t.Fatalf("admin log = %v", actions)
		}
	})
}

// TestVerifierOneAtATime holds the sessions table locked so that a run
// cannot finish, and checks that a second start is refused meanwhile.
func TestVerifierOneAtATime(t *testing.T) {
	t.Parallel()
	s := storetest.New(t, models.Postgres)
	ctx := context.Background()
	root := mustUser(t, s, "root@example.com", models.RoleAdmin)
	tx := s.DB.Begin()
	if err := tx.Exec(`LOCK TABLE sessions IN ACCESS EXCLUSIVE MODE`).Error; err != nil {
		t.Fatal(err)
	}
	v := &models.Verifier{Store: s}
	if started, err := v.Start(ctx, root); err != nil || !started {
		t.Fatalf("first start = %v, %v", started, err)
	}
	if started, err := v.Start(ctx, root); err != nil || started {
		t.Fatalf("second start while running = %v, %v", started, err)
	}
	if !v.Status().Running {
		t.Fatal("not running")
	}
	tx.Rollback()
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := v.Wait(wctx); err != nil {
		t.Fatal(err)
	}
	if st := v.Status(); st.Running || st.Report == nil || st.Err != "" {
		t.Fatalf("after the lock = %+v", st)
	}
}

func TestMetricsTrend(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		to := time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC)
		from := to.Add(-7 * 24 * time.Hour)
		trend, err := s.MetricsTrend(ctx, models.MetricsOpts{From: from, To: to}, 7)
		if err != nil || len(trend) != 7 {
			t.Fatalf("trend = %d buckets, %v", len(trend), err)
		}
		for i, pm := range trend {
			if !pm.From.Equal(from.Add(time.Duration(i)*24*time.Hour)) || !pm.To.Equal(pm.From.Add(24*time.Hour)) {
				t.Fatalf("bucket %d = %v – %v", i, pm.From, pm.To)
			}
		}
		if _, err := s.MetricsTrend(ctx, models.MetricsOpts{From: to, To: from}, 7); models.ErrorCode(err) != models.EINVALID {
			t.Fatalf("inverted window: %v", err)
		}
	})
}
