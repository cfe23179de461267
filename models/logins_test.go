package models_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
)

// loginClock is a store clock that tests move by hand.
type loginClock struct {
	mu  sync.Mutex
	now time.Time
}

func freezeClock(stores ...*models.Store) *loginClock {
	c := &loginClock{now: time.Date(2026, 3, 4, 9, 0, 0, 0, time.UTC)}
	for _, s := range stores {
		s.Now = c.Now
	}
	return c
}

func (c *loginClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *loginClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func loginRow(t *testing.T, s *models.Store, id string) models.Login {
	t.Helper()
	var l models.Login
	if err := s.DB.Where("id = ?", id).Take(&l).Error; err != nil {
		t.Fatal(err)
	}
	return l
}

func mustResume(t *testing.T, s *models.Store, secret string, p models.LoginPolicy) models.Login {
	t.Helper()
	l, _, err := s.ResumeLogin(context.Background(), secret, p)
	if err != nil {
		t.Fatalf("resume login: %v", err)
	}
	return l
}

func wantEnded(t *testing.T, s *models.Store, secret string, p models.LoginPolicy, why string) {
	t.Helper()
	_, _, err := s.ResumeLogin(context.Background(), secret, p)
	if !errors.Is(err, models.ErrLoginEnded) || !strings.Contains(err.Error(), why) {
		t.Fatalf("resume login: %v, want ErrLoginEnded (%s)", err, why)
	}
	if models.ErrorCode(err) != models.EUNAUTH {
		t.Fatalf("code %s", models.ErrorCode(err))
	}
}

// TestLoginTimeouts: a login holds while used within the idle timeout
// and younger than its lifetime; last_seen_at is written at most once a
// minute.
func TestLoginTimeouts(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		clock := freezeClock(s)
		u := mustUser(t, s, "ann@example.com", models.RoleAgent)
		p := models.LoginPolicy{IdleTimeout: time.Hour, Lifetime: 5 * time.Hour}

		secret, l, err := s.StartLogin(ctx, u.ID, models.LoginMeta{UserAgent: "Firefox\x00", Address: "192.0.2.1"}, p)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(l.ID, secret) || l.ID == secret || l.CSRFSecret == "" || l.CSRFSecret == secret {
			t.Fatalf("login %+v for secret %q: the row must hold the secret's hash and its own CSRF secret", l, secret)
		}
		if l.UserAgent != "Firefox" {
			t.Errorf("user agent %q", l.UserAgent)
		}
		got, gotUser, err := s.ResumeLogin(ctx, secret, p)
		if err != nil || got.ID != l.ID || gotUser.ID != u.ID {
			t.Fatalf("resume: %+v %+v %v", got, gotUser, err)
		}

		// Within a minute of the last write, reading writes nothing.
		seen := loginRow(t, s, l.ID).LastSeenAt
		clock.Add(59 * time.Second)
		mustResume(t, s, secret, p)
		if after := loginRow(t, s, l.ID).LastSeenAt; !after.Equal(seen.Time) {
			t.Fatalf("last_seen_at written within a minute: %v → %v", seen, after)
		}
		clock.Add(time.Second)
		mustResume(t, s, secret, p)
		if after := loginRow(t, s, l.ID).LastSeenAt; !after.Equal(clock.Now()) {
			t.Fatalf("last_seen_at %v, want %v after a minute", after, clock.Now())
		}

		// Used every 59 minutes, it holds until its lifetime is over.
		for i := 0; i < 5; i++ {
			clock.Add(59 * time.Minute)
			mustResume(t, s, secret, p) // the last at 4h56m
		}
		clock.Add(4 * time.Minute) // 5h since sign-in
		wantEnded(t, s, secret, p, "lifetime")

		// Unused for the idle timeout, it ends.
		secret2, _, err := s.StartLogin(ctx, u.ID, models.LoginMeta{}, p)
		if err != nil {
			t.Fatal(err)
		}
		clock.Add(59 * time.Minute)
		mustResume(t, s, secret2, p)
		clock.Add(time.Hour)
		wantEnded(t, s, secret2, p, "idle")

		// A shorter lifetime configured later applies to older logins.
		secret3, _, err := s.StartLogin(ctx, u.ID, models.LoginMeta{}, p)
		if err != nil {
			t.Fatal(err)
		}
		clock.Add(30 * time.Minute)
		wantEnded(t, s, secret3, models.LoginPolicy{IdleTimeout: time.Hour, Lifetime: 20 * time.Minute}, "lifetime")

		wantEnded(t, s, "tpl_unknown", p, "unknown")
		wantEnded(t, s, "", p, "not a login")
	})
}

// TestLoginRevocations: logout ends one login; disabling the user, an
// admin's reset (the console's and the CLI's), a password change and "sign out
// everywhere" end all of the user's logins, and no one else's.
func TestLoginRevocations(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		p := models.LoginPolicy{}
		root := mustUser(t, s, "root@example.com", models.RoleAdmin)
		ann := mustUser(t, s, "ann@example.com", models.RoleAgent)
		start := func(u models.User) string {
			t.Helper()
			secret, _, err := s.StartLogin(ctx, u.ID, models.LoginMeta{}, p)
			if err != nil {
				t.Fatal(err)
			}
			return secret
		}
		rootLogin := start(root)
		check := func(step string, change func()) {
			t.Helper()
			a, b := start(ann), start(ann)
			change()
			wantEnded(t, s, a, p, "revoked")
			wantEnded(t, s, b, p, "revoked")
			mustResume(t, s, rootLogin, p)
		}

		one, other := start(ann), start(ann)
		if err := s.EndLogin(ctx, one); err != nil {
			t.Fatal(err)
		}
		wantEnded(t, s, one, p, "revoked")
		mustResume(t, s, other, p)

		check("sign out everywhere", func() {
			if n, err := s.RevokeUserLogins(ctx, ann.ID); err != nil || n != 3 {
				t.Fatalf("revoked %d, %v; want 3 (two new and the other)", n, err)
			}
		})
		check("disable", func() {
			if _, err := s.SetUserDisabled(ctx, root, ann.ID, true); err != nil {
				t.Fatal(err)
			}
			if _, err := s.SetUserDisabled(ctx, root, ann.ID, false); err != nil {
				t.Fatal(err)
			}
		})
		var reset string
		check("admin reset", func() {
			pw, u, err := s.ResetPassword(ctx, root, ann.ID)
			reset = pw
			if err != nil || !u.MustChangePassword {
				t.Fatalf("reset: %+v %v", u, err)
			}
			if got, err := s.Authenticate(ctx, ann.Email, pw); err != nil || !got.MustChangePassword {
				t.Fatalf("after reset: %+v %v (the user must change the reset password)", got, err)
			}
		})
		check("change", func() {
			if _, err := s.ChangePassword(ctx, ann.ID, models.ChangePasswordInput{Current: reset, New: "violet staple orbit 42", Confirm: "violet staple orbit 42"}); err != nil {
				t.Fatal(err)
			}
		})
		if u, err := s.Authenticate(ctx, ann.Email, "violet staple orbit 42"); err != nil || u.MustChangePassword {
			t.Fatalf("after change: %+v %v", u, err)
		}
	})
}

// TestChangePasswordRefusals: each mistake is a field error and nothing
// changes (the old password still works, logins stay).
func TestChangePasswordRefusals(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		ann := mustUser(t, s, "ann.lee@example.com", models.RoleAgent)
		secret, _, err := s.StartLogin(ctx, ann.ID, models.LoginMeta{}, models.LoginPolicy{})
		if err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			in    models.ChangePasswordInput
			field string
		}{
			{models.ChangePasswordInput{Current: "wrong password!", New: "violet staple orbit 42", Confirm: "violet staple orbit 42"}, "current_password"},
			{models.ChangePasswordInput{Current: "correct-horse-1\x00", New: "violet staple orbit 42", Confirm: "violet staple orbit 42"}, "current_password"},
			{models.ChangePasswordInput{Current: "correct-horse-1", New: "short", Confirm: "short"}, "new_password"},
			{models.ChangePasswordInput{Current: "correct-horse-1", New: "password1234", Confirm: "password1234"}, "new_password"},
			{models.ChangePasswordInput{Current: "correct-horse-1", New: "ann.lee@example.com", Confirm: "ann.lee@example.com"}, "new_password"},
			{models.ChangePasswordInput{Current: "correct-horse-1", New: "correct-horse-1", Confirm: "correct-horse-1"}, "new_password"},
			{models.ChangePasswordInput{Current: "correct-horse-1", New: "violet staple orbit 42", Confirm: "violet staple orbit 43"}, "confirm_password"},
		} {
			_, err := s.ChangePassword(ctx, ann.ID, tc.in)
			var ve *models.ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("%+v: %v, want a validation error", tc.in, err)
			}
			found := false
			for _, f := range ve.Fields {
				found = found || f.Field == tc.field
			}
			if !found {
				t.Errorf("%+v: %v, want an error on %s", tc.in, err, tc.field)
			}
		}
		if _, err := s.Authenticate(ctx, ann.Email, "correct-horse-1"); err != nil {
			t.Fatalf("password changed by a refused change: %v", err)
		}
		mustResume(t, s, secret, models.LoginPolicy{})
	})
}

func TestPasswordPolicy(t *testing.T) {
	t.Parallel()
	for pw, ok := range map[string]bool{
		"":                         false,
		"Tr0ub4dor&3":              false, // 11 characters
		"aaaaaaaaaaaa":             false,
		"password1234":             false,
		"qwertyuiop12":             false,
		"rita.smith@example.com":   false, // the account's own words
		"correct horse battery":    true,
		"violet staple orbit 42":   true,
		strings.Repeat("x", 73):    false, // bcrypt's limit
		"zq8-Lm2_pW7r":             true,
		"ünïcödé ünïcödé ünïcödé!": true,
	} {
		err := models.CheckPassword("password", pw, "rita.smith@example.com", "Rita Smith")
		if (err == nil) != ok {
			t.Errorf("CheckPassword(%q) = %v, want ok=%v", pw, err, ok)
		}
	}
	// The account's own words are what make that one weak.
	if err := models.CheckPassword("password", "rita.smith@example.com"); err != nil {
		t.Errorf("without related words: %v", err)
	}
	// The same policy guards every user creation, the CLI's included.
	in := models.CreateUserInput{Email: "a@example.com", Name: "A", Role: models.RoleAgent, Password: "password1234"}
	if err := in.Validate(); err == nil || !strings.Contains(err.Error(), "too easy to guess") {
		t.Fatalf("Validate with a weak password: %v", err)
	}
}

func TestThrottleDelay(t *testing.T) {
	t.Parallel()
	p := models.ThrottlePolicy{Window: 15 * time.Minute}.WithDefaults()
	for n, want := range map[int]time.Duration{0: 0, 4: 0, 5: time.Second, 6: 2 * time.Second, 7: 4 * time.Second, 14: 512 * time.Second, 15: 15 * time.Minute, 1000: 15 * time.Minute} {
		if got := p.Delay(n, 5); got != want {
			t.Errorf("Delay(%d, 5) = %v, want %v", n, got, want)
		}
	}
	for addr, want := range map[string]string{"192.0.2.7": "192.0.2.7", "::ffff:192.0.2.7": "192.0.2.7",
		"2001:db8:1:2:3:4:5:6": "2001:db8:1:2::/64", "2001:db8:1:2:ffff::1": "2001:db8:1:2::/64", "garbage": "garbage"} {
		if got := models.ThrottleAddress(addr); got != want {
			t.Errorf("ThrottleAddress(%q) = %q, want %q", addr, got, want)
		}
	}
}

// openReplica opens a second store on s's database: another server process.
func openReplica(t *testing.T, s *models.Store) *models.Store {
	t.Helper()
	r, err := models.Open(context.Background(), s.URL(), models.OpenOpts{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// TestLoginThrottleSharedByReplicas: failures counted by one replica slow
// the same account and address on another; the waits grow exponentially and
// are forgotten after a quiet window.
func TestLoginThrottleSharedByReplicas(t *testing.T) {
	storetest.Each(t, func(t *testing.T, a *models.Store) {
		ctx := context.Background()
		b := openReplica(t, a)
		clock := freezeClock(a, b)
		p := models.ThrottlePolicy{FreePerPair: 3, FreePerAddress: 10, Window: 15 * time.Minute}
		const email, addr = "ann@example.com", "192.0.2.1"
		wait := func(s *models.Store, email, addr string) time.Duration {
			t.Helper()
			w, err := s.LoginWait(ctx, p, email, addr)
			if err != nil {
				t.Fatal(err)
			}
			return w
		}
		fail := func(s *models.Store, email, addr string) time.Duration {
			t.Helper()
			w, err := s.RecordLoginFailure(ctx, p, email, addr)
			if err != nil {
				t.Fatal(err)
			}
			return w
		}
		if w := fail(a, email, addr); w != 0 {
			t.Fatalf("first failure: wait %v", w)
		}
		if w := fail(b, email, addr); w != 0 {
			t.Fatalf("second failure: wait %v", w)
		}
		if w := fail(a, " ANN@example.com", addr); w != time.Second {
			t.Fatalf("third failure (on replica a, counted with b's): wait %v, want 1s", w)
		}
		if w := wait(b, email, addr); w != time.Second {
			t.Fatalf("replica b sees wait %v, want 1s", w)
		}
		clock.Add(time.Second)
		if w := fail(b, email, addr); w != 2*time.Second {
			t.Fatalf("fourth failure: wait %v, want 2s", w)
		}
		clock.Add(500 * time.Millisecond)
		if w := wait(a, email, addr); w != 1500*time.Millisecond {
			t.Fatalf("replica a: wait %v, want 1.5s", w)
		}
		// The same account from another address is not slowed.
		if w := wait(a, email, "198.51.100.9"); w != 0 {
			t.Fatalf("other address waits %v", w)
		}
		// A success forgets the pair.
		if err := b.ClearLoginFailures(ctx, p, email, addr); err != nil {
			t.Fatal(err)
		}
		if w := wait(a, email, addr); w != 0 {
			t.Fatalf("after a success: wait %v", w)
		}

		// A quiet window after the wait forgets a key.
		for i := 0; i < 3; i++ {
			fail(a, "bob@example.com", "192.0.2.2")
		}
		clock.Add(time.Second + 15*time.Minute)
		if w := fail(b, "bob@example.com", "192.0.2.2"); w != 0 {
			t.Fatalf("after a quiet window: wait %v, want 0 (counting starts over)", w)
		}
	})
}

// TestThrottleAttackerDoesNotLockOutUser: however often an attacker fails
// from one address, the user signing in from another is not slowed; the
// attacker's address is, for every account.
func TestThrottleAttackerDoesNotLockOutUser(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		freezeClock(s)
		p := models.ThrottlePolicy{FreePerPair: 5, FreePerAddress: 20, Window: 15 * time.Minute}
		var w time.Duration
		for i := 0; i < 40; i++ {
			var err error
			if w, err = s.RecordLoginFailure(ctx, p, "ann@example.com", "203.0.113.5"); err != nil {
				t.Fatal(err)
			}
		}
		if w != 15*time.Minute {
			t.Fatalf("attacker waits %v after 40 failures, want the 15 min cap", w)
		}
		if w, err := s.LoginWait(ctx, p, "ann@example.com", "198.51.100.7"); err != nil || w != 0 {
			t.Fatalf("user from another address waits %v (%v)", w, err)
		}
		if w, err := s.LoginWait(ctx, p, "bob@example.com", "203.0.113.5"); err != nil || w == 0 {
			t.Fatalf("attacker's address, another account: wait %v (%v), want > 0", w, err)
		}
	})
}

// TestLoginPurges: ended logins go a day after they ended, forgotten
// throttle keys after their quiet window; live ones stay.
func TestLoginPurges(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		clock := freezeClock(s)
		u := mustUser(t, s, "ann@example.com", models.RoleAgent)
		p := models.LoginPolicy{IdleTimeout: 8 * time.Hour, Lifetime: 48 * time.Hour}
		start := func() string {
			t.Helper()
			secret, _, err := s.StartLogin(ctx, u.ID, models.LoginMeta{}, p)
			if err != nil {
				t.Fatal(err)
			}
			return secret
		}
		// Every login is made before the clock jumps: a sign-in may purge
		// by itself (now and then), and must find nothing to purge here.
		idle := start() // ended by the idle timeout at 8h, purged from 32h
		clock.Add(8 * time.Hour)
		revoked := start() // ended at 8h by logout, purged from 32h
		if err := s.EndLogin(ctx, revoked); err != nil {
			t.Fatal(err)
		}
		live := start() // used every 7h: still live at 32h
		for i := 0; i < 3; i++ {
			clock.Add(7 * time.Hour)
			mustResume(t, s, live, p)
		}
		clock.Add(3*time.Hour + time.Second)
		tp := models.ThrottlePolicy{Window: 15 * time.Minute}
		if _, err := s.RecordLoginFailure(ctx, tp, "ann@example.com", "192.0.2.1"); err != nil {
			t.Fatal(err)
		}
		if n, err := s.PurgeLogins(ctx, p); err != nil || n != 2 {
			t.Fatalf("purged %d logins, %v; want the revoked and the idle one", n, err)
		}
		mustResume(t, s, live, p)
		wantEnded(t, s, idle, p, "unknown")
		if n, err := s.PurgeLoginThrottle(ctx, tp); err != nil || n != 0 {
			t.Fatalf("purged %d fresh throttle keys, %v", n, err)
		}
		clock.Add(15 * time.Minute)
		if n, err := s.PurgeLoginThrottle(ctx, tp); err != nil || n != 2 {
			t.Fatalf("purged %d throttle keys, %v; want both keys of the failure", n, err)
		}
	})
}

// BenchmarkResumeLogin is the per-request cost of a browser login (two
// primary-key reads; last_seen_at is written at most once a minute).
func BenchmarkResumeLogin(b *testing.B) {
	for _, d := range storetest.Dialects {
		b.Run(string(d), func(b *testing.B) {
			s := storetest.New(b, d)
			u := mustUser(b, s, "ann@example.com", models.RoleAgent)
			secret, _, err := s.StartLogin(context.Background(), u.ID, models.LoginMeta{}, models.LoginPolicy{})
			if err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				if _, _, err := s.ResumeLogin(context.Background(), secret, models.LoginPolicy{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
