package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"

	"github.com/taskpilots/handoff/cmd/taskpilots/cliout"
	"github.com/taskpilots/handoff/models"
)

func init() {
	commands["verify"] = command{
		summary: "replay every session and recompute its hash chain (exit 1 on problems)",
		run:     runVerify,
	}
}

// verifyGCPercent is verify's GC target (see runVerify).
const verifyGCPercent = 300

// verifyJSON is the --json report: one line, the last one on stdout.
type verifyJSON struct {
	OK        bool             `json:"ok"`
	Sessions  int64            `json:"sessions"`
	Events    int64            `json:"events"`
	Problems  []models.Problem `json:"problems"`
	ElapsedMS float64          `json:"elapsed_ms"`
	// Checkpoints is what the checkpoint checks covered.
	Checkpoints *models.CheckpointSummary `json:"checkpoints,omitempty"`
}

func runVerify(ctx context.Context, env *cliEnv, args []string) error {
	fs := newFlagSet(env, "verify")
	dbURL := databaseFlag(env, fs)
	asJSON := fs.Bool("json", false, "print a JSON report as the last line of standard output")
	quiet := fs.Bool("quiet", false, "no progress on standard error")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the run to this file (go tool pprof reads it)")
	d := newEnvDefaults(env)
	workers := fs.Int("workers", d.Int("TASKPILOTS_VERIFY_WORKERS", 0),
		"sessions checked in parallel; 0 means one per CPU (GOMAXPROCS) (env TASKPILOTS_VERIFY_WORKERS)")
	pubkeys := fs.String("checkpoint-pubkey", d.String("TASKPILOTS_CHECKPOINT_PUBKEY", ""),
		"public key(s) whose checkpoint signatures count, comma-separated (`taskpilots checkpoint pubkey` prints the server's); "+
			"default: the key of --checkpoint-key, else the keys recorded in the database, which is reported (env TASKPILOTS_CHECKPOINT_PUBKEY)")
	keyPath := new(string)
	checkpointKeyFlag(fs, d, keyPath)
	allCheckpoints := fs.Bool("all-checkpoints", false, "check the log against every checkpoint, not only the newest")
	transcript := fs.String("transcript", "", "check this exported transcript offline, without a database: its chain, "+
		"and that it reaches the event count and head its checkpoint signed")
	fs.Usage = func() {
		fmt.Fprintln(env.stderr, "usage: taskpilots verify [flags] [SESSION_ID...]\n"+
			"       taskpilots verify --transcript FILE [--checkpoint-pubkey KEY]\n\n"+
			"Replays every session's events (or only the given sessions) with the same\n"+
			"function as live writes, compares the result with the stored state and\n"+
			"recomputes each hash chain; then checks the log against the newest signed\n"+
			"checkpoint (sessions deleted, cut short or rewritten since). With --transcript,\n"+
			"checks one exported transcript offline. Exit status 1 when anything is wrong.\n\nflags:")
		fs.PrintDefaults()
	}
	ids, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if err := d.Err(); err != nil {
		return &exitError{code: 2, err: err}
	}
	if *workers < 0 {
		return usageErr("--workers: must be 0 (one per CPU) or more")
	}
	trusted, err := models.ParsePublicKeys(*pubkeys)
	if err != nil {
		return usageErr("--checkpoint-pubkey: %v", err)
	}
	if *transcript != "" {
		if len(ids) > 0 {
			return usageErr("--transcript takes no session ids")
		}
		return verifyTranscriptFile(env, *transcript, trusted, *asJSON)
	}
	if len(trusted) == 0 {
		k, err := checkpointKey(env, *dbURL, *keyPath, false)
		if err != nil {
			return err
		}
		if k != nil {
			trusted = []string{k.PublicKey}
		}
	}
	s, err := openCurrentStore(ctx, env, *dbURL)
	if err != nil {
		return err
	}
	defer s.Close()

	// An unknown id would silently verify nothing; say so instead.
	for _, id := range ids {
		if _, err := s.GetSession(ctx, id); err != nil {
			return err
		}
	}

	opts := models.VerifyOpts{SessionIDs: ids, Workers: *workers,
		Checkpoints: &models.CheckpointVerifyOpts{PublicKeys: trusted, All: *allCheckpoints}}
	var finish func()
	if !*quiet {
		opts.Progress, finish = verifyProgress(env.stderr, cliout.IsTerminal(env.stderr))
	}
	stopProfile, err := startCPUProfile(*cpuProfile)
	if err != nil {
		return err
	}
	// Verify allocates short-lived event batches fast over a small live
	// heap, so at Go's default GC target the collector ran several times a
	// second. A target three times higher cut verify's CPU by about 12 %
	// (about 190,000 against 166,000 events/s at 1 M events on 2 cores) for
	// about 60 MB more memory. GOGC, when set, wins (the runtime reads the
	// process environment, not the command's).
	if _, set := os.LookupEnv("GOGC"); !set {
		defer debug.SetGCPercent(debug.SetGCPercent(verifyGCPercent))
	}
	rep, err := s.Verify(ctx, opts)
	stopProfile()
	if finish != nil {
		finish()
	}
	if err != nil {
		return fmt.Errorf("verify: %w", err)
	}

	for _, p := range rep.Problems {
		fmt.Fprintln(env.stdout, p.String())
	}
	verdict := "no problems"
	if n := len(rep.Problems); n > 0 {
		verdict = cliout.Plural(n, "problem", "problems")
	}
	if cs := rep.Checkpoints; cs != nil {
		switch {
		case cs.Latest == nil && cs.Checkpoints == 0:
			fmt.Fprintln(env.stdout, "no signed checkpoint yet: deleted sessions or cut-off tails would not show (`taskpilots checkpoint` signs one)")
		case cs.Latest == nil:
			fmt.Fprintln(env.stdout, "no checkpoint with a valid trusted signature")
		default:
			fmt.Fprintf(env.stdout, "checked against checkpoint %d of %s (%s, %s)\n", cs.Latest.Seq, cs.Latest.CreatedAt.String(),
				cliout.Plural(int(cs.Latest.Sessions), "session", "sessions"), cliout.Plural(int(cs.Latest.Events), "event", "events"))
		}
		if cs.KeysFromDatabase && cs.Checkpoints > 0 {
			fmt.Fprintln(env.stdout, "note: checkpoint signatures were checked with the public keys recorded in the database, "+
				"which whoever rewrote it could replace; pass --checkpoint-pubkey with the key you trust")
		}
		if cs.Untrusted > 0 {
			fmt.Fprintf(env.stdout, "note: %s signed by other keys (rotated?) not checked; pass their public keys too\n",
				cliout.Plural(int(cs.Untrusted), "older checkpoint", "older checkpoints"))
		}
	}
	rate := ""
	if sec := rep.Elapsed.Seconds(); sec > 0 && rep.Events > 0 {
		rate = fmt.Sprintf(" (%.0f events/s)", float64(rep.Events)/sec)
	}
	fmt.Fprintf(env.stdout, "verified %s, %s in %s%s: %s\n",
		cliout.Plural(int(rep.Sessions), "session", "sessions"), cliout.Plural(int(rep.Events), "event", "events"),
		rep.Elapsed.Round(time.Millisecond), rate, verdict)
	if *asJSON {
		out := verifyJSON{OK: rep.OK(), Sessions: rep.Sessions, Events: rep.Events,
			Problems: rep.Problems, ElapsedMS: float64(rep.Elapsed.Microseconds()) / 1000, Checkpoints: rep.Checkpoints}
		if out.Problems == nil {
			out.Problems = []models.Problem{}
		}
		b, err := json.Marshal(out)
		if err != nil {
			return fmt.Errorf("encode report: %w", err)
		}
		fmt.Fprintln(env.stdout, string(b))
	}
	if !rep.OK() {
		return &exitError{code: 1, err: fmt.Errorf("%s found: the event log or the stored state has been changed outside TaskPilots", cliout.Plural(len(rep.Problems), "problem", "problems"))}
	}
	return nil
}

// verifyTranscriptFile checks an exported transcript offline.
func verifyTranscriptFile(env *cliEnv, path string, trusted []string, asJSON bool) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	rep, err := models.VerifyTranscript(f, trusted)
	if err != nil {
		return &exitError{code: 1, err: err}
	}
	for _, p := range rep.Problems {
		fmt.Fprintln(env.stdout, p.String())
	}
	for _, n := range rep.Notes {
		fmt.Fprintln(env.stdout, "note: "+n)
	}
	verdict := "no problems"
	if n := len(rep.Problems); n > 0 {
		verdict = cliout.Plural(n, "problem", "problems")
	}
	cover := "no checkpoint"
	if rep.Checkpoint > 0 && rep.Covered > 0 {
		cover = fmt.Sprintf("checkpoint %d covers %s", rep.Checkpoint, cliout.Plural(int(rep.Covered), "event", "events"))
	} else if rep.Checkpoint > 0 {
		cover = fmt.Sprintf("checkpoint %d not verified", rep.Checkpoint)
	}
	fmt.Fprintf(env.stdout, "transcript of %s: %s, %s: %s\n", rep.SessionID, cliout.Plural(int(rep.Events), "event", "events"), cover, verdict)
	if asJSON {
		if rep.Problems == nil {
			rep.Problems = []models.Problem{}
		}
		b, err := json.Marshal(rep)
		if err != nil {
			return fmt.Errorf("encode report: %w", err)
		}
		fmt.Fprintln(env.stdout, string(b))
	}
	if !rep.OK() {
		return &exitError{code: 1, err: fmt.Errorf("%s found: the transcript differs from what was exported and signed", cliout.Plural(len(rep.Problems), "problem", "problems"))}
	}
	return nil
}

// verifyProgress returns the progress callback of a verify run and what to
// call when it ends. On a terminal it draws a bar with
// github.com/schollz/progressbar (width-aware, throttled redraws, rate and
// time left: the details a hand-rolled \r line got wrong on narrow or
// resized terminals); elsewhere (CI logs, files, pipes) no bar, only the
// occasional plain line of progressWriter, and the summary line on stdout.
func verifyProgress(w io.Writer, tty bool) (func(done, total int64), func()) {
	if !tty {
		pw := newProgressWriter(w, false, time.Now)
		return pw.update, pw.finish
	}
	var bar *progressbar.ProgressBar
	update := func(done, total int64) {
		if bar == nil {
			bar = progressbar.NewOptions64(total,
				progressbar.OptionSetWriter(w),
				progressbar.OptionSetDescription("verify"),
				progressbar.OptionShowCount(),
				progressbar.OptionSetItsString("sessions"),
				progressbar.OptionShowIts(),
				progressbar.OptionSetPredictTime(true),
				progressbar.OptionFullWidth(),
				progressbar.OptionThrottle(100*time.Millisecond),
			)
		}
		_ = bar.Set64(done) // writes to stderr; a failed redraw is not a verify failure
	}
	finish := func() {
		if bar != nil {
			_ = bar.Finish()
			fmt.Fprintln(w)
		}
	}
	return update, finish
}

// progressWriter reports verification progress. On a terminal it rewrites
// one line with \r; elsewhere (CI logs, files) it writes a line at most
// every two seconds or each time another tenth is done, so logs stay short.
type progressWriter struct {
	w        io.Writer
	tty      bool
	now      func() time.Time
	start    time.Time
	last     time.Time
	lastTen  int64 // tenths reported so far
	done     int64
	total    int64
	wroteTTY bool
}

// progressInterval is the least time between two progress lines in a log.
const progressInterval = 2 * time.Second

func newProgressWriter(w io.Writer, tty bool, now func() time.Time) *progressWriter {
	t := now()
	return &progressWriter{w: w, tty: tty, now: now, start: t, last: t}
}

func (p *progressWriter) update(done, total int64) {
	p.done, p.total = done, total
	t := p.now()
	if p.tty {
		// Redrawing is cheap, but not free over ssh: a few times a second.
		if t.Sub(p.last) < 100*time.Millisecond && done < total {
			return
		}
		p.last = t
		fmt.Fprintf(p.w, "\r%s", p.line(t))
		p.wroteTTY = true
		return
	}
	var tenth int64
	if total > 0 {
		tenth = done * 10 / total
	}
	if t.Sub(p.last) >= progressInterval || tenth > p.lastTen {
		p.last, p.lastTen = t, tenth
		fmt.Fprintln(p.w, p.line(t))
	}
}

// finish ends the terminal line so that the summary starts on its own.
func (p *progressWriter) finish() {
	if p.wroteTTY {
		fmt.Fprintf(p.w, "\r%s\n", p.line(p.now()))
	}
}

func (p *progressWriter) line(t time.Time) string {
	pct := 100.0
	if p.total > 0 {
		pct = float64(p.done) * 100 / float64(p.total)
	}
	rate := 0.0
	if el := t.Sub(p.start).Seconds(); el > 0 {
		rate = float64(p.done) / el
	}
	s := fmt.Sprintf("verify: %d/%d sessions (%.0f%%), %.0f sessions/s", p.done, p.total, pct, rate)
	if p.tty {
		// Pad over the remains of a longer previous line.
		s += strings.Repeat(" ", 4)
	}
	return s
}
