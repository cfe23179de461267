package main

import (
	"context"
	"errors"
	"flag"

	"github.com/taskpilots/handoff/cmd/taskpilots/drill"
)

func init() {
	commands["drill"] = command{
		summary: "run a recovery drill: simulated workers and humans, injected faults, then verify everything",
		run:     runDrill,
	}
}

// runDrill runs package drill with this command line's conventions.
func runDrill(ctx context.Context, env *cliEnv, args []string) error {
	err := drill.Run(ctx, drillEnv(env), args)
	var de *drill.ExitError
	if errors.As(err, &de) {
		return &exitError{code: de.Code, err: de.Err}
	}
	return err
}

func drillEnv(env *cliEnv) *drill.Env {
	return &drill.Env{
		Stdout: env.stdout, Stderr: env.stderr, Getenv: env.getenv, Log: env.log, Operator: operator(env),
		NewFlagSet:   func(name string) *flag.FlagSet { return newFlagSet(env, name) },
		DatabaseFlag: func(fs *flag.FlagSet) *string { return databaseFlag(env, fs) },
		ParseFlags:   parseFlags,
		SchemaError:  schemaError,
	}
}
