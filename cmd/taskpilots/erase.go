package main

import (
	"context"
	"encoding/json"
	"fmt"
)

func init() {
	commands["erase"] = command{
		summary: "erase one ticket's personal data (payloads, goal, notes, facts, outputs, evidence) keeping the hash chains verifiable",
		run:     runErase,
	}
}

func runErase(ctx context.Context, env *cliEnv, args []string) error {
	fs := newFlagSet(env, "erase")
	dbURL := databaseFlag(env, fs)
	ticket := fs.String("ticket", "", "the ticket ref whose sessions (and their child sessions) to erase; required")
	reason := fs.String("reason", "", "why (the request it answers), recorded in the admin log; required")
	asJSON := fs.Bool("json", false, "print a JSON report as the last line of standard output")
	fs.Usage = func() {
		fmt.Fprintln(env.stderr, "usage: taskpilots erase --ticket T-1182 --reason \"erasure request #88\" [--json]\n\n"+
			"Replaces the payload of every event of every session of the ticket (and of\n"+
			"their child sessions) with a tombstone that keeps the event's hash verifiable,\n"+
			"scrubs the stored state and the free-text columns, and records the erasure in\n"+
			"session_erasures and the admin log. `taskpilots verify` stays clean. Running it\n"+
			"again changes nothing, unless events were added since. Archived sessions of\n"+
			"the ticket are listed: their files are outside the database.\n\nflags:")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *ticket == "" || *reason == "" {
		return usageErr("--ticket and --reason are required")
	}
	s, err := openCurrentStore(ctx, env, *dbURL)
	if err != nil {
		return err
	}
	defer s.Close()
	rep, err := s.EraseTicket(ctx, operator(env), *ticket, *reason)
	if err != nil {
		return err
	}
	if *asJSON {
		return json.NewEncoder(env.stdout).Encode(rep)
	}
	fmt.Fprintf(env.stdout, "ticket %s: %d sessions, %d events erased now, %d erased before", rep.TicketRef, len(rep.Sessions), rep.Events, rep.AlreadyErased)
	if rep.Changed == 0 {
		fmt.Fprint(env.stdout, " (nothing left to erase)")
	} else {
		fmt.Fprintf(env.stdout, " (erasure %s)", rep.ErasureID)
	}
	fmt.Fprintln(env.stdout)
	for _, a := range rep.Archived {
		fmt.Fprintf(env.stdout, "archived: %s is in the archive file %s: delete that file too\n", a.SessionID, a.File)
	}
	return nil
}
