package main

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"

	"github.com/taskpilots/handoff/models"
)

// version is set at build time:
//
//	go build -ldflags "-X main.version=v1.4.0" ./cmd/taskpilots
//
// When it is empty, the VCS revision recorded by the Go toolchain is shown.
var version string

func init() {
	commands["version"] = command{
		summary: "print the version, the Go version and the schema version this binary knows",
		run:     runVersion,
	}
}

// buildInfo is what `taskpilots version` reports.
type buildInfo struct {
	Version string `json:"version"`
	Commit  string `json:"commit,omitempty"`
	Time    string `json:"commit_time,omitempty"`
	Go      string `json:"go"`
	Schema  int64  `json:"schema"`
	// DatabaseSchema is filled only when a database was named explicitly.
	DatabaseSchema *int64 `json:"database_schema,omitempty"`
}

func runVersion(ctx context.Context, env *cliEnv, args []string) error {
	fs := newFlagSet(env, "version")
	dbURL := fs.String("database-url", env.getenv("TASKPILOTS_DATABASE_URL"),
		"also report this database's schema version (env TASKPILOTS_DATABASE_URL)")
	asJSON := fs.Bool("json", false, "print JSON")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	bi, err := currentBuildInfo()
	if err != nil {
		return err
	}
	// Unlike other commands, version does not fall back to the default
	// SQLite file: asking for the version must not create ./data.
	if *dbURL != "" {
		s, err := openStore(ctx, env, *dbURL)
		if err != nil {
			return err
		}
		defer s.Close()
		st, err := s.MigrationStatus(ctx)
		if err != nil {
			return fmt.Errorf("read the database's schema version: %w", err)
		}
		bi.DatabaseSchema = &st.Current
	}
	if *asJSON {
		b, err := json.Marshal(bi)
		if err != nil {
			return err
		}
		fmt.Fprintln(env.stdout, string(b))
		return nil
	}
	fmt.Fprintf(env.stdout, "taskpilots %s\n", bi.Version)
	if bi.Commit != "" {
		fmt.Fprintf(env.stdout, "commit: %s", bi.Commit)
		if bi.Time != "" {
			fmt.Fprintf(env.stdout, " (%s)", bi.Time)
		}
		fmt.Fprintln(env.stdout)
	}
	fmt.Fprintf(env.stdout, "go: %s\n", bi.Go)
	fmt.Fprintf(env.stdout, "schema: %d (latest migration this binary knows)\n", bi.Schema)
	if bi.DatabaseSchema != nil {
		fmt.Fprintf(env.stdout, "database schema: %d\n", *bi.DatabaseSchema)
	}
	return nil
}

func currentBuildInfo() (buildInfo, error) {
	bi := buildInfo{Version: version, Go: runtime.Version()}
	if info, ok := debug.ReadBuildInfo(); ok {
		var modified bool
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				bi.Commit = s.Value
			case "vcs.time":
				bi.Time = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
		if bi.Commit != "" && modified {
			bi.Commit += "-dirty"
		}
		if bi.Version == "" && info.Main.Version != "" && info.Main.Version != "(devel)" {
			bi.Version = info.Main.Version
		}
	}
	if bi.Version == "" {
		bi.Version = "devel"
		if bi.Commit != "" {
			bi.Version += "-" + shortRev(bi.Commit)
		}
	}
	schema, err := latestSchema()
	if err != nil {
		return bi, err
	}
	bi.Schema = schema
	return bi, nil
}

func shortRev(rev string) string {
	if len(rev) > 12 {
		return rev[:12]
	}
	return rev
}

// latestSchema is the newest migration version embedded in the binary. Both
// dialects carry the same numbers; the highest of either is reported.
func latestSchema() (int64, error) {
	var latest int64
	for _, d := range []models.Dialect{models.Postgres, models.SQLite} {
		files, err := models.MigrationFiles(d)
		if err != nil {
			return 0, fmt.Errorf("list %s migrations: %w", d, err)
		}
		for _, f := range files {
			num, _, ok := strings.Cut(f, "_")
			if !ok {
				continue
			}
			v, err := strconv.ParseInt(num, 10, 64)
			if err != nil {
				continue
			}
			latest = max(latest, v)
		}
	}
	return latest, nil
}
