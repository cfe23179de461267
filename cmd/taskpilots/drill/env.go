// Package drill is `taskpilots drill`: a recovery drill that creates its own
// sessions on its own queue, drives them with simulated workers and humans
// while injecting faults, and then checks every promise of the product on
// what happened (README "Recovery drill"). It can also inject faults into a
// named real queue of a staging deployment (--queue, queuefault.go).
//
// The command line it runs in (cmd/taskpilots) hands it an Env: its
// streams, environment and flag conventions, so that flags, errors and exit
// statuses behave like every other subcommand's.
package drill

import (
	"flag"
	"io"
	"log/slog"

	"github.com/taskpilots/handoff/cmd/taskpilots/envflag"
	"github.com/taskpilots/handoff/models"
)

// Env is what the drill needs from the command line that runs it.
type Env struct {
	Stdout, Stderr io.Writer
	Getenv         func(string) string
	Log            *slog.Logger
	// Operator is the principal of the drill's token and user changes in
	// the admin log (cli:<OS user>).
	Operator models.User
	// NewFlagSet, DatabaseFlag and ParseFlags are the command line's flag
	// conventions (errors to Stderr, --database-url with its environment
	// default, flags anywhere, usage errors as exit status 2).
	NewFlagSet   func(name string) *flag.FlagSet
	DatabaseFlag func(fs *flag.FlagSet) *string
	ParseFlags   func(fs *flag.FlagSet, args []string) error
	// SchemaError turns a schema mismatch into advice.
	SchemaError func(error) error
}

// ExitError carries the exit status the drill ends with: 1 when it found
// violations, 2 on a usage error.
type ExitError struct {
	Code int
	Err  error
}

func (e *ExitError) Error() string { return e.Err.Error() }

func (e *ExitError) Unwrap() error { return e.Err }

// envDefaults reads flag defaults from TASKPILOTS_* variables as every
// subcommand does (envflag.Defaults); Err reports malformed ones as a usage
// error.
type envDefaults struct {
	envflag.Defaults
}

func newEnvDefaults(env *Env) *envDefaults {
	return &envDefaults{envflag.Defaults{Getenv: env.Getenv}}
}

// Err reports every malformed variable, as exit status 2.
func (d *envDefaults) Err() error {
	if err := d.Defaults.Err(); err != nil {
		return &ExitError{Code: 2, Err: err}
	}
	return nil
}
