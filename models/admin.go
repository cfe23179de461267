package models

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"golang.org/x/crypto/bcrypt"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

// Administration: users, API tokens, verification and the admin audit log.
// Every admin action is recorded in admin_audit with its actor, time and the
// target's before and after; for changes, the change and its audit row
// commit in one transaction, so neither exists without the other.

// Admin actions recorded in the admin audit log.
const (
	AdminUserCreate   = "user.create"
	AdminUserDisable  = "user.disable"
	AdminUserEnable   = "user.enable"
	AdminUserRole     = "user.role"
	AdminUserPassword = "user.reset_password"
	AdminTokenCreate  = "token.create"
	AdminTokenRevoke  = "token.revoke"
	// AdminTokenRename is written only by migration 14, which renamed
	// tokens that shared a name with an older one.
	AdminTokenRename     = "token.rename"
	AdminVerifyStart     = "verify.start"
	AdminVerifyFinish    = "verify.finish"
	AdminAuditExport     = "audit.export"
	AdminTranscript      = "audit.transcript"
	AdminRoutePut        = "route.put"
	AdminRouteDelete     = "route.delete"
	AdminCheckpointWrite = "checkpoint.write"
	adminAuditMaxLimit   = 200
)

// AdminAudit is one admin action. Before and After are JSON (null when the
// target did not exist before, or is not changed by the action).
type AdminAudit struct {
	ID         string `gorm:"primaryKey"`
	Actor      string
	Action     string
	TargetKind string
	TargetID   string
	Before     *string
	After      *string
	CreatedAt  UTCTime
}

// TableName pins the table name for GORM.
func (AdminAudit) TableName() string { return "admin_audit" }

// recordAdmin appends an admin audit row in tx.
func (s *Store) recordAdmin(tx *gorm.DB, actor, action, kind, id string, before, after any) error {
	row, err := s.adminAuditRow(actor, action, kind, id, before, after)
	if err != nil {
		return err
	}
	if err := tx.Create(&row).Error; err != nil {
		return fmt.Errorf("admin audit %s: %w", action, err)
	}
	return nil
}

// adminAuditRow builds an admin audit row, for recordAdmin and for changes
// written through the write path's Tx (step routes).
func (s *Store) adminAuditRow(actor, action, kind, id string, before, after any) (AdminAudit, error) {
	enc := func(v any) (*string, error) {
		if v == nil {
			return nil, nil
		}
		b, err := Canonical(v)
		if err != nil {
			return nil, err
		}
		str := string(b)
		return &str, nil
	}
	row := AdminAudit{ID: NewID("adm"), Actor: actor, Action: action, TargetKind: kind, TargetID: id, CreatedAt: NewUTCTime(s.now())}
	var err error
	if row.Before, err = enc(before); err != nil {
		return AdminAudit{}, fmt.Errorf("admin audit %s: %w", action, err)
	}
	if row.After, err = enc(after); err != nil {
		return AdminAudit{}, fmt.Errorf("admin audit %s: %w", action, err)
	}
	return row, nil
}

// RecordAdminAction records an admin action that changes nothing in the
// database (an export, a verification run).
func (s *Store) RecordAdminAction(ctx context.Context, admin User, action, kind, id string, detail any) error {
	return s.recordAdmin(s.DB.WithContext(ctx), admin.Actor(), action, kind, id, nil, detail)
}

// CLIOperator is the principal of a user or token change made with the
// taskpilots command line, passed where the console passes the logged-in
// admin, so that both go through the same functions and leave the same admin
// log rows. It has no account: whoever can reach the database URL may run
// the CLI, so its authority is checked by the database, not here. Its actor
// is cli:<osUser>, the operating-system account that ran the command.
func CLIOperator(osUser string) User {
	if osUser == "" {
		osUser = "unknown"
	}
	return User{Name: osUser, Role: RoleAdmin, operator: "cli:" + osUser}
}

// requireAdmin re-reads the acting admin inside tx, locked together with
// every enabled admin, so that an admin who was just disabled or demoted can
// no longer act, and two admins cannot demote each other at once. The CLI
// operator (CLIOperator) has no account to re-read.
func (s *Store) requireAdmin(tx *gorm.DB, admin User) error {
	if admin.operator != "" {
		return nil
	}
	q := tx
	if s.Dialect == Postgres {
		q = q.Clauses(clause.Locking{Strength: "UPDATE"})
	}
	var admins []User
	if err := q.Where("role = ? AND disabled = ?", RoleAdmin, false).Order("id").Find(&admins).Error; err != nil {
		return fmt.Errorf("check admin: %w", err)
	}
	for _, a := range admins {
		if a.ID == admin.ID {
			return nil
		}
	}
	return fmt.Errorf("%s is not an enabled admin: %w", admin.Email, ErrForbidden)
}

// UserView is a user as the admin audit records it: never the password hash.
type UserView struct {
	ID       string `json:"id"`
	Email    string `json:"email"`
	Name     string `json:"name"`
	Role     Role   `json:"role"`
	Disabled bool   `json:"disabled"`
}

// View returns the user without secrets.
func (u User) View() UserView {
	return UserView{ID: u.ID, Email: u.Email, Name: u.Name, Role: u.Role, Disabled: u.Disabled}
}

// ListUsers lists every user, by email.
func (s *Store) ListUsers(ctx context.Context) ([]User, error) {
	var us []User
	if err := s.DB.WithContext(ctx).Order("email").Limit(5000).Find(&us).Error; err != nil {
		return nil, fmt.Errorf("list users: %w", err)
	}
	return us, nil
}

// FindUser returns the user with this id, or else with this email (any
// case), for the CLI, which names users as people do.
func (s *Store) FindUser(ctx context.Context, idOrEmail string) (User, error) {
	if HasNUL(idOrEmail) {
		return User{}, &NotFoundError{Kind: "user", ID: idOrEmail}
	}
	var us []User
	err := s.DB.WithContext(ctx).Where("id = ? OR email = ?", idOrEmail, strings.ToLower(strings.TrimSpace(idOrEmail))).
		Order("id").Limit(1).Find(&us).Error
	if err != nil {
		return User{}, fmt.Errorf("find user %s: %w", idOrEmail, err)
	}
	if len(us) == 0 {
		return User{}, &NotFoundError{Kind: "user", ID: idOrEmail}
	}
	return us[0], nil
}

// PasswordMatches reports whether password is u's, for checks that must not
// log anyone in (a disabled user matches too).
func PasswordMatches(u User, password string) bool {
	return bcrypt.CompareHashAndPassword([]byte(u.PasswordHash), []byte(password)) == nil
}

// AdminCreateUser creates a user and audits it, in one transaction. Without
// a password one is generated and returned (shown once, never stored).
func (s *Store) AdminCreateUser(ctx context.Context, admin User, in CreateUserInput) (User, string, error) {
	generated := ""
	if in.Password == "" {
		generated = RandomSecret(15)
		in.Password = generated
	}
	u, err := s.newUser(in)
	if err != nil {
		return User{}, "", err
	}
	err = s.Transact(ctx, func(tx *gorm.DB) error {
		if err := s.requireAdmin(tx, admin); err != nil {
			return err
		}
		if err := insertUser(tx, u); err != nil {
			return err
		}
		return s.recordAdmin(tx, admin.Actor(), AdminUserCreate, "user", u.ID, nil, u.View())
	})
	if err != nil {
		return User{}, "", err
	}
	return u, generated, nil
}

// changeUser locks a user, applies change and audits before and after, in
// one transaction. Admins may not change themselves this way: disabling or
// demoting yourself would lock the last admin out.
func (s *Store) changeUser(ctx context.Context, admin User, id, action string, change func(u *User) (map[string]any, error)) (User, error) {
	var out User
	err := s.Transact(ctx, func(tx *gorm.DB) error {
		if err := s.requireAdmin(tx, admin); err != nil {
			return err
		}
		if id == admin.ID {
			return fmt.Errorf("%s on yourself: ask another admin: %w", action, ErrForbidden)
		}
		q := tx
		if s.Dialect == Postgres {
			q = q.Clauses(clause.Locking{Strength: "UPDATE"})
		}
		var us []User
		if err := q.Where("id = ?", id).Limit(1).Find(&us).Error; err != nil {
			return fmt.Errorf("%s %s: %w", action, id, err)
		}
		if len(us) == 0 {
			return &NotFoundError{Kind: "user", ID: id}
		}
		u := us[0]
		before := u.View()
		cols, err := change(&u)
		if err != nil {
			return err
		}
		u.UpdatedAt = NewUTCTime(s.now())
		cols["updated_at"] = u.UpdatedAt
		if err := tx.Model(&User{}).Where("id = ?", id).Updates(cols).Error; err != nil {
			return fmt.Errorf("%s %s: %w", action, id, err)
		}
		if action == AdminUserDisable || action == AdminUserPassword {
			// In the same transaction: no login outlives the change.
			if _, err := revokeLogins(tx, id, s.now()); err != nil {
				return err
			}
		}
		after := any(u.View())
		if action == AdminUserPassword {
			// The audit says that the password changed, never what it is.
			after = map[string]any{"user": u.View(), "password": "reset"}
		}
		out = u
		return s.recordAdmin(tx, admin.Actor(), action, "user", id, before, after)
	})
	return out, err
}

// SetUserDisabled disables or enables a user. A disabled user cannot log in,
// and every login of theirs is revoked: enabling them again does not bring
// an old login back.
func (s *Store) SetUserDisabled(ctx context.Context, admin User, id string, disabled bool) (User, error) {
	action := AdminUserEnable
	if disabled {
		action = AdminUserDisable
	}
	return s.changeUser(ctx, admin, id, action, func(u *User) (map[string]any, error) {
		u.Disabled = disabled
		return map[string]any{"disabled": disabled}, nil
	})
}

// SetUserRole changes a user's role.
func (s *Store) SetUserRole(ctx context.Context, admin User, id string, role Role) (User, error) {
	if !roleIn(role, UserRoles) {
		return User{}, &ValidationError{Fields: []FieldError{{Field: "role", Message: "must be one of agent, reviewer, admin"}}}
	}
	return s.changeUser(ctx, admin, id, AdminUserRole, func(u *User) (map[string]any, error) {
		u.Role = role
		return map[string]any{"role": role}, nil
	})
}

// ResetPassword gives a user a new generated password and returns it; it is
// not stored and cannot be shown again. Every login of the user is revoked,
// and since the admin saw the password, the user must choose their own at
// the next sign-in.
func (s *Store) ResetPassword(ctx context.Context, admin User, id string) (string, User, error) {
	password := RandomSecret(15)
	if err := CheckPassword("password", password); err != nil {
		return "", User{}, fmt.Errorf("generated password: %w", err)
	}
	hash, err := bcrypt.GenerateFromPassword([]byte(password), BcryptCost)
	if err != nil {
		return "", User{}, fmt.Errorf("hash password: %w", err)
	}
	u, err := s.changeUser(ctx, admin, id, AdminUserPassword, func(u *User) (map[string]any, error) {
		u.PasswordHash, u.MustChangePassword = string(hash), true
		return map[string]any{"password_hash": string(hash), "must_change_password": true}, nil
	})
	if err != nil {
		return "", User{}, err
	}
	return password, u, nil
}

// TokenView is a token as the admin audit records it: never its hash.
type TokenView struct {
	ID        string     `json:"id"`
	Name      string     `json:"name"`
	Role      Role       `json:"role"`
	RevokedAt *time.Time `json:"revoked_at"`
}

// View returns the token without its hash.
func (t APIToken) View() TokenView {
	return TokenView{ID: t.ID, Name: t.Name, Role: t.Role, RevokedAt: t.RevokedAt.Ptr()}
}

// AdminCreateToken creates an API token and audits it, in one transaction,
// and returns the secret, which is shown once and never stored.
func (s *Store) AdminCreateToken(ctx context.Context, admin User, name string, role Role) (string, APIToken, error) {
	secret, t, err := s.newToken(name, role)
	if err != nil {
		return "", APIToken{}, err
	}
	err = s.Transact(ctx, func(tx *gorm.DB) error {
		if err := s.requireAdmin(tx, admin); err != nil {
			return err
		}
		if err := insertToken(tx, t); err != nil {
			return err
		}
		return s.recordAdmin(tx, admin.Actor(), AdminTokenCreate, "token", t.ID, nil, t.View())
	})
	if err != nil {
		return "", APIToken{}, err
	}
	return secret, t, nil
}

// AdminRevokeToken revokes one token by id, or else by its (unique) name,
// and audits it, in one transaction. Revoking a revoked token changes
// nothing, records nothing and is not an error.
func (s *Store) AdminRevokeToken(ctx context.Context, admin User, idOrName string) (APIToken, error) {
	var out APIToken
	err := s.Transact(ctx, func(tx *gorm.DB) error {
		if err := s.requireAdmin(tx, admin); err != nil {
			return err
		}
		find := func(col string) ([]APIToken, error) {
			q := tx
			if s.Dialect == Postgres {
				q = q.Clauses(clause.Locking{Strength: "UPDATE"})
			}
			var ts []APIToken
			if err := q.Where(col+" = ?", idOrName).Limit(1).Find(&ts).Error; err != nil {
				return nil, fmt.Errorf("revoke token %s: %w", idOrName, err)
			}
			return ts, nil
		}
		if HasNUL(idOrName) {
			return &NotFoundError{Kind: "token", ID: idOrName}
		}
		// By id first: a name may look like another token's id.
		ts, err := find("id")
		if err == nil && len(ts) == 0 {
			ts, err = find("name")
		}
		if err != nil {
			return err
		}
		if len(ts) == 0 {
			return &NotFoundError{Kind: "token", ID: idOrName}
		}
		t := ts[0]
		id := t.ID
		out = t
		if t.RevokedAt.Valid {
			return nil
		}
		before := t.View()
		t.RevokedAt = SomeTime(s.now())
		s.tokens.forget()
		if err := tx.Model(&APIToken{}).Where("id = ?", id).Update("revoked_at", t.RevokedAt).Error; err != nil {
			return fmt.Errorf("revoke token %s: %w", id, err)
		}
		out = t
		return s.recordAdmin(tx, admin.Actor(), AdminTokenRevoke, "token", id, before, t.View())
	})
	return out, err
}

// AdminAuditOpts selects a page of the admin audit log, newest first.
type AdminAuditOpts struct {
	Before string
	Limit  int
}

// AdminAuditPage is one page of the admin audit log.
type AdminAuditPage struct {
	Rows []AdminAudit
	Next string
}

// ListAdminAudit returns a page of the admin audit log, newest first, by
// keyset over (created_at, id).
func (s *Store) ListAdminAudit(ctx context.Context, o AdminAuditOpts) (AdminAuditPage, error) {
	if o.Limit <= 0 || o.Limit > adminAuditMaxLimit {
		o.Limit = 50
	}
	q := s.read(ctx).Model(&AdminAudit{})
	if o.Before != "" {
		var k auditKey
		if err := decodeCursor(o.Before, &k); err != nil || k.ID == "" {
			return AdminAuditPage{}, &ValidationError{Fields: []FieldError{{Field: "before", Message: "is not a cursor of the admin log"}}}
		}
		q = q.Where("(created_at, id) < ("+s.timeParam()+", ?)", k.CreatedAt, k.ID)
	}
	var rows []AdminAudit
	if err := q.Order("created_at DESC, id DESC").Limit(o.Limit + 1).Find(&rows).Error; err != nil {
		return AdminAuditPage{}, fmt.Errorf("admin audit: %w", err)
	}
	p := AdminAuditPage{Rows: rows}
	if len(rows) > o.Limit {
		p.Rows = rows[:o.Limit]
		last := p.Rows[o.Limit-1]
		p.Next = encodeCursor(auditKey{CreatedAt: last.CreatedAt, ID: last.ID})
	}
	return p, nil
}

// VerifyRun is the state of the console's verification run.
type VerifyRun struct {
	Running    bool
	StartedBy  string
	StartedAt  time.Time
	FinishedAt time.Time
	Done       int64
	Total      int64
	Report     *VerifyReport
	Err        string
}

// BrokenChains are the problems that mean the log itself was altered: a hash
// that does not match, a broken prev_hash link, a gap in seq.
func (r VerifyRun) BrokenChains() []Problem {
	return r.problems(ProblemHash, ProblemChain, ProblemSeq)
}

// ReplayMismatches are the problems where replaying the log does not give
// the stored state.
func (r VerifyRun) ReplayMismatches() []Problem {
	return r.problems(ProblemReplay, ProblemProjection)
}

func (r VerifyRun) problems(kinds ...string) []Problem {
	if r.Report == nil {
		return nil
	}
	var out []Problem
	for _, p := range r.Report.Problems {
		for _, k := range kinds {
			if p.Kind == k {
				out = append(out, p)
				break
			}
		}
	}
	return out
}

// CheckpointProblems are the problems where the log no longer holds what a
// signed checkpoint recorded, or a checkpoint itself was changed.
func (r VerifyRun) CheckpointProblems() []Problem {
	return r.problems(ProblemCheckpoint, ProblemMissing, ProblemTruncated, ProblemRewritten)
}

// Verifier runs Store.Verify in the background for the console, one run at a
// time per process, and keeps the last run's progress and report.
type Verifier struct {
	Store *Store
	Log   *slog.Logger
	// PublicKeys are the checkpoint keys trusted by the checkpoint checks
	// (the server's own key); empty: the keys recorded in the database.
	PublicKeys []string
	// Timeout bounds a run; default one hour.
	Timeout time.Duration

	mu   sync.Mutex
	run  VerifyRun
	done chan struct{}
}

// Status returns the current or last run.
func (v *Verifier) Status() VerifyRun {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.run
}

// Start begins a run as admin unless one is running; it reports whether it
// started one. The start and the result are recorded in the admin audit log.
func (v *Verifier) Start(ctx context.Context, admin User) (bool, error) {
	v.mu.Lock()
	if v.run.Running {
		v.mu.Unlock()
		return false, nil
	}
	if err := v.Store.RecordAdminAction(ctx, admin, AdminVerifyStart, "events", "", nil); err != nil {
		v.mu.Unlock()
		return false, err
	}
	v.run = VerifyRun{Running: true, StartedBy: admin.Actor(), StartedAt: v.Store.now()}
	done := make(chan struct{})
	v.done = done
	v.mu.Unlock()

	timeout := v.Timeout
	if timeout <= 0 {
		timeout = time.Hour
	}
	go func() {
		defer close(done)
		// The run outlives the request that started it.
		rctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		rep, err := v.Store.Verify(rctx, VerifyOpts{Progress: func(d, t int64) {
			v.mu.Lock()
			v.run.Done, v.run.Total = d, t
			v.mu.Unlock()
		}, Checkpoints: &CheckpointVerifyOpts{PublicKeys: v.PublicKeys}})
		v.mu.Lock()
		v.run.Running = false
		v.run.FinishedAt = v.Store.now()
		v.run.Report = &rep
		if err != nil {
			v.run.Err = err.Error()
		}
		v.mu.Unlock()
		summary := map[string]any{"sessions": rep.Sessions, "events": rep.Events, "problems": len(rep.Problems)}
		if err != nil {
			summary["error"] = err.Error()
		}
		actx, acancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer acancel()
		if aerr := v.Store.RecordAdminAction(actx, admin, AdminVerifyFinish, "events", "", summary); aerr != nil && v.Log != nil {
			v.Log.Error("record verify result", "err", aerr)
		}
		if err != nil && v.Log != nil {
			v.Log.Error("verify run failed", "err", err)
		}
	}()
	return true, nil
}

// Wait blocks until the current run (if any) has finished or ctx is done.
func (v *Verifier) Wait(ctx context.Context) error {
	v.mu.Lock()
	done := v.done
	v.mu.Unlock()
	if done == nil {
		return nil
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// MetricsTrend computes the product metrics of o's window split into n
// buckets, oldest first, with the definitions of ProductMetrics, so the
// dashboard's charts use exactly those of the API. The buckets are equal
// but for their boundaries inside the window, which are moved back to the
// hour when buckets are an hour or longer: then only the first and the
// last bucket have a partial hour, the others read the rollups only.
func (s *Store) MetricsTrend(ctx context.Context, o MetricsOpts, n int) ([]ProductMetrics, error) {
	_, trend, err := s.metricsTrend(ctx, o, n, false)
	return trend, err
}

// MetricsDashboard computes ProductMetrics(o) (all queues, or o.Queue's)
// and MetricsTrend(o, n) in one go: the figures that are not windowed once
// (one statement), and the window and its buckets with shared reads
// (windowsMetrics), so that each partial hour at the window's ends is
// folded once and the statements of a request do not grow with n.
func (s *Store) MetricsDashboard(ctx context.Context, o MetricsOpts, n int) (ProductMetrics, []ProductMetrics, error) {
	return s.metricsTrend(ctx, o, n, true)
}

// metricsTrend computes the buckets of MetricsTrend and, with total, the
// whole window for every queue first; every window carries the figures
// that are not windowed, read once.
func (s *Store) metricsTrend(ctx context.Context, o MetricsOpts, n int, total bool) (ProductMetrics, []ProductMetrics, error) {
	if err := o.Validate(); err != nil {
		return ProductMetrics{}, nil, err
	}
	if n < 1 {
		n = 1
	}
	step := o.To.Sub(o.From) / time.Duration(n)
	bound := func(i int) time.Time {
		switch {
		case i == 0:
			return o.From
		case i == n:
			return o.To
		case step >= time.Hour:
			return o.From.Add(time.Duration(i) * step).Truncate(time.Hour)
		}
		return o.From.Add(time.Duration(i) * step)
	}
	wins := make([]MetricsOpts, 0, n+1)
	if total {
		all := o
		all.Queue = ""
		wins = append(wins, all)
	}
	for i := 0; i < n; i++ {
		b := o
		b.From, b.To = bound(i), bound(i+1)
		wins = append(wins, b)
	}
	pms, err := s.windowsMetrics(ctx, wins)
	if err != nil {
		return ProductMetrics{}, nil, err
	}
	var now ProductMetrics
	if err := s.nowStats(ctx, &now); err != nil {
		return ProductMetrics{}, nil, err
	}
	for i := range pms {
		pms[i].SLA, pms[i].Stalled = now.SLA, now.Stalled
	}
	if total {
		return pms[0], pms[1:], nil
	}
	return now, pms, nil
}

// adminLater queues the admin audit row of a change made in tx, so that it
// commits with the change (routes and webhooks use it).
func (s *Store) adminLater(tx *Tx, actor, action, kind, id string, before, after any) error {
	a, err := s.adminAuditRow(actor, action, kind, id, before, after)
	if err != nil {
		return err
	}
	tx.Later(failWith("admin audit %s", action),
		`INSERT INTO admin_audit (id, actor, action, target_kind, target_id, before, after, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
		a.ID, a.Actor, a.Action, a.TargetKind, a.TargetID, a.Before, a.After, a.CreatedAt)
	return nil
}
