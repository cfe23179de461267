package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/taskpilots/handoff/models"
)

func init() {
	commands["migrate"] = command{
		summary: "apply, roll back or show schema migrations (up|down|status)",
		run:     runMigrate,
	}
}

const migrateUsage = `usage: taskpilots migrate up|down|status [--database-url URL]

  up      apply every pending migration (refuses a schema newer than this binary)
  down    roll back the most recent migration
  status  show the database's schema version and the pending migrations`

func runMigrate(ctx context.Context, env *cliEnv, args []string) error {
	fs := newFlagSet(env, "migrate")
	dbURL := databaseFlag(env, fs)
	fs.Usage = func() {
		fmt.Fprintln(env.stderr, migrateUsage)
		fs.PrintDefaults()
	}
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		fs.Usage()
		return usageErr("want exactly one of up, down or status, got %q", strings.Join(pos, " "))
	}
	action := pos[0]
	if action != "up" && action != "down" && action != "status" {
		fs.Usage()
		return usageErr("unknown action %q: want up, down or status", action)
	}

	s, err := openStore(ctx, env, *dbURL)
	if err != nil {
		return err
	}
	defer s.Close()

	switch action {
	case "up":
		applied, err := s.MigrateUp(ctx)
		for _, v := range applied {
			fmt.Fprintf(env.stdout, "applied migration %d\n", v)
		}
		if err != nil {
			return schemaError(err)
		}
		st, err := s.MigrationStatus(ctx)
		if err != nil {
			return err
		}
		if len(applied) == 0 {
			fmt.Fprintf(env.stdout, "schema already at version %d; nothing to apply\n", st.Current)
		} else {
			fmt.Fprintf(env.stdout, "schema at version %d\n", st.Current)
		}
	case "down":
		st, err := s.MigrationStatus(ctx)
		if err != nil {
			return err
		}
		if st.Current == 0 {
			return errors.New("nothing to roll back: no migration is applied")
		}
		if st.Current > st.Latest {
			// Rolling back needs the down section of a migration this
			// binary does not have.
			return schemaError(fmt.Errorf("%w: database at %d, binary knows up to %d", models.ErrSchemaNewer, st.Current, st.Latest))
		}
		v, err := s.MigrateDown(ctx)
		if err != nil {
			return err
		}
		fmt.Fprintf(env.stdout, "rolled back migration %d\n", v)
	case "status":
		st, err := s.MigrationStatus(ctx)
		if err != nil {
			return err
		}
		printMigrationState(env, s, st)
	}
	return nil
}

// printMigrationState writes a short, stable report of where the schema
// stands; scripts may grep its "key: value" lines.
func printMigrationState(env *cliEnv, s *models.Store, st models.MigrationState) {
	fmt.Fprintf(env.stdout, "database: %s (%s)\n", redactURL(s.URL()), s.Dialect)
	fmt.Fprintf(env.stdout, "current version: %d\n", st.Current)
	fmt.Fprintf(env.stdout, "latest version: %d\n", st.Latest)
	switch {
	case st.Current > st.Latest:
		fmt.Fprintln(env.stdout, "state: newer than this binary (upgrade taskpilots before serving)")
	case len(st.Pending) > 0:
		ps := make([]string, len(st.Pending))
		for i, v := range st.Pending {
			ps[i] = fmt.Sprint(v)
		}
		fmt.Fprintf(env.stdout, "pending: %s\n", strings.Join(ps, " "))
		fmt.Fprintln(env.stdout, "state: pending migrations (run `taskpilots migrate up`)")
	default:
		fmt.Fprintln(env.stdout, "pending: none")
		fmt.Fprintln(env.stdout, "state: up to date")
	}
}

// schemaError turns models.ErrSchemaNewer and ErrSchemaBehind into advice; a binary must never
// write to a schema it does not understand, so this is a hard stop.
func schemaError(err error) error {
	if errors.Is(err, models.ErrSchemaNewer) {
		return &exitError{code: 1, err: fmt.Errorf("%w\nThe database was migrated by a newer taskpilots. Run that version (or newer); "+
			"this binary will not touch the schema or serve from it", err)}
	}
	if errors.Is(err, models.ErrSchemaBehind) {
		return fmt.Errorf("%w\nRun `taskpilots migrate up` (or `taskpilots serve`, which migrates) first", err)
	}
	return err
}
