// Command taskpilots is the one binary of TaskPilots Handoff: the server, its
// migrations, verification, user and token administration, the demo worker
// and the benchmark.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"

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
}

// exitError carries a specific exit status.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	env := &cliEnv{stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr, getenv: os.Getenv}
	os.Exit(run(ctx, env, os.Args[1:]))
}

// run dispatches to a subcommand and returns the exit status.
func run(ctx context.Context, env *cliEnv, args []string) int {
	if env.log == nil {
		env.log = slog.New(slog.NewTextHandler(env.stderr, &slog.HandlerOptions{Level: logLevel(env.getenv("TASKPILOTS_LOG_LEVEL"))}))
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
		if err == flag.ErrHelp {
			return 0
		}
		fmt.Fprintf(env.stderr, "taskpilots %s: %v\n", args[0], err)
		if ee, ok := err.(*exitError); ok {
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
	return fs.String("database-url", envOr(env, "TASKPILOTS_DATABASE_URL", models.DefaultDatabaseURL),
		"postgres://… URL, sqlite:PATH or a path ending in .db (env TASKPILOTS_DATABASE_URL)")
}

// openStore opens the database; it does not migrate.
func openStore(ctx context.Context, env *cliEnv, url string) (*models.Store, error) {
	return models.Open(ctx, url, models.OpenOpts{Logger: env.log})
}
