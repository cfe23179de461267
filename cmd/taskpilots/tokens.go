package main

import (
	"context"
	"flag"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/taskpilots/handoff/models"
)

func init() {
	commands["token"] = command{
		summary: "create, list and revoke API tokens (token create|list|revoke)",
		run:     runToken,
	}
}

const tokenUsage = `usage:
  taskpilots token create --name NAME --role controller|worker|admin
  taskpilots token list
  taskpilots token revoke ID|NAME

create prints the token alone on standard output, so that scripts can
capture it (TOKEN=$(taskpilots token create …)); only its hash is stored.
Names are unique, revoked tokens included: a token's name is its actor
(token:NAME) in events. create and revoke are recorded in the admin log as
cli:<your OS user>. LAST USED is written at most once a minute per token.`

func runToken(ctx context.Context, env *cliEnv, args []string) error {
	if len(args) > 0 {
		switch args[0] {
		case "create":
			return runTokenCreate(ctx, env, args[1:])
		case "list":
			return runTokenList(ctx, env, args[1:])
		case "revoke":
			return runTokenRevoke(ctx, env, args[1:])
		case "-h", "--help", "help":
			fmt.Fprintln(env.stderr, tokenUsage)
			return nil
		}
	}
	fmt.Fprintln(env.stderr, tokenUsage)
	return usageErr("want one of create, list or revoke")
}

// tokenStore parses the common flags and opens a migrated store.
func tokenStore(ctx context.Context, env *cliEnv, name string, args []string, extra func(fs *flag.FlagSet)) (*models.Store, []string, error) {
	fs := newFlagSet(env, "token "+name)
	dbURL := databaseFlag(env, fs)
	if extra != nil {
		extra(fs)
	}
	fs.Usage = func() {
		fmt.Fprintln(env.stderr, tokenUsage+"\n\nflags:")
		fs.PrintDefaults()
	}
	pos, err := parseArgs(fs, args)
	if err != nil {
		return nil, nil, err
	}
	s, err := openCurrentStore(ctx, env, *dbURL)
	if err != nil {
		return nil, nil, err
	}
	return s, pos, nil
}

func runTokenCreate(ctx context.Context, env *cliEnv, args []string) error {
	var name, role string
	s, pos, err := tokenStore(ctx, env, "create", args, func(fs *flag.FlagSet) {
		fs.StringVar(&name, "name", "", "a name for the token, such as the worker fleet using it")
		fs.StringVar(&role, "role", "", "controller, worker or admin")
	})
	if err != nil {
		return err
	}
	defer s.Close()
	if len(pos) > 0 {
		return usageErr("unexpected argument %q (use --name)", pos[0])
	}
	secret, t, err := s.AdminCreateToken(ctx, operator(env), name, models.Role(role))
	if err != nil {
		return err
	}
	fmt.Fprintf(env.stderr, "created %s token %q (id %s); it is shown only this once and only its hash is stored\n", t.Role, t.Name, t.ID)
	fmt.Fprintln(env.stdout, secret)
	return nil
}

func runTokenList(ctx context.Context, env *cliEnv, args []string) error {
	s, pos, err := tokenStore(ctx, env, "list", args, nil)
	if err != nil {
		return err
	}
	defer s.Close()
	if len(pos) > 0 {
		return usageErr("unexpected argument %q", pos[0])
	}
	ts, err := s.ListTokens(ctx)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(env.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tROLE\tCREATED\tLAST USED\tREVOKED")
	for _, t := range ts {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", t.ID, t.Name, t.Role, tableTime(t.CreatedAt), nullTime(t.LastUsedAt), nullTime(t.RevokedAt))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(ts) == 0 {
		fmt.Fprintln(env.stderr, "no tokens yet; create one with `taskpilots token create --name NAME --role worker`")
	}
	return nil
}

func runTokenRevoke(ctx context.Context, env *cliEnv, args []string) error {
	s, pos, err := tokenStore(ctx, env, "revoke", args, nil)
	if err != nil {
		return err
	}
	defer s.Close()
	if len(pos) != 1 {
		return usageErr("want exactly one token ID or NAME")
	}
	t, err := s.AdminRevokeToken(ctx, operator(env), pos[0])
	if err != nil {
		return err
	}
	fmt.Fprintf(env.stdout, "token %s (id %s) is revoked since %s\n", t.Name, t.ID, nullTime(t.RevokedAt))
	return nil
}

// tableTime shows a time to the second: the table is for people.
func tableTime(t models.UTCTime) string { return t.UTC().Format(time.RFC3339) }

func nullTime(t models.NullTime) string {
	if !t.Valid {
		return "-"
	}
	return tableTime(t.Time)
}
