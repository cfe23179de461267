package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"strconv"

	"github.com/taskpilots/handoff/cmd/taskpilots/cliout"
	"github.com/taskpilots/handoff/models"
)

func init() {
	commands["checkpoint"] = command{
		summary: "sign a checkpoint over every session's head now; `checkpoint pubkey` prints the public key, `checkpoint show` the newest",
		run:     runCheckpoint,
	}
}

// checkpointKeyFlag registers --checkpoint-key, the key file's path.
func checkpointKeyFlag(fs *flag.FlagSet, d *envDefaults, p *string) {
	fs.StringVar(p, "checkpoint-key", d.String("TASKPILOTS_CHECKPOINT_KEY_FILE", ""),
		"file holding the Ed25519 key that signs checkpoints, created (mode 0600) when missing; default for SQLite: "+
			"<database>.checkpoint-key next to the file; PostgreSQL: none, checkpoints off. TASKPILOTS_CHECKPOINT_KEY "+
			"may hold the key itself instead (env TASKPILOTS_CHECKPOINT_KEY_FILE)")
}

// checkpointKey finds the signing key: the key text in
// TASKPILOTS_CHECKPOINT_KEY, else the file at path, else the default file
// next to a SQLite database. create makes a missing file (serve, checkpoint);
// verify only reads. It returns nil when there is no key to use.
func checkpointKey(env *cliEnv, databaseURL, path string, create bool) (*models.CheckpointKey, error) {
	if text := env.getenv("TASKPILOTS_CHECKPOINT_KEY"); text != "" {
		k, err := models.ParseCheckpointKey(text)
		if err != nil {
			return nil, fmt.Errorf("TASKPILOTS_CHECKPOINT_KEY: %w", err)
		}
		return k, nil
	}
	if path == "" {
		def, ok := models.DefaultCheckpointKeyPath(databaseURL)
		if !ok {
			return nil, nil
		}
		path = def
	}
	if !create {
		if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
	}
	k, created, warn, err := models.LoadCheckpointKey(path)
	if err != nil {
		return nil, err
	}
	if created {
		env.log.Info("created the checkpoint signing key; back it up, and publish its public key", "path", path, "public_key", k.PublicKey)
	}
	if warn != "" {
		env.log.Warn(warn)
	}
	return k, nil
}

func runCheckpoint(ctx context.Context, env *cliEnv, args []string) error {
	flags := newFlagSet(env, "checkpoint")
	d := newEnvDefaults(env)
	dbURL := databaseFlag(env, flags)
	keyPath := new(string)
	checkpointKeyFlag(flags, d, keyPath)
	flags.Usage = func() {
		fmt.Fprintln(env.stderr, "usage: taskpilots checkpoint [flags]            sign a checkpoint now (if anything changed)\n"+
			"       taskpilots checkpoint pubkey [flags]     print the public key that verifiers should pin\n"+
			"       taskpilots checkpoint show [SEQ] [flags] print the newest (or SEQ-th) signed checkpoint note\n\n"+
			"A checkpoint is a signed Merkle root over every session's id, event count and last hash;\n"+
			"`taskpilots verify` checks the log against the newest one.\n\nflags:")
		flags.PrintDefaults()
	}
	pos, err := parseArgs(flags, args)
	if err != nil {
		return err
	}
	if err := d.Err(); err != nil {
		return &exitError{code: 2, err: err}
	}
	action := ""
	if len(pos) > 0 {
		action = pos[0]
	}
	switch {
	case action == "pubkey" && len(pos) == 1:
		k, err := checkpointKey(env, *dbURL, *keyPath, true)
		if err != nil {
			return err
		}
		if k == nil {
			return &exitError{code: 1, err: models.ErrCheckpointsOff}
		}
		fmt.Fprintln(env.stdout, k.PublicKey)
		return nil
	case action == "show" && len(pos) <= 2:
		return showCheckpoint(ctx, env, *dbURL, pos[1:])
	case action != "":
		return usageErr("unknown action %q: want no action, pubkey or show", action)
	}

	k, err := checkpointKey(env, *dbURL, *keyPath, true)
	if err != nil {
		return err
	}
	if k == nil {
		return &exitError{code: 1, err: models.ErrCheckpointsOff}
	}
	s, err := openCurrentStore(ctx, env, *dbURL)
	if err != nil {
		return err
	}
	defer s.Close()
	c, written, err := s.WriteCheckpoint(ctx, k, "cli")
	var refused *models.CheckpointRefusedError
	switch {
	case errors.As(err, &refused):
		for _, p := range refused.Problems {
			fmt.Fprintln(env.stdout, p.String())
		}
		return &exitError{code: 1, err: fmt.Errorf("not signed: %s since checkpoint %d; run `taskpilots verify`",
			cliout.Plural(len(refused.Problems), "problem", "problems"), refused.Seq)}
	case errors.Is(err, models.ErrCheckpointRace):
		return &exitError{code: 1, err: fmt.Errorf("%w; run the command again", err)}
	case err != nil:
		return err
	case !written:
		fmt.Fprintf(env.stdout, "nothing changed since checkpoint %d (%s, %s)\n", c.Seq,
			cliout.Plural(int(c.Sessions), "session", "sessions"), cliout.Plural(int(c.Events), "event", "events"))
		return nil
	}
	fmt.Fprintf(env.stdout, "checkpoint %d signed: %s, %s, root %s\n", c.Seq,
		cliout.Plural(int(c.Sessions), "session", "sessions"), cliout.Plural(int(c.Events), "event", "events"), c.Root)
	return nil
}

// showCheckpoint prints a signed note as stored, for a witness to keep.
func showCheckpoint(ctx context.Context, env *cliEnv, dbURL string, args []string) error {
	s, err := openCurrentStore(ctx, env, dbURL)
	if err != nil {
		return err
	}
	defer s.Close()
	var c models.Checkpoint
	if len(args) == 1 {
		seq, perr := strconv.ParseInt(args[0], 10, 64)
		if perr != nil || seq < 1 {
			return usageErr("checkpoint show: %q is not a checkpoint number", args[0])
		}
		c, err = s.GetCheckpoint(ctx, seq)
	} else {
		c, err = s.LatestCheckpoint(ctx)
	}
	if err != nil {
		return err
	}
	fmt.Fprint(env.stdout, c.Note)
	return nil
}
