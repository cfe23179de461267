package models

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/mail"
	"strings"
	"sync"
	"time"

	"golang.org/x/crypto/bcrypt"
	"gorm.io/gorm"
)

// Role is what a user or an API token may do.
type Role string

// Console roles (users) and API roles (tokens). Admin is both.
const (
	RoleAgent      Role = "agent"
	RoleReviewer   Role = "reviewer"
	RoleAdmin      Role = "admin"
	RoleController Role = "controller"
	RoleWorker     Role = "worker"
)

// UserRoles and TokenRoles list the roles each kind of principal may hold.
var (
	UserRoles  = []Role{RoleAgent, RoleReviewer, RoleAdmin}
	TokenRoles = []Role{RoleController, RoleWorker, RoleAdmin}
)

func roleIn(r Role, rs []Role) bool {
	for _, x := range rs {
		if x == r {
			return true
		}
	}
	return false
}

// User is a console login.
type User struct {
	ID           string `gorm:"primaryKey"`
	Email        string
	Name         string
	Role         Role
	PasswordHash string
	Disabled     bool
	// MustChangePassword is set when someone else saw the password (the
	// generated first admin's, an admin's reset): every console page sends
	// the user to change it until they do.
	MustChangePassword bool
	// TimeZone is the IANA zone the user chose ("" = none): the fallback
	// for times rendered without the browser's zone (timezone.go).
	TimeZone  string
	CreatedAt UTCTime
	UpdatedAt UTCTime
	// operator is set only by CLIOperator: the person at the command line,
	// who has no account (see admin.go).
	operator string `gorm:"-"`
}

// TableName pins the table name for GORM.
func (User) TableName() string { return "users" }

// Actor is how the user appears in events and in the admin log.
func (u User) Actor() string {
	if u.operator != "" {
		return u.operator
	}
	return "user:" + u.ID
}

// CreateUserInput creates a console user.
type CreateUserInput struct {
	Email    string
	Name     string
	Role     Role
	Password string
}

// Validate lists every problem with the input.
func (in CreateUserInput) Validate() error {
	v := &ValidationError{}
	CheckNUL(v, "", in) // every text field; see NULMessage
	if a, err := mail.ParseAddress(in.Email); err != nil || a.Address != strings.TrimSpace(in.Email) {
		v.Add("email", "must be an email address")
	}
	if strings.TrimSpace(in.Name) == "" {
		v.Add("name", "is required")
	}
	if !roleIn(in.Role, UserRoles) {
		v.Add("role", "must be one of agent, reviewer, admin")
	}
	if !HasNUL(in.Password) { // CheckNUL said it already
		checkPassword(v, "password", in.Password, in.Email, in.Name)
	}
	return v.Err()
}

// BcryptCost is the cost of password hashes; tests lower it.
var BcryptCost = bcrypt.DefaultCost

// CreateUser creates a user with a bcrypt-hashed password. It records
// nothing in the admin log: it is for bootstrapping (the first admin, the
// demo accounts) and tests. A person's change goes through AdminCreateUser,
// from the console and the CLI alike.
func (s *Store) CreateUser(ctx context.Context, in CreateUserInput) (User, error) {
	u, err := s.newUser(in)
	if err != nil {
		return User{}, err
	}
	if err := insertUser(s.DB.WithContext(ctx), u); err != nil {
		return User{}, err
	}
	return u, nil
}

// newUser normalises and validates in and builds the user row with a
// bcrypt-hashed password; it writes nothing.
func (s *Store) newUser(in CreateUserInput) (User, error) {
	in.Email = strings.ToLower(strings.TrimSpace(in.Email))
	in.Name = strings.TrimSpace(in.Name)
	if err := in.Validate(); err != nil {
		return User{}, err
	}
	hash, err := bcrypt.GenerateFromPassword([]byte(in.Password), BcryptCost)
	if err != nil {
		return User{}, fmt.Errorf("hash password: %w", err)
	}
	now := NewUTCTime(s.now())
	return User{ID: NewID("usr"), Email: in.Email, Name: in.Name, Role: in.Role,
		PasswordHash: string(hash), CreatedAt: now, UpdatedAt: now}, nil
}

// insertUser writes u, reporting a taken email as a field error.
func insertUser(db *gorm.DB, u User) error {
	if err := db.Create(&u).Error; err != nil {
		if isUniqueViolation(err) {
			return &ValidationError{Fields: []FieldError{{Field: "email", Message: "is already taken"}}}
		}
		return fmt.Errorf("create user %s: %w", u.Email, err)
	}
	return nil
}

// ErrBadCredentials is a failed login; it does not say which part was wrong.
var ErrBadCredentials = fmt.Errorf("%w: wrong email or password", ErrUnauthorized)

// dummyHash keeps a login for an unknown email as slow as for a known one:
// made at first use, at the cost real hashes are made with (BcryptCost).
var dummyHash = sync.OnceValue(func() []byte {
	h, _ := bcrypt.GenerateFromPassword([]byte("timing-equaliser"), BcryptCost)
	return h
})

// Authenticate checks an email and password.
func (s *Store) Authenticate(ctx context.Context, email, password string) (User, error) {
	if HasNUL(email) {
		// No account has such an email (CreateUserInput refuses NUL), and
		// PostgreSQL cannot compare it: a failed login like any other.
		_ = bcrypt.CompareHashAndPassword(dummyHash(), []byte(password))
		return User{}, ErrBadCredentials
	}
	var users []User
	if err := s.DB.WithContext(ctx).Where("email = ?", strings.ToLower(strings.TrimSpace(email))).Limit(1).Find(&users).Error; err != nil {
		return User{}, fmt.Errorf("authenticate: %w", err)
	}
	if len(users) == 0 {
		_ = bcrypt.CompareHashAndPassword(dummyHash(), []byte(password))
		return User{}, ErrBadCredentials
	}
	u := users[0]
	if err := bcrypt.CompareHashAndPassword([]byte(u.PasswordHash), []byte(password)); err != nil {
		return User{}, ErrBadCredentials
	}
	if u.Disabled {
		return User{}, fmt.Errorf("%w: account disabled", ErrUnauthorized)
	}
	return u, nil
}

// GetUser returns a user by id.
func (s *Store) GetUser(ctx context.Context, id string) (User, error) {
	var users []User
	if err := s.DB.WithContext(ctx).Where("id = ?", id).Limit(1).Find(&users).Error; err != nil {
		return User{}, fmt.Errorf("user %s: %w", id, err)
	}
	if len(users) == 0 {
		return User{}, &NotFoundError{Kind: "user", ID: id}
	}
	return users[0], nil
}

// CountUsers returns the number of users.
func (s *Store) CountUsers(ctx context.Context) (int64, error) {
	var n int64
	err := s.DB.WithContext(ctx).Model(&User{}).Count(&n).Error
	return n, err
}

// RandomSecret returns n random bytes, base64url-encoded.
func RandomSecret(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

// APIToken is a bearer token for the JSON API. Only the SHA-256 of the
// secret is stored; the secret is shown once, at creation.
type APIToken struct {
	ID         string `gorm:"primaryKey"`
	Name       string
	Role       Role
	TokenHash  string
	CreatedAt  UTCTime
	LastUsedAt NullTime
	RevokedAt  NullTime
}

// TableName pins the table name for GORM.
func (APIToken) TableName() string { return "api_tokens" }

// Actor is how the token appears in events.
func (t APIToken) Actor() string { return "token:" + t.Name }

// TokenPrefix starts every API token secret, so leaked tokens are findable.
const TokenPrefix = "tpk_"

func hashToken(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

// CreateToken creates an API token and returns its secret, which is not
// stored and cannot be shown again. Like CreateUser it records nothing in
// the admin log (tests, tools that make their own short-lived tokens);
// people create tokens through AdminCreateToken.
func (s *Store) CreateToken(ctx context.Context, name string, role Role) (string, APIToken, error) {
	secret, t, err := s.newToken(name, role)
	if err != nil {
		return "", APIToken{}, err
	}
	if err := insertToken(s.DB.WithContext(ctx), t); err != nil {
		return "", APIToken{}, err
	}
	return secret, t, nil
}

// TokenNameTaken is the field message for a token name in use. Names are
// unique among all tokens, revoked ones included (migration 14), because the
// name is the token's actor in events: a reused name would blur the history.
const TokenNameTaken = "is already used by another token (revoked ones included): a token's name is its actor in events, so pick another"

// insertToken writes t, reporting a taken name as a field error.
func insertToken(db *gorm.DB, t APIToken) error {
	if err := db.Create(&t).Error; err != nil {
		if isUniqueViolationOn(err, "api_tokens_name_key", "api_tokens.name") {
			return &ValidationError{Fields: []FieldError{{Field: "name", Message: TokenNameTaken}}}
		}
		return fmt.Errorf("create token %s: %w", t.Name, err)
	}
	return nil
}

// newToken validates a token's name and role and builds its row and secret;
// it writes nothing.
func (s *Store) newToken(name string, role Role) (string, APIToken, error) {
	v := &ValidationError{}
	name = strings.TrimSpace(name)
	if !namePattern.MatchString(name) {
		v.Add("name", "must be 1-64 letters, digits, '.', '_' or '-'")
	}
	if !roleIn(role, TokenRoles) {
		v.Add("role", "must be one of controller, worker, admin")
	}
	if err := v.Err(); err != nil {
		return "", APIToken{}, err
	}
	secret := TokenPrefix + RandomSecret(32)
	t := APIToken{ID: NewID("tok"), Name: name, Role: role, TokenHash: hashToken(secret), CreatedAt: NewUTCTime(s.now())}
	return secret, t, nil
}

// ListTokens lists tokens, newest first.
func (s *Store) ListTokens(ctx context.Context) ([]APIToken, error) {
	var ts []APIToken
	if err := s.DB.WithContext(ctx).Order("created_at DESC, id DESC").Find(&ts).Error; err != nil {
		return nil, fmt.Errorf("list tokens: %w", err)
	}
	return ts, nil
}

// AuthenticateToken returns the unrevoked token whose secret this is.
func (s *Store) AuthenticateToken(ctx context.Context, secret string) (APIToken, error) {
	if !strings.HasPrefix(secret, TokenPrefix) {
		return APIToken{}, ErrUnauthorized
	}
	hash := hashToken(secret)
	now := time.Now()
	if t, ok := s.tokens.get(hash, now); ok {
		s.touchToken(ctx, t)
		return t, nil
	}
	var ts []APIToken
	if err := s.DB.WithContext(ctx).Where("token_hash = ? AND revoked_at IS NULL", hash).Limit(1).Find(&ts).Error; err != nil {
		return APIToken{}, fmt.Errorf("authenticate token: %w", err)
	}
	if len(ts) == 0 {
		return APIToken{}, ErrUnauthorized
	}
	s.tokens.put(hash, ts[0], now)
	s.touchToken(ctx, ts[0])
	return ts[0], nil
}

// LastUsedGranularity is how stale api_tokens.last_used_at may be: a token
// in use has it written at most once per this period, so that a busy worker
// making hundreds of calls a second costs one UPDATE a minute, not one a call.
const LastUsedGranularity = time.Minute

// touchToken records that t just authenticated, at most once per
// LastUsedGranularity: each process remembers when it last wrote each token,
// and the UPDATE's condition keeps replicas from writing within the period
// of each other. It is bookkeeping: a failure is logged, and the request it
// belongs to goes on.
func (s *Store) touchToken(ctx context.Context, t APIToken) {
	now := NewUTCTime(s.now())
	if !s.tokens.dueTouch(t.ID, now.Time) {
		return
	}
	err := s.DB.WithContext(ctx).Model(&APIToken{}).
		Where("id = ? AND (last_used_at IS NULL OR last_used_at <= "+s.timeParam()+")", t.ID, NewUTCTime(now.Add(-LastUsedGranularity))).
		Update("last_used_at", now).Error
	if err != nil && s.Logger != nil && ctx.Err() == nil {
		s.Logger.Warn("record token use", "token", t.Name, "err", err)
	}
}

// EnsureAdmin creates an admin user when there are no users at all, and
// returns its email and password (shown once); ok is false when users exist.
// The admin must change the password at the first sign-in.
func (s *Store) EnsureAdmin(ctx context.Context) (email, password string, ok bool, err error) {
	n, err := s.CountUsers(ctx)
	if err != nil || n > 0 {
		return "", "", false, err
	}
	password = RandomSecret(15)
	u, err := s.newUser(CreateUserInput{Email: "admin@localhost.localdomain", Name: "Admin", Role: RoleAdmin, Password: password})
	if err == nil {
		// The password went through a terminal, maybe a log collector:
		// the admin replaces it at the first sign-in.
		u.MustChangePassword = true
		err = insertUser(s.DB.WithContext(ctx), u)
	}
	if err != nil {
		var ve *ValidationError
		if errors.As(err, &ve) {
			// Another process created it first.
			return "", "", false, nil
		}
		return "", "", false, err
	}
	return "admin@localhost.localdomain", password, true, nil
}

// TokenCacheTTL is how long an authenticated API token is remembered by a
// server process. Revoking through this process takes effect at once; a
// revocation by another process (the CLI, another replica) within this time.
const TokenCacheTTL = 2 * time.Second

// tokenCache spares the token lookup on every API call of a busy worker,
// and remembers when each token's last_used_at was last written.
type tokenCache struct {
	mu      sync.Mutex
	entries map[string]tokenEntry
	touched map[string]time.Time // token id → when this process last wrote last_used_at
}

type tokenEntry struct {
	tok     APIToken
	expires time.Time
}

func (c *tokenCache) get(hash string, now time.Time) (APIToken, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[hash]
	if !ok || now.After(e.expires) {
		return APIToken{}, false
	}
	return e.tok, true
}

func (c *tokenCache) put(hash string, t APIToken, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.entries == nil || len(c.entries) > 10000 {
		c.entries = make(map[string]tokenEntry)
	}
	c.entries[hash] = tokenEntry{tok: t, expires: now.Add(TokenCacheTTL)}
}

// dueTouch reports whether token id's last_used_at is due to be written at
// now, and if so marks it written, so that concurrent calls write it once.
func (c *tokenCache) dueTouch(id string, now time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if last, ok := c.touched[id]; ok && now.Sub(last) < LastUsedGranularity && !now.Before(last) {
		return false
	}
	if c.touched == nil || len(c.touched) > 10000 {
		c.touched = make(map[string]time.Time)
	}
	c.touched[id] = now
	return true
}

// forget drops every cached token, after a revocation.
func (c *tokenCache) forget() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.entries = nil
}
