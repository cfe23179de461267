package models

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"hash/crc64"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/glebarez/sqlite"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/taskpilots/handoff/migrations"
)

// Dialect is the database engine behind a Store.
type Dialect string

// The supported dialects.
const (
	Postgres Dialect = "postgres"
	SQLite   Dialect = "sqlite"
)

// DefaultDatabaseURL is the zero-setup embedded database.
const DefaultDatabaseURL = "./data/taskpilots.db"

// Store owns all database access: every read and write of the domain goes
// through its methods. It is safe for concurrent use.
type Store struct {
	DB      *gorm.DB
	Dialect Dialect
	// Now is the clock; tests replace it to move time without sleeping.
	Now    func() time.Time
	Logger *slog.Logger
	// Wake is signalled after commits that make work available, so that long
	// polls in this process return at once. PostgreSQL listeners feed it too.
	Wake *Broker
	// LeaseRecheck is how often a waiting lease long poll looks at its
	// queue again when nothing woke it; 0 means DefaultLeaseRecheck. Set it
	// before serving.
	LeaseRecheck time.Duration
	// SLA is the escalation SLA per priority; nil means DefaultSLAPolicy.
	SLA SLAPolicy
	// Reviews is the review policy: the write path adds a decided
	// escalation to the review queue with it (the zero value is the
	// default policy).
	Reviews ReviewPolicy
	// Retention is how long the maintenance pass keeps idempotency keys
	// and rejection counters (the zero value: the defaults).
	Retention RetentionPolicy
	// Observer, if set, hears about committed and rejected writes.
	Observer Observer
	url      string
	notices  announcer
	feed     feedState
	tokens   tokenCache
	// pool is the PostgreSQL connection pool (nil on SQLite); DB reads
	// through it too.
	pool *pgxpool.Pool
	wire wireStats
	// groups is group commit's state (group.go).
	groups groupCommit
	trace  *poolTrace // nil on SQLite
	maint  maintState
	// replica is the read replica (nil: every read goes to the primary).
	replica *replica
	// foldChunkOverride, when set (tests only), is how many sessions one statement
	// of the metrics fold reads instead of foldChunkSize.
	foldChunkOverride int
	// rollupHook, when set (tests only), hears about every metric rollup
	// pass of RunMaintenance.
	rollupHook func(MetricRollupPass, error)
	// metricsPlanHook, when set (tests only), runs after a metrics request
	// has read the rollup state and planned its windows.
	metricsPlanHook func()
	// bulkHook, when set (tests only), runs before each session of a bulk
	// is written, so a test can change the session in between.
	bulkHook func(sessionID string)
	// inboxFacetRows, when set (tests only), replaces MaxInboxFacetRows,
	// so a test can run the inbox counts' bounded path on a small inbox.
	inboxFacetRows int
}

// OpenOpts configures Open.
type OpenOpts struct {
	Logger *slog.Logger
	// MaxOpenConns is the PostgreSQL pool size; Open fails with a
	// PoolFitError when Replicas such pools do not fit in the server's
	// max_connections. Zero derives it (see FitPool): WantConns, or
	// DefaultPoolSize, lowered to this process's share of the server.
	MaxOpenConns int
	WantConns    int
	// Replicas is how many processes share the database (default 1).
	Replicas int
	// ReadURL, if set, is a PostgreSQL streaming-replication standby of
	// the database that request reads may use (replica.go). PostgreSQL
	// only: with SQLite it is ErrReadReplicaDialect.
	ReadURL string
	// GroupCommit turns on group commit of concurrent writes (group.go)
	// with GroupLanes lanes (0: DefaultGroupLanes). PostgreSQL only.
	GroupCommit bool
	GroupLanes  int
}

// ParseDatabaseURL tells the dialect of a database URL and the DSN for its
// driver: postgres:// or postgresql:// URLs, or a SQLite file given as
// "sqlite:PATH" or a path ending in ".db".
func ParseDatabaseURL(url string) (Dialect, string, error) {
	switch {
	case strings.HasPrefix(url, "postgres://"), strings.HasPrefix(url, "postgresql://"):
		return Postgres, url, nil
	case strings.HasPrefix(url, "sqlite:"):
		return SQLite, strings.TrimPrefix(strings.TrimPrefix(url, "sqlite:"), "//"), nil
	case strings.HasSuffix(url, ".db"):
		return SQLite, url, nil
	}
	return "", "", fmt.Errorf("database url %q: want postgres://…, sqlite:PATH or a path ending in .db", RedactDatabaseURL(url))
}

// sqliteFileMode is the mode of the SQLite database and its -wal and -shm
// files: they hold every session, user and token hash, so only the owner may
// read them. Their directory is created owner-only too.
const (
	sqliteFileMode = 0o600
	sqliteDirMode  = 0o700
)

// prepareSQLiteFile creates the database file's directory (owner-only) and
// the file itself with sqliteFileMode, before SQLite opens it: SQLite
// creates a new file with the process umask (0644 as a rule) and gives its
// -wal and -shm files the database file's mode. An existing file, and
// -wal/-shm files left by an earlier run, are tightened to sqliteFileMode.
// An existing directory is left alone: it may be shared (the working
// directory, /var/lib) and is not ours to change.
func prepareSQLiteFile(path string) error {
	if dir := filepath.Dir(path); dir != "" && dir != "." {
		if err := os.MkdirAll(dir, sqliteDirMode); err != nil {
			return fmt.Errorf("create database directory %s: %w", dir, err)
		}
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, sqliteFileMode)
	if err != nil {
		return fmt.Errorf("create database file %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("create database file %s: %w", path, err)
	}
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		if err := os.Chmod(p, sqliteFileMode); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("restrict database file %s to its owner: %w", p, err)
		}
	}
	return nil
}

// Open connects to the database named by url. It does not migrate.
func Open(ctx context.Context, url string, opts OpenOpts) (*Store, error) {
	dialect, dsn, err := ParseDatabaseURL(url)
	if err != nil {
		return nil, err
	}
	if opts.ReadURL != "" {
		if d, _, rerr := ParseDatabaseURL(opts.ReadURL); rerr != nil || d != Postgres || dialect != Postgres {
			return nil, ErrReadReplicaDialect
		}
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	cfg := &gorm.Config{
		SkipDefaultTransaction: true,
		Logger:                 logger.Default.LogMode(logger.Silent),
		NowFunc:                func() time.Time { return time.Now().UTC() },
	}
	var (
		db    *gorm.DB
		pool  *pgxpool.Pool
		trace *poolTrace
	)
	switch dialect {
	case Postgres:
		// One pgx pool serves both the write path, which drives pgx
		// directly (Tx), and GORM's reads, through database/sql on top.
		pcfg, perr := pgxpool.ParseConfig(dsn)
		if perr != nil {
			return nil, fmt.Errorf("database url: %w", perr)
		}
		// The pool size depends on what the server allows, read once here.
		server, serr := readServerConns(ctx, pcfg.ConnConfig)
		if serr != nil {
			return nil, fmt.Errorf("connect to %s database: %w", dialect, serr)
		}
		size, ferr := FitPool(server, opts.Replicas, opts.MaxOpenConns, opts.WantConns)
		if ferr != nil {
			return nil, ferr
		}
		pcfg.MaxConns = int32(size)
		pcfg.MaxConnIdleTime = 5 * time.Minute
		trace = &poolTrace{}
		pcfg.ConnConfig.Tracer = trace
		if pool, err = pgxpool.NewWithConfig(ctx, pcfg); err != nil {
			return nil, fmt.Errorf("open %s database: %w", dialect, err)
		}
		db, err = gorm.Open(postgres.New(postgres.Config{Conn: stdlib.OpenDBFromPool(pool)}), cfg)
		if err != nil {
			pool.Close()
		}
	case SQLite:
		if err := prepareSQLiteFile(dsn); err != nil {
			return nil, err
		}
		// WAL lets readers run beside the writer; one connection serialises
		// writers in this process, which is what SQLite wants anyway.
		// _txlock=immediate: a write transaction takes the write lock at
		// BEGIN. A deferred one reads first (the session's row) and asks for
		// the lock at its first write; if another process committed in
		// between, SQLite refuses at once (SQLITE_BUSY, its snapshot is
		// stale) without waiting busy_timeout, and the write runs again,
		// which under steady writes from another process can fail every
		// retry. Read-only transactions still BEGIN deferred.
		db, err = gorm.Open(sqlite.Open("file:"+dsn+"?_txlock=immediate&_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=foreign_keys(1)&_pragma=synchronous(NORMAL)"), cfg)
	}
	if err != nil {
		return nil, fmt.Errorf("open %s database: %w", dialect, err)
	}
	sqlDB, err := db.DB()
	if err != nil {
		return nil, err
	}
	if dialect == SQLite {
		sqlDB.SetMaxOpenConns(1)
	}
	pingCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := sqlDB.PingContext(pingCtx); err != nil {
		sqlDB.Close()
		if pool != nil {
			pool.Close()
		}
		return nil, fmt.Errorf("connect to %s database: %w", dialect, err)
	}
	st := &Store{DB: db, Dialect: dialect, Now: time.Now, Logger: log, Wake: NewBroker(), url: url, pool: pool, trace: trace}
	if opts.ReadURL != "" {
		if err := st.openReplica(ctx, opts.ReadURL, pool.Config().MaxConns); err != nil {
			sqlDB.Close()
			pool.Close()
			return nil, err
		}
	}
	if opts.GroupCommit {
		lanes := opts.GroupLanes
		if lanes <= 0 {
			lanes = DefaultGroupLanes
		}
		st.SetGroupCommit(lanes)
	}
	return st, nil
}

// URL is the database URL the store was opened with.
func (s *Store) URL() string { return s.url }

// Close closes the connection pool.
func (s *Store) Close() error {
	s.stopNotices()
	sqlDB, err := s.DB.DB()
	if err != nil {
		return err
	}
	s.replica.close()
	err = sqlDB.Close()
	if s.pool != nil {
		s.pool.Close()
	}
	return err
}

// Ping checks that the database answers.
func (s *Store) Ping(ctx context.Context) error {
	sqlDB, err := s.DB.DB()
	if err != nil {
		return err
	}
	return sqlDB.PingContext(ctx)
}

func (s *Store) now() time.Time { return s.Now().UTC().Truncate(time.Microsecond) }

// Transact runs fn in a transaction and retries it when the database reports
// a serialization failure or deadlock, which are safe to retry.
func (s *Store) Transact(ctx context.Context, fn func(tx *gorm.DB) error) error {
	err := s.retry(ctx, func() error { return s.DB.WithContext(ctx).Transaction(fn) })
	if err == nil {
		s.noteWrite(ctx)
	}
	return err
}

func retryable(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code == "40001" || pgErr.Code == "40P01"
	}
	msg := err.Error()
	return strings.Contains(msg, "SQLITE_BUSY") || strings.Contains(msg, "database is locked")
}

func isUniqueViolation(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code == "23505"
	}
	return err != nil && strings.Contains(err.Error(), "UNIQUE constraint failed")
}

// isUniqueViolationOn reports a unique violation of one constraint: its
// PostgreSQL name, or SQLite's "table.column" in the message.
func isUniqueViolationOn(err error, pgConstraint, sqliteColumn string) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code == "23505" && pgErr.ConstraintName == pgConstraint
	}
	return err != nil && strings.Contains(err.Error(), "UNIQUE constraint failed: "+sqliteColumn)
}

func isNotNullViolation(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "23502"
}

// ErrSchemaNewer means the database was migrated by a newer binary.
var ErrSchemaNewer = errors.New("database schema is newer than this binary knows")

// ErrSchemaBehind means migrations are pending.
var ErrSchemaBehind = errors.New("database schema has pending migrations")

func (s *Store) migrationProvider() (*goose.Provider, error) {
	fsys, err := migrations.FS(string(s.Dialect))
	if err != nil {
		return nil, err
	}
	sqlDB, err := s.DB.DB()
	if err != nil {
		return nil, err
	}
	if s.Dialect == SQLite {
		return goose.NewProvider(goose.DialectSQLite3, sqlDB, fsys)
	}
	// Replicas starting together on an empty database take turns: goose
	// holds a PostgreSQL advisory lock while it migrates. The lock is named
	// after the database and schema, so that separate schemas (tests, tenants)
	// do not wait for each other.
	var where string
	if err := s.DB.Raw(`SELECT current_database() || '.' || current_schema()`).Scan(&where).Error; err != nil {
		return nil, fmt.Errorf("migration lock: %w", err)
	}
	locker, err := lock.NewPostgresSessionLocker(
		lock.WithLockID(int64(crc64.Checksum([]byte("taskpilots:"+where), crc64.MakeTable(crc64.ECMA))>>1)),
		lock.WithLockTimeout(1, 300),
	)
	if err != nil {
		return nil, err
	}
	return goose.NewProvider(goose.DialectPostgres, sqlDB, fsys, goose.WithSessionLocker(locker))
}

// MigrationState is where the schema stands.
type MigrationState struct {
	Current int64 // version applied in the database
	Latest  int64 // newest version this binary knows
	Pending []int64
}

// MigrationStatus reports applied and pending migrations.
func (s *Store) MigrationStatus(ctx context.Context) (MigrationState, error) {
	p, err := s.migrationProvider()
	if err != nil {
		return MigrationState{}, err
	}
	var st MigrationState
	for _, src := range p.ListSources() {
		st.Latest = max(st.Latest, src.Version)
	}
	cur, err := s.dbVersion(ctx)
	if err != nil {
		return st, err
	}
	st.Current = cur
	results, err := p.Status(ctx)
	if err != nil {
		return st, fmt.Errorf("migration status: %w", err)
	}
	for _, r := range results {
		if r.State == goose.StatePending {
			st.Pending = append(st.Pending, r.Source.Version)
		}
	}
	return st, nil
}

// dbVersion reads the highest applied version straight from goose's table,
// so that a version this binary does not know is still seen.
func (s *Store) dbVersion(ctx context.Context) (int64, error) {
	var exists bool
	var err error
	if s.Dialect == Postgres {
		err = s.DB.WithContext(ctx).Raw(`SELECT to_regclass('goose_db_version') IS NOT NULL`).Scan(&exists).Error
	} else {
		var n int
		err = s.DB.WithContext(ctx).Raw(`SELECT count(*) FROM sqlite_master WHERE type='table' AND name='goose_db_version'`).Scan(&n).Error
		exists = n > 0
	}
	if err != nil || !exists {
		return 0, err
	}
	var v sql.NullInt64
	err = s.DB.WithContext(ctx).Raw(`SELECT max(version_id) FROM goose_db_version WHERE is_applied`).Scan(&v).Error
	return v.Int64, err
}

// CheckSchema returns ErrSchemaNewer or ErrSchemaBehind unless the database
// is exactly at the binary's latest migration.
func (s *Store) CheckSchema(ctx context.Context) error {
	st, err := s.MigrationStatus(ctx)
	if err != nil {
		return err
	}
	if st.Current > st.Latest {
		return fmt.Errorf("%w: database at %d, binary knows up to %d", ErrSchemaNewer, st.Current, st.Latest)
	}
	if len(st.Pending) > 0 {
		return fmt.Errorf("%w: %v", ErrSchemaBehind, st.Pending)
	}
	return nil
}

// MigrateUp applies all pending migrations; it refuses a schema newer than
// the binary. It returns the versions applied.
func (s *Store) MigrateUp(ctx context.Context) ([]int64, error) {
	st, err := s.MigrationStatus(ctx)
	if err != nil {
		return nil, err
	}
	if st.Current > st.Latest {
		return nil, fmt.Errorf("%w: database at %d, binary knows up to %d", ErrSchemaNewer, st.Current, st.Latest)
	}
	p, err := s.migrationProvider()
	if err != nil {
		return nil, err
	}
	results, err := p.Up(ctx)
	var applied []int64
	for _, r := range results {
		applied = append(applied, r.Source.Version)
	}
	if err != nil {
		return applied, fmt.Errorf("migrate up: %w", err)
	}
	// States written by an older release are re-derived from their events,
	// so that replay matches them again.
	if _, err := s.Reproject(ctx); err != nil {
		return applied, fmt.Errorf("migrate up: %w", err)
	}
	// The inbox's maintained counts are checked against the sessions (one
	// grouped read of the backlog) and rebuilt if anything wrote sessions
	// without the triggers: the repair verify points to.
	if _, err := s.RepairInboxCounts(ctx); err != nil {
		return applied, fmt.Errorf("migrate up: %w", err)
	}
	// So are the review queue's, against the open items.
	if _, err := s.RepairReviewCounts(ctx); err != nil {
		return applied, fmt.Errorf("migrate up: %w", err)
	}
	// So are the metrics' SLA counts (PostgreSQL).
	if _, err := s.RepairNowCounts(ctx); err != nil {
		return applied, fmt.Errorf("migrate up: %w", err)
	}
	// So are the counts of the sessions waiting on input (PostgreSQL).
	if _, err := s.RepairWaitingCounts(ctx); err != nil {
		return applied, fmt.Errorf("migrate up: %w", err)
	}
	// And the inbox search's copy of the sessions in human hands (PostgreSQL).
	if _, err := s.RepairInboxRows(ctx); err != nil {
		return applied, fmt.Errorf("migrate up: %w", err)
	}
	return applied, nil
}

// MigrateDown rolls back the most recent migration and returns its version.
func (s *Store) MigrateDown(ctx context.Context) (int64, error) {
	p, err := s.migrationProvider()
	if err != nil {
		return 0, err
	}
	r, err := p.Down(ctx)
	if err != nil {
		return 0, fmt.Errorf("migrate down: %w", err)
	}
	return r.Source.Version, nil
}

// MigrationFiles lists the migration versions of a dialect, for tests.
func MigrationFiles(d Dialect) ([]string, error) {
	fsys, err := migrations.FS(string(d))
	if err != nil {
		return nil, err
	}
	return fs.Glob(fsys, "*.sql")
}
