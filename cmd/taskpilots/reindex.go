package main

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/taskpilots/handoff/models"
)

func init() {
	commands["reindex"] = command{
		summary: "rebuild the bloated indexes of sessions and rewrite bloated counter tables now, as serve does every --index-upkeep-every (PostgreSQL)",
		run:     runReindex,
	}
}

// runReindex runs models.UpkeepIndexes once: for an operator who wants the
// indexes compact now (after a bulk load, before measuring sizes), or who
// runs serve with --index-upkeep-every 0 and schedules this instead.
func runReindex(ctx context.Context, env *cliEnv, args []string) error {
	fs := newFlagSet(env, "reindex")
	dbURL := databaseFlag(env, fs)
	dry := fs.Bool("dry-run", false, "only report which indexes are bloated")
	maxBloat := fs.Float64("max-bloat", 3, "rebuild an index larger than this many times what its live entries need")
	minBytes := fs.Int64("min-bytes", 8<<20, "leave indexes smaller than this many bytes alone")
	asJSON := fs.Bool("json", false, "print the report as one line of JSON")
	fs.Usage = func() {
		fmt.Fprintln(env.stderr, "usage: taskpilots reindex [--dry-run] [--max-bloat F] [--min-bytes N] [--json]\n\n"+
			"Refreshes the statistics of sessions (ANALYZE), estimates from them what each B-tree\n"+
			"index of sessions needs, and rebuilds those over --max-bloat\n"+
			"times that with REINDEX INDEX CONCURRENTLY: reads and writes go on meanwhile.\n"+
			"Drops the invalid leftovers of an interrupted rebuild first. Then rewrites\n"+
			"(VACUUM FULL, waiting at most 200 ms for its lock) the counter tables the inbox,\n"+
			"metrics and review queue read whole, when they hold over 4 times the pages their\n"+
			"rows need. PostgreSQL only.\n\nflags:")
		fs.PrintDefaults()
	}
	rest, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return usageErr("reindex takes no arguments, got %q", rest)
	}
	if *maxBloat < 1 {
		return usageErr("--max-bloat must be at least 1")
	}
	if *minBytes < 0 {
		return usageErr("--min-bytes must not be negative")
	}
	s, err := openCurrentStore(ctx, env, *dbURL)
	if err != nil {
		return err
	}
	defer s.Close()
	if s.Dialect != models.Postgres {
		return usageErr("reindex is for PostgreSQL; SQLite reuses freed index pages (VACUUM rebuilds the file)")
	}
	rep, err := s.UpkeepIndexes(ctx, models.IndexUpkeepOpts{MaxBloat: *maxBloat, MinBytes: max(*minBytes, 1), DryRun: *dry, Analyze: true})
	if err != nil {
		return err
	}
	if *asJSON {
		return json.NewEncoder(env.stdout).Encode(rep)
	}
	if rep.Skipped {
		fmt.Fprintln(env.stdout, "another process is rebuilding indexes right now; nothing done")
		return nil
	}
	for _, name := range rep.Leftovers {
		verb := "dropped"
		if *dry {
			verb = "would drop"
		}
		fmt.Fprintf(env.stdout, "%s the leftover of an interrupted rebuild: %s\n", verb, name)
	}
	after := map[string]int64{}
	for _, is := range rep.Rebuilt {
		after[is.Name] = is.After
	}
	fmt.Fprintf(env.stdout, "%-36s %12s %12s %8s %12s\n", "index", "bytes", "needs", "ratio", "after")
	for _, is := range rep.Checked {
		a := "-"
		if n, ok := after[is.Name]; ok {
			a = fmt.Sprint(n)
		}
		fmt.Fprintf(env.stdout, "%-36s %12d %12d %7.1f× %12s\n", is.Name, is.Bytes, is.Estimate, float64(is.Bytes)/float64(max(is.Estimate, 1)), a)
	}
	fmt.Fprintf(env.stdout, "%d of %d indexes over %.1f× (and %d bytes)", len(rep.Bloated), len(rep.Checked), *maxBloat, *minBytes)
	if *dry {
		fmt.Fprintln(env.stdout, "; dry run: nothing rebuilt")
	} else {
		fmt.Fprintf(env.stdout, "; %d rebuilt\n", len(rep.Rebuilt))
	}
	printCounterTables(env, rep, *dry)
	return nil
}

// printCounterTables prints the counter tables' part of the report.
func printCounterTables(env *cliEnv, rep models.IndexUpkeepReport, dry bool) {
	after := map[string]string{}
	for _, ts := range rep.TablesRewritten {
		after[ts.Name] = fmt.Sprintf("%d in %s", ts.After, ts.Took.Round(time.Millisecond/10))
	}
	fmt.Fprintf(env.stdout, "\n%-36s %12s %12s %8s %12s\n", "counter table", "rows", "pages", "needs", "after")
	for _, ts := range rep.Tables {
		a := "-"
		if n, ok := after[ts.Name]; ok {
			a = n
		}
		fmt.Fprintf(env.stdout, "%-36s %12d %12d %8d %12s\n", ts.Name, ts.Rows, ts.Pages, ts.Needs, a)
	}
	for _, name := range rep.TablesBusy {
		fmt.Fprintf(env.stdout, "%s: its writers held it past the lock wait; left for the next round\n", name)
	}
	fmt.Fprintf(env.stdout, "%d of %d counter tables bloated", len(rep.TablesBloated), len(rep.Tables))
	if dry {
		fmt.Fprintln(env.stdout, "; dry run: nothing rewritten")
	} else {
		fmt.Fprintf(env.stdout, "; %d rewritten\n", len(rep.TablesRewritten))
	}
}
