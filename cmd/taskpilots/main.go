// Command taskpilots is the one binary of TaskPilots Handoff: the server, its
// migrations, verification, user and token administration, the demo worker
// and the benchmark.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"sort"
	"strings"
	"syscall"

	"github.com/taskpilots/handoff/cmd/taskpilots/envflag"
	"github.com/taskpilots/handoff/models"
)

// command is one subcommand. run gets the arguments after the subcommand's
// name (and after any sub-subcommand such as "up" in "migrate up").
type command struct {
	summary string
	run     func(ctx context.Context, env *cliEnv, args []string) error
}

// commands is filled by each subcommand's file in init.
var commands = map[string]command{}

// cliEnv carries the process's streams so that commands are testable.
type cliEnv struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	getenv         func(string) string
	log            *slog.Logger
	// osUser names the operating-system account running the command, for
	// the admin log; nil means os/user.Current (tests replace it).
	osUser func() (string, error)
}

// exitError carries a specific exit status.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }

// Unwrap lets run find a ValidationError inside, to list its fields.
func (e *exitError) Unwrap() error { return e.err }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	env := &cliEnv{stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr, getenv: os.Getenv}
	tuneGC(env.getenv)
	os.Exit(run(ctx, env, os.Args[1:]))
}

// defaultGCPercent replaces Go's default GOGC of 100. The server keeps a
// small live heap (tens of MB) and allocates quickly (about 90 KB per
// session lifecycle), so at 100 the collector runs many times a second and
// costs about a tenth of the write path's CPU; at 400 the heap may grow to
// five times the live data, which here is still small, and throughput rises
// by 8-12% (README, "Benchmark results").
const defaultGCPercent = 400

// tuneGC applies defaultGCPercent unless GOGC is set: an operator's setting
// always wins.
func tuneGC(getenv func(string) string) {
	if getenv("GOGC") == "" {
		debug.SetGCPercent(defaultGCPercent)
	}
}

// run dispatches to a subcommand and returns the exit status.
func run(ctx context.Context, env *cliEnv, args []string) int {
	if env.log == nil {
		l, err := newLogger(env.stderr, env.getenv("TASKPILOTS_LOG_FORMAT"), env.getenv("TASKPILOTS_LOG_LEVEL"))
		if err != nil {
			fmt.Fprintf(env.stderr, "taskpilots: %v\n", err)
			return 2
		}
		env.log = l
	}
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(env.stderr)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	cmd, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(env.stderr, "taskpilots: unknown command %q\n\n", args[0])
		usage(env.stderr)
		return 2
	}
	if err := cmd.run(ctx, env, args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		// A validation error lists every offending field, one per line, so
		// that the user can fix them all in one go.
		var ve *models.ValidationError
		if errors.As(err, &ve) {
			fmt.Fprintf(env.stderr, "taskpilots %s: invalid input:\n", args[0])
			for _, f := range ve.Fields {
				fmt.Fprintf(env.stderr, "  %s: %s\n", f.Field, f.Message)
			}
		} else {
			fmt.Fprintf(env.stderr, "taskpilots %s: %v\n", args[0], err)
		}
		var ee *exitError
		if errors.As(err, &ee) {
			return ee.code
		}
		return 1
	}
	return 0
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: taskpilots <command> [flags]\n\ncommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w, "\nEvery command takes --database-url (TASKPILOTS_DATABASE_URL); run `taskpilots <command> -h` for its flags.")
}

// newLogger builds the process logger from TASKPILOTS_LOG_FORMAT ("text",
// the default, for people; "json", one object per line, for log pipelines
// such as Loki, Elasticsearch or Cloud Logging that parse fields instead of
// text) and TASKPILOTS_LOG_LEVEL. An unknown format is an error rather than a
// silent fallback: a pipeline that expects JSON and gets text drops every line.
func newLogger(w io.Writer, format, level string) (*slog.Logger, error) {
	opts := &slog.HandlerOptions{Level: logLevel(level)}
	switch strings.ToLower(strings.TrimSpace(format)) {
	case "", "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	default:
		return nil, fmt.Errorf("TASKPILOTS_LOG_FORMAT=%q: want text or json", format)
	}
}

func logLevel(s string) slog.Level {
	var l slog.Level
	if err := l.UnmarshalText([]byte(strings.ToUpper(s))); err != nil {
		return slog.LevelInfo
	}
	return l
}

// newFlagSet returns a flag set whose errors go to env.stderr.
func newFlagSet(env *cliEnv, name string) *flag.FlagSet {
	fs := flag.NewFlagSet("taskpilots "+name, flag.ContinueOnError)
	fs.SetOutput(env.stderr)
	return fs
}

// envOr returns the environment variable or def.
func envOr(env *cliEnv, key, def string) string {
	if v := env.getenv(key); v != "" {
		return v
	}
	return def
}

// databaseFlag registers --database-url with its environment default.
func databaseFlag(env *cliEnv, fs *flag.FlagSet) *string {
	p := fs.String("database-url", envOr(env, "TASKPILOTS_DATABASE_URL", models.DefaultDatabaseURL),
		"postgres://… URL, sqlite:PATH or a path ending in .db (env TASKPILOTS_DATABASE_URL)")
	redactDefault(fs, "database-url")
	return p
}

// redactDefault masks the passwords in the default of a database URL flag,
// which -h prints (it comes from TASKPILOTS_DATABASE_URL).
func redactDefault(fs *flag.FlagSet, name string) {
	if f := fs.Lookup(name); f != nil {
		f.DefValue = redactURL(f.DefValue)
	}
}

// envDefaults reads flag defaults from TASKPILOTS_* variables
// (envflag.Defaults); Err reports malformed ones as a usage error.
type envDefaults struct {
	envflag.Defaults
}

func newEnvDefaults(env *cliEnv) *envDefaults {
	return &envDefaults{envflag.Defaults{Getenv: env.getenv}}
}

// Err reports every malformed variable, as exit status 2.
func (d *envDefaults) Err() error {
	if err := d.Defaults.Err(); err != nil {
		return &exitError{code: 2, err: err}
	}
	return nil
}

// usageErr is a command-line mistake: exit status 2, like the flag package.
func usageErr(format string, args ...any) error {
	return &exitError{code: 2, err: fmt.Errorf(format, args...)}
}

// parseArgs parses flags that may come before, between or after positional
// arguments ("token revoke ci --database-url …" as well as
// "token revoke --database-url … ci") and returns the positional ones.
// "--" ends flag parsing.
func parseArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			// The flag package has already printed the problem and the usage.
			return nil, &exitError{code: 2, err: err}
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		// fs.Parse stops at the first non-flag, or just after "--".
		if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// parseFlags is parseArgs for commands that take no positional arguments.
func parseFlags(fs *flag.FlagSet, args []string) error {
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageErr("unexpected argument %q", pos[0])
	}
	return nil
}

// redactURL hides the passwords of a database URL (userinfo and query) for
// display.
func redactURL(raw string) string {
	return models.RedactDatabaseURL(raw)
}

// openStore opens the database; it does not migrate.
func openStore(ctx context.Context, env *cliEnv, url string) (*models.Store, error) {
	return models.Open(ctx, url, models.OpenOpts{Logger: env.log})
}

// openCurrentStore opens the database for a command that reads or writes it
// without migrating: a half-migrated or newer schema would make it report
// nonsense or write rows the schema does not expect, so it is refused.
func openCurrentStore(ctx context.Context, env *cliEnv, url string) (*models.Store, error) {
	s, err := openStore(ctx, env, url)
	if err != nil {
		return nil, err
	}
	if err := s.CheckSchema(ctx); err != nil {
		s.Close()
		return nil, schemaError(err)
	}
	return s, nil
}
