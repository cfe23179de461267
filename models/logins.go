package models

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"net"
	"strings"
	"time"

	"golang.org/x/crypto/bcrypt"
	"gorm.io/gorm"
)

// Browser logins. The login cookie carries only a random secret; the login
// itself is a row of login_sessions (keyed by the secret's SHA-256), so the
// server decides whether it still holds: not revoked, used within the idle
// timeout, younger than the absolute lifetime, its user enabled. A login is
// revoked by logging out, by "sign out everywhere", and for every login of a
// user when the user is disabled or their password changes or is reset; the
// revocations live here, in the functions that make those changes, so every
// path (console, CLI) gets them.

// Login lifetimes, the defaults of LoginPolicy.
const (
	DefaultLoginIdleTimeout = 8 * time.Hour
	DefaultLoginLifetime    = 7 * 24 * time.Hour
	// LoginTouchEvery is how stale last_seen_at may get before a request
	// writes it again: the idle timeout is measured to the minute, and
	// reading pages does not write the database on every request.
	LoginTouchEvery = time.Minute
	// loginSecretPrefix starts every login cookie secret, so that a leaked
	// one is recognisable.
	loginSecretPrefix = "tpl_"
)

// LoginPolicy is how long a browser login lasts.
type LoginPolicy struct {
	// IdleTimeout ends a login unused for this long; default 8h.
	IdleTimeout time.Duration
	// Lifetime ends a login this long after sign-in, however busy; default 7 days.
	Lifetime time.Duration
}

// WithDefaults fills the zero fields.
func (p LoginPolicy) WithDefaults() LoginPolicy {
	if p.IdleTimeout <= 0 {
		p.IdleTimeout = DefaultLoginIdleTimeout
	}
	if p.Lifetime <= 0 {
		p.Lifetime = DefaultLoginLifetime
	}
	return p
}

// Login is one browser login, a row of login_sessions ("session" alone is
// a delegated task run in this code base, so the type is Login).
type Login struct {
	// ID is the SHA-256 (hex) of the cookie's secret.
	ID     string `gorm:"primaryKey"`
	UserID string
	// CSRFSecret is the CSRF token of this login's forms.
	CSRFSecret string `gorm:"column:csrf_secret"`
	UserAgent  string
	Address    string
	CreatedAt  UTCTime
	LastSeenAt UTCTime
	ExpiresAt  UTCTime
	RevokedAt  NullTime
}

// TableName pins the table name for GORM.
func (Login) TableName() string { return "login_sessions" }

// CheckCSRF reports whether token is this login's CSRF token, in constant
// time.
func (l Login) CheckCSRF(token string) bool {
	return token != "" && subtle.ConstantTimeCompare([]byte(token), []byte(l.CSRFSecret)) == 1
}

// LoginMeta describes the browser of a new login, for the user's list of
// their logins; both are shortened and may be empty.
type LoginMeta struct {
	UserAgent string
	Address   string
}

// ErrLoginEnded is a login cookie whose login no longer holds.
var ErrLoginEnded = fmt.Errorf("%w: login ended", ErrUnauthorized)

// loginEnded says why, for the logs.
func loginEnded(why string) error { return fmt.Errorf("%w: %s", ErrLoginEnded, why) }

func loginID(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

// clip shortens s to n bytes on a rune boundary and drops NUL, which
// PostgreSQL cannot store.
func clip(s string, n int) string {
	s = strings.ToValidUTF8(strings.ReplaceAll(s, "\x00", ""), "")
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

func utf8RuneStart(b byte) bool { return b&0xC0 != 0x80 }

// StartLogin records a new login of userID and returns the cookie's secret
// (never stored) with the login, whose CSRFSecret is fresh: a token from
// before the sign-in is not one of this login's.
func (s *Store) StartLogin(ctx context.Context, userID string, meta LoginMeta, p LoginPolicy) (string, Login, error) {
	p = p.WithDefaults()
	secret := loginSecretPrefix + RandomSecret(32)
	now := s.now()
	l := Login{
		ID: loginID(secret), UserID: userID, CSRFSecret: RandomSecret(32),
		UserAgent: clip(meta.UserAgent, 256), Address: clip(meta.Address, 64),
		CreatedAt: NewUTCTime(now), LastSeenAt: NewUTCTime(now), ExpiresAt: NewUTCTime(now.Add(p.Lifetime)),
	}
	if err := s.DB.WithContext(ctx).Create(&l).Error; err != nil {
		return "", Login{}, fmt.Errorf("start login of %s: %w", userID, err)
	}
	if rand.IntN(32) == 0 {
		if _, err := s.PurgeLogins(ctx, p); err != nil && s.Logger != nil {
			s.Logger.Warn("purge ended logins", "err", err)
		}
	}
	return secret, l, nil
}

// PurgeLogins deletes logins that ended more than a day ago (kept that long
// for investigations) and returns how many. Sign-ins call it now and then,
// best effort: a failure only leaves rows for the next time.
func (s *Store) PurgeLogins(ctx context.Context, p LoginPolicy) (int64, error) {
	p = p.WithDefaults()
	now := s.now()
	cutoff := NewUTCTime(now.Add(-24 * time.Hour))
	idle := NewUTCTime(now.Add(-24*time.Hour - p.IdleTimeout))
	res := s.DB.WithContext(ctx).Where("expires_at < "+s.timeParam()+" OR revoked_at < "+s.timeParam()+
		" OR last_seen_at < "+s.timeParam(), cutoff, cutoff, idle).Delete(&Login{})
	if res.Error != nil {
		return 0, fmt.Errorf("purge ended logins: %w", res.Error)
	}
	return res.RowsAffected, nil
}

// ResumeLogin returns the login whose cookie secret this is, with its user,
// when it still holds under p; otherwise an error wrapping ErrLoginEnded
// that says why. It writes last_seen_at only when that is older than
// LoginTouchEvery.
func (s *Store) ResumeLogin(ctx context.Context, secret string, p LoginPolicy) (Login, User, error) {
	p = p.WithDefaults()
	if !strings.HasPrefix(secret, loginSecretPrefix) {
		return Login{}, User{}, loginEnded("not a login secret")
	}
	var ls []Login
	if err := s.DB.WithContext(ctx).Where("id = ?", loginID(secret)).Limit(1).Find(&ls).Error; err != nil {
		return Login{}, User{}, fmt.Errorf("resume login: %w", err)
	}
	if len(ls) == 0 {
		return Login{}, User{}, loginEnded("unknown login")
	}
	l := ls[0]
	now := s.now()
	switch {
	case l.RevokedAt.Valid:
		return Login{}, User{}, loginEnded("revoked")
	case !now.Before(l.ExpiresAt.Time) || !now.Before(l.CreatedAt.Add(p.Lifetime)):
		// The lifetime in force now counts too: shortening it applies to
		// logins made before.
		return Login{}, User{}, loginEnded("lifetime over")
	case now.Sub(l.LastSeenAt.Time) >= p.IdleTimeout:
		return Login{}, User{}, loginEnded("idle")
	}
	u, err := s.GetUser(ctx, l.UserID)
	if err != nil {
		if ErrorCode(err) == ENOTFOUND {
			return Login{}, User{}, loginEnded("user removed")
		}
		return Login{}, User{}, err
	}
	if u.Disabled {
		return Login{}, User{}, loginEnded("user disabled")
	}
	if now.Sub(l.LastSeenAt.Time) >= LoginTouchEvery {
		// Conditional, so that concurrent requests (and replicas) write once.
		seen := NewUTCTime(now)
		err := s.DB.WithContext(ctx).Model(&Login{}).
			Where("id = ? AND last_seen_at <= "+s.timeParam(), l.ID, NewUTCTime(now.Add(-LoginTouchEvery))).
			Update("last_seen_at", seen).Error
		if err != nil {
			return Login{}, User{}, fmt.Errorf("resume login: touch: %w", err)
		}
		l.LastSeenAt = seen
	}
	return l, u, nil
}

// EndLogin revokes the login whose cookie secret this is (logging out). An
// unknown or ended login is not an error: the browser is logged out either
// way.
func (s *Store) EndLogin(ctx context.Context, secret string) error {
	err := s.DB.WithContext(ctx).Model(&Login{}).
		Where("id = ? AND revoked_at IS NULL", loginID(secret)).
		Update("revoked_at", NewUTCTime(s.now())).Error
	if err != nil {
		return fmt.Errorf("end login: %w", err)
	}
	return nil
}

// RevokeUserLogins revokes every login of the user ("sign out everywhere")
// and returns how many were live.
func (s *Store) RevokeUserLogins(ctx context.Context, userID string) (int64, error) {
	return revokeLogins(s.DB.WithContext(ctx), userID, s.now())
}

// revokeLogins revokes every unrevoked login of userID in db (a transaction
// when it goes with a change of the user).
func revokeLogins(db *gorm.DB, userID string, now time.Time) (int64, error) {
	res := db.Model(&Login{}).Where("user_id = ? AND revoked_at IS NULL", userID).
		Update("revoked_at", NewUTCTime(now))
	if res.Error != nil {
		return 0, fmt.Errorf("revoke logins of %s: %w", userID, res.Error)
	}
	return res.RowsAffected, nil
}

// ListUserLogins lists the user's logins that still hold under p, newest
// first.
func (s *Store) ListUserLogins(ctx context.Context, userID string, p LoginPolicy) ([]Login, error) {
	p = p.WithDefaults()
	now := s.now()
	var ls []Login
	err := s.DB.WithContext(ctx).
		Where("user_id = ? AND revoked_at IS NULL AND expires_at > "+s.timeParam()+" AND created_at > "+s.timeParam()+
			" AND last_seen_at > "+s.timeParam(), userID, NewUTCTime(now), NewUTCTime(now.Add(-p.Lifetime)), NewUTCTime(now.Add(-p.IdleTimeout))).
		Order("created_at DESC").Limit(100).Find(&ls).Error
	if err != nil {
		return nil, fmt.Errorf("list logins of %s: %w", userID, err)
	}
	return ls, nil
}

// ChangePasswordInput is a signed-in user's change of their own password.
type ChangePasswordInput struct {
	Current string
	New     string
	Confirm string
}

// ChangePassword replaces the user's password after checking the current
// one and the new one against the policy (field errors current_password,
// new_password, confirm_password). It clears MustChangePassword and revokes
// every login of the user, this browser's too: the caller starts a new one
// for the browser that asked.
func (s *Store) ChangePassword(ctx context.Context, userID string, in ChangePasswordInput) (User, error) {
	u, err := s.GetUser(ctx, userID)
	if err != nil {
		return User{}, err
	}
	v := &ValidationError{}
	if HasNUL(in.Current) || bcrypt.CompareHashAndPassword([]byte(u.PasswordHash), []byte(in.Current)) != nil {
		v.Add("current_password", "is not your current password")
	}
	checkPassword(v, "new_password", in.New, u.Email, u.Name)
	if in.New != "" && in.New == in.Current {
		v.Add("new_password", "must differ from the current password")
	}
	if in.Confirm != in.New {
		v.Add("confirm_password", "does not match the new password")
	}
	if err := v.Err(); err != nil {
		return User{}, err
	}
	return s.setPassword(ctx, u, in.New, false)
}

// setPassword writes u's new password hash, unless the hash changed since u
// was read (a concurrent change wins; this one is a conflict), and revokes
// every login of u in the same transaction.
func (s *Store) setPassword(ctx context.Context, u User, password string, mustChange bool) (User, error) {
	hash, err := bcrypt.GenerateFromPassword([]byte(password), BcryptCost)
	if err != nil {
		return User{}, fmt.Errorf("hash password: %w", err)
	}
	now := s.now()
	err = s.Transact(ctx, func(tx *gorm.DB) error {
		res := tx.Model(&User{}).Where("id = ? AND password_hash = ?", u.ID, u.PasswordHash).
			Updates(map[string]any{"password_hash": string(hash), "must_change_password": mustChange, "updated_at": NewUTCTime(now)})
		if res.Error != nil {
			return fmt.Errorf("set password of %s: %w", u.ID, res.Error)
		}
		if res.RowsAffected == 0 {
			return &ValidationError{Fields: []FieldError{{Field: "password", Message: "was changed by someone else meanwhile; try again"}}}
		}
		_, err := revokeLogins(tx, u.ID, now)
		return err
	})
	if err != nil {
		return User{}, err
	}
	u.PasswordHash, u.MustChangePassword, u.UpdatedAt = string(hash), mustChange, NewUTCTime(now)
	return u, nil
}

// ThrottlePolicy slows password guessing. Failures are counted per
// (account, client address) pair and per client address, never per account
// alone: an attacker's failures from one address must not lock the real
// user, signing in from another, out. Each key has free failures; from the
// last free one on, each failure makes the key wait BaseDelay, doubled per
// further failure, up to Window. A key that stays quiet for Window after its
// wait ends is forgotten, and a successful login forgets its pair.
type ThrottlePolicy struct {
	FreePerPair    int           // default 5
	FreePerAddress int           // default 20: an office shares one address
	Window         time.Duration // default 15 min
	BaseDelay      time.Duration // default 1s
}

// Throttle defaults.
const (
	DefaultLoginFreePerPair    = 5
	DefaultLoginFreePerAddress = 20
	DefaultLoginWindow         = 15 * time.Minute
	DefaultLoginBaseDelay      = time.Second
)

// WithDefaults fills the zero fields.
func (p ThrottlePolicy) WithDefaults() ThrottlePolicy {
	if p.FreePerPair <= 0 {
		p.FreePerPair = DefaultLoginFreePerPair
	}
	if p.FreePerAddress <= 0 {
		p.FreePerAddress = DefaultLoginFreePerAddress
	}
	if p.Window <= 0 {
		p.Window = DefaultLoginWindow
	}
	if p.BaseDelay <= 0 {
		p.BaseDelay = DefaultLoginBaseDelay
	}
	return p
}

// Delay is how long a key must wait after its failures-th failure.
func (p ThrottlePolicy) Delay(failures, free int) time.Duration {
	if failures < free {
		return 0
	}
	d := p.BaseDelay
	for i := free; i < failures && d < p.Window; i++ {
		d *= 2
	}
	return min(d, p.Window)
}

// LoginThrottle is one row of login_throttle.
type LoginThrottle struct {
	Key           string `gorm:"primaryKey"`
	Failures      int
	LastFailureAt UTCTime
	BlockedUntil  UTCTime
}

// TableName pins the table name for GORM.
func (LoginThrottle) TableName() string { return "login_throttle" }

// ThrottleAddress is the part of a client address that throttling counts:
// an IPv6 client usually holds a whole /64, so that is one address.
func ThrottleAddress(addr string) string {
	ip := net.ParseIP(strings.TrimSpace(addr))
	switch {
	case ip == nil:
		return addr
	case ip.To4() != nil:
		return ip.To4().String()
	default:
		return ip.Mask(net.CIDRMask(64, 128)).String() + "/64"
	}
}

type throttleKey struct {
	key  string
	free int
}

// throttleKeys are the hashed keys of a login attempt: hashed so that
// whatever a client sends (a megabyte, NUL) makes a short storable key.
func (p ThrottlePolicy) keys(email, address string) (pair, addr throttleKey) {
	h := func(s string) string {
		sum := sha256.Sum256([]byte(s))
		return hex.EncodeToString(sum[:16])
	}
	address = ThrottleAddress(address)
	email = strings.ToLower(strings.TrimSpace(email))
	return throttleKey{"pair:" + h(email+"\x00"+address), p.FreePerPair},
		throttleKey{"address:" + h(address), p.FreePerAddress}
}

// LoginWait returns how long a login of email from address must still wait
// (0: it may try now).
func (s *Store) LoginWait(ctx context.Context, p ThrottlePolicy, email, address string) (time.Duration, error) {
	p = p.WithDefaults()
	pair, addr := p.keys(email, address)
	var rows []LoginThrottle
	if err := s.DB.WithContext(ctx).Where("key IN ?", []string{pair.key, addr.key}).Find(&rows).Error; err != nil {
		return 0, fmt.Errorf("login throttle: %w", err)
	}
	now := s.now()
	var wait time.Duration
	for _, r := range rows {
		wait = max(wait, r.BlockedUntil.Sub(now))
	}
	return wait, nil
}

// RecordLoginFailure counts a failed login of email from address on both its
// keys, atomically (replicas count together), and returns how long the
// client must now wait.
func (s *Store) RecordLoginFailure(ctx context.Context, p ThrottlePolicy, email, address string) (time.Duration, error) {
	p = p.WithDefaults()
	pair, addr := p.keys(email, address)
	now := s.now()
	var wait time.Duration
	err := s.Transact(ctx, func(tx *gorm.DB) error {
		wait = 0
		for _, k := range []throttleKey{pair, addr} {
			var n int
			// A key quiet for a window since its wait ended starts over.
			q := `INSERT INTO login_throttle (key, failures, last_failure_at, blocked_until) VALUES (?, 1, ?, ?)
				ON CONFLICT (key) DO UPDATE SET
					failures = CASE WHEN login_throttle.blocked_until <= ` + s.timeParam() + ` THEN 1 ELSE login_throttle.failures + 1 END,
					last_failure_at = excluded.last_failure_at
				RETURNING failures`
			if err := tx.Raw(q, k.key, NewUTCTime(now), NewUTCTime(now), NewUTCTime(now.Add(-p.Window))).Scan(&n).Error; err != nil {
				return fmt.Errorf("login throttle: count failure: %w", err)
			}
			d := p.Delay(n, k.free)
			if err := tx.Model(&LoginThrottle{}).Where("key = ?", k.key).
				Update("blocked_until", NewUTCTime(now.Add(d))).Error; err != nil {
				return fmt.Errorf("login throttle: %w", err)
			}
			wait = max(wait, d)
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	if rand.IntN(64) == 0 {
		// Forgotten keys go now and then, so the table stays as small as
		// the recent failures.
		if _, err := s.PurgeLoginThrottle(ctx, p); err != nil && s.Logger != nil {
			s.Logger.Warn("purge login throttle", "err", err)
		}
	}
	return wait, nil
}

// PurgeLoginThrottle deletes the keys that are forgotten (quiet for a window
// since their wait ended) and returns how many.
func (s *Store) PurgeLoginThrottle(ctx context.Context, p ThrottlePolicy) (int64, error) {
	p = p.WithDefaults()
	res := s.DB.WithContext(ctx).Where("blocked_until <= "+s.timeParam(), NewUTCTime(s.now().Add(-p.Window))).Delete(&LoginThrottle{})
	if res.Error != nil {
		return 0, fmt.Errorf("purge login throttle: %w", res.Error)
	}
	return res.RowsAffected, nil
}

// ClearLoginFailures forgets the failures of email from address after a
// successful login. The address's own count stays: one known password must
// not let an address go on guessing others.
func (s *Store) ClearLoginFailures(ctx context.Context, p ThrottlePolicy, email, address string) error {
	pair, _ := p.WithDefaults().keys(email, address)
	if err := s.DB.WithContext(ctx).Where("key = ?", pair.key).Delete(&LoginThrottle{}).Error; err != nil {
		return fmt.Errorf("login throttle: clear: %w", err)
	}
	return nil
}
