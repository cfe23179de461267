package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/taskpilots/handoff/models"
)

func init() {
	commands["archive"] = command{
		summary: "write closed sessions to transcript files and delete them from the database; `archive verify` checks the files, `archive restore` loads them back",
		run:     runArchive,
	}
}

// parseAge reads an age such as 90d, 36h or 2160h: Go durations plus whole
// days, since retention is spoken of in days.
func parseAge(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if d, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.Atoi(d)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("%q: want a number of days such as 90d", s)
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("%q: want an age such as 90d or 36h", s)
	}
	return d, nil
}

func runArchive(ctx context.Context, env *cliEnv, args []string) error {
	if len(args) > 0 && args[0] == "verify" {
		return runArchiveVerify(ctx, env, args[1:])
	}
	if len(args) > 0 && args[0] == "restore" {
		return runArchiveRestore(ctx, env, args[1:])
	}
	fs := newFlagSet(env, "archive")
	dbURL := databaseFlag(env, fs)
	d := newEnvDefaults(env)
	closedBefore := fs.String("closed-before", "", "archive sessions closed longer ago than this (90d, 36h); required")
	dir := fs.String("to", "", "directory for the transcripts (DIR/YYYY-MM/<session id>.json); required")
	batch := fs.Int("batch", 200, "sessions selected per query")
	limit := fs.Int("limit", 0, "stop after archiving this many sessions (0: all)")
	dryRun := fs.Bool("dry-run", false, "count what would be archived; write and delete nothing")
	asJSON := fs.Bool("json", false, "print a JSON report as the last line of standard output")
	keyPath := new(string)
	checkpointKeyFlag(fs, d, keyPath)
	fs.Usage = func() {
		fmt.Fprintln(env.stderr, "usage: taskpilots archive --closed-before 90d --to DIR [flags]\n"+
			"       taskpilots archive verify --to DIR [--checkpoint-pubkey KEY]\n"+
			"       taskpilots archive restore --from DIR [--session ID]… [--checkpoint-pubkey KEY]\n\n"+
			"Writes each session closed (completed, rejected, cancelled) before the cut-off\n"+
			"to DIR as a transcript that `taskpilots verify --transcript` checks offline\n"+
			"(with the signed checkpoint covering it when a checkpoint key is set), then\n"+
			"deletes its rows in one transaction per session and records the head it had,\n"+
			"so that `taskpilots verify` stays clean. Resumable and idempotent: run it again\n"+
			"after an interruption. Sessions with open children, a review still to score\n"+
			"or a webhook delivery pending wait for a later run.\n\nflags:")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := d.Err(); err != nil {
		return &exitError{code: 2, err: err}
	}
	if *closedBefore == "" {
		return usageErr("--closed-before is required (for example 90d)")
	}
	age, err := parseAge(*closedBefore)
	if err != nil {
		return usageErr("--closed-before %v", err)
	}
	if *dir == "" && !*dryRun {
		return usageErr("--to DIR is required")
	}
	if *batch < 1 || *limit < 0 {
		return usageErr("--batch must be at least 1 and --limit not negative")
	}
	s, err := openCurrentStore(ctx, env, *dbURL)
	if err != nil {
		return err
	}
	defer s.Close()
	var cp *models.Checkpointer
	if k, err := checkpointKey(env, *dbURL, *keyPath, false); err != nil {
		return err
	} else if k != nil {
		cp = &models.Checkpointer{Store: s, Key: k}
	} else {
		fmt.Fprintln(env.stderr, "archive: no checkpoint key: transcripts carry their hash chain but no signed checkpoint")
	}
	cutoff := s.Now().Add(-age)
	start := time.Now()
	last := start
	rep, err := s.Archive(ctx, operator(env), models.ArchiveOpts{
		ClosedBefore: cutoff, Dir: *dir, Batch: *batch, Limit: *limit, DryRun: *dryRun, Checkpointer: cp,
		Progress: func(r models.ArchiveReport) {
			if time.Since(last) >= 2*time.Second {
				last = time.Now()
				fmt.Fprintf(env.stderr, "archive: %d sessions (%d events) so far, %.0f sessions/s\n",
					r.Archived, r.Events, float64(r.Archived)/time.Since(start).Seconds())
			}
		},
	})
	if err != nil {
		return err
	}
	if *asJSON {
		return json.NewEncoder(env.stdout).Encode(rep)
	}
	if *dryRun {
		fmt.Fprintf(env.stdout, "%d sessions closed before %s would be archived\n", rep.Candidates, cutoff.Format(time.RFC3339))
		return nil
	}
	fmt.Fprintf(env.stdout, "archived %d sessions (%d events) closed before %s to %s in %.1fs",
		rep.Archived, rep.Events, cutoff.Format(time.RFC3339), *dir, time.Since(start).Seconds())
	if rep.Deferred > 0 {
		fmt.Fprintf(env.stdout, "; %d changed while archiving and wait for the next run", rep.Deferred)
	}
	fmt.Fprintln(env.stdout)
	return nil
}

func runArchiveVerify(ctx context.Context, env *cliEnv, args []string) error {
	fs := newFlagSet(env, "archive verify")
	dbURL := databaseFlag(env, fs)
	dir := fs.String("to", "", "the archive directory; required")
	pubkeys := fs.String("checkpoint-pubkey", env.getenv("TASKPILOTS_CHECKPOINT_PUBKEY"),
		"public key(s) whose checkpoint signatures count in the transcripts (env TASKPILOTS_CHECKPOINT_PUBKEY)")
	asJSON := fs.Bool("json", false, "print a JSON report as the last line of standard output")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *dir == "" {
		return usageErr("--to DIR is required")
	}
	trusted, err := models.ParsePublicKeys(*pubkeys)
	if err != nil {
		return usageErr("--checkpoint-pubkey: %v", err)
	}
	s, err := openCurrentStore(ctx, env, *dbURL)
	if err != nil {
		return err
	}
	defer s.Close()
	rep, err := s.VerifyArchive(ctx, *dir, trusted)
	if err != nil {
		return err
	}
	if *asJSON {
		if err := json.NewEncoder(env.stdout).Encode(rep); err != nil {
			return err
		}
	} else {
		for _, p := range rep.Problems {
			fmt.Fprintf(env.stdout, "%s (%s): %s\n", p.SessionID, p.File, p.Detail)
		}
		fmt.Fprintf(env.stdout, "%d archived sessions checked against %s: %s\n", rep.Sessions, *dir,
			map[bool]string{true: "no problems", false: fmt.Sprintf("%d problems", len(rep.Problems))}[len(rep.Problems) == 0])
	}
	if len(rep.Problems) > 0 {
		return &exitError{code: 1, err: fmt.Errorf("%d archived sessions do not match their files", len(rep.Problems))}
	}
	return nil
}

// sessionList collects repeated --session flags.
type sessionList []string

func (l *sessionList) String() string { return strings.Join(*l, ",") }

func (l *sessionList) Set(v string) error {
	for _, id := range strings.Split(v, ",") {
		if id = strings.TrimSpace(id); id != "" {
			*l = append(*l, id)
		}
	}
	return nil
}

func runArchiveRestore(ctx context.Context, env *cliEnv, args []string) error {
	fs := newFlagSet(env, "archive restore")
	dbURL := databaseFlag(env, fs)
	dir := fs.String("from", "", "the archive directory the files were written to; required")
	var ids sessionList
	fs.Var(&ids, "session", "restore only this archived session (repeat, or comma-separate, for several); default: every archived session whose file is in DIR")
	pubkeys := fs.String("checkpoint-pubkey", env.getenv("TASKPILOTS_CHECKPOINT_PUBKEY"),
		"public key(s) whose checkpoint signatures count in the transcripts (env TASKPILOTS_CHECKPOINT_PUBKEY)")
	asJSON := fs.Bool("json", false, "print a JSON report as the last line of standard output")
	fs.Usage = func() {
		fmt.Fprintln(env.stderr, "usage: taskpilots archive restore --from DIR [--session ID]… [flags]\n\n"+
			"Loads archived sessions back into the database from their transcript files,\n"+
			"each checked first (SHA-256 against its archive row, chain, checkpoint proof,\n"+
			"head): the events exactly as they were, the state replayed from them. A file\n"+
			"that fails a check is reported and its session stays archived (exit status 1).\n\nflags:")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *dir == "" {
		return usageErr("--from DIR is required")
	}
	trusted, err := models.ParsePublicKeys(*pubkeys)
	if err != nil {
		return usageErr("--checkpoint-pubkey: %v", err)
	}
	s, err := openCurrentStore(ctx, env, *dbURL)
	if err != nil {
		return err
	}
	defer s.Close()
	rep, err := s.RestoreArchive(ctx, operator(env), models.RestoreOpts{Dir: *dir, SessionIDs: ids, PublicKeys: trusted})
	if err != nil {
		return err
	}
	if *asJSON {
		if err := json.NewEncoder(env.stdout).Encode(rep); err != nil {
			return err
		}
	} else {
		for _, p := range rep.Problems {
			fmt.Fprintf(env.stdout, "%s (%s): not restored: %s\n", p.SessionID, p.File, p.Detail)
		}
		fmt.Fprintf(env.stdout, "restored %d sessions (%d events) from %s\n", rep.Restored, rep.Events, *dir)
	}
	if len(rep.Problems) > 0 {
		return &exitError{code: 1, err: fmt.Errorf("%d archived sessions were not restored", len(rep.Problems))}
	}
	return nil
}
