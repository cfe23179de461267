package storetest

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

// ReplicaPair is a throwaway PostgreSQL primary (wal_level=replica) and a
// streaming-replication standby made from it with pg_basebackup -R, each on
// a free port of 127.0.0.1, in a temporary directory, like
// scripts/test-postgres.sh's throwaway cluster: the shared server at 5432 is
// never touched. As root the binaries run as the postgres OS user (initdb
// and postgres refuse root).
type ReplicaPair struct {
	PrimaryURL, StandbyURL string
	t                      testing.TB
	bin, dir, sock         string
	primaryPort            int
	standbyPort            int
	runAs                  string // "" or "postgres"
}

// PGBinDir is the newest /usr/lib/postgresql/*/bin with initdb, or the
// directory of initdb on PATH, for tests that start a cluster of their own
// (the replica pair here, the drill's in cmd/taskpilots). Without one the
// test fails, saying what to install: these tests never skip.
func PGBinDir(t testing.TB) string {
	t.Helper()
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool {
		vi, _ := strconv.Atoi(filepath.Base(filepath.Dir(dirs[i])))
		vj, _ := strconv.Atoi(filepath.Base(filepath.Dir(dirs[j])))
		return vi > vj
	})
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(p)
	}
	t.Fatal("this test starts a PostgreSQL cluster of its own, and PostgreSQL's server binaries (initdb) are not installed: " +
		"install Debian's postgresql package (as root: apt-get install -y postgresql; `make test` does it through scripts/test-postgres.sh)")
	return ""
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// StartReplicaPair starts a primary and its standby, with a database named
// test, and stops and removes both when the test ends. Like the other
// PostgreSQL tests it does not skip: without PostgreSQL's server binaries,
// or as root without a postgres OS user, the test fails and says what to
// install.
func StartReplicaPair(t testing.TB) *ReplicaPair {
	t.Helper()
	p := &ReplicaPair{t: t, bin: PGBinDir(t)}
	if os.Geteuid() == 0 {
		if _, err := user.Lookup("postgres"); err != nil {
			t.Fatal("running as root, the replica pair's servers run as the postgres OS user, and there is none: apt-get install -y postgresql creates it")
		}
		p.runAs = "postgres"
	}
	base := "" // $TMPDIR; as root /tmp, which the postgres user can reach
	if p.runAs != "" {
		base = "/tmp"
	}
	dir, err := os.MkdirTemp(base, "taskpilots-replica-")
	if err != nil {
		t.Fatal(err)
	}
	p.dir = dir
	p.sock = filepath.Join(dir, "sock")
	if err := os.Mkdir(p.sock, 0o700); err != nil {
		t.Fatal(err)
	}
	if p.runAs != "" {
		p.run("chown", "-R", "postgres:", dir)
	}
	t.Cleanup(p.destroy)

	p.pg("initdb", "-D", p.data("primary"), "-U", "postgres", "--auth=trust", "--encoding=UTF8", "--locale=C")
	p.primaryPort = freePort(t)
	p.start("primary", p.primaryPort, "-c wal_level=replica -c max_wal_senders=4 -c wal_keep_size=64MB")
	p.PrimaryURL = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/test?sslmode=disable", p.primaryPort)
	admin, err := sql.Open("pgx", fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", p.primaryPort))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(`CREATE DATABASE test`); err != nil {
		admin.Close()
		t.Fatalf("create database on the primary: %v", err)
	}
	admin.Close()

	p.pg("pg_basebackup", "-h", "127.0.0.1", "-p", strconv.Itoa(p.primaryPort), "-U", "postgres",
		"-D", p.data("standby"), "-R", "-X", "stream", "-c", "fast")
	p.standbyPort = freePort(t)
	p.StartStandby()
	p.StandbyURL = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/test?sslmode=disable", p.standbyPort)
	return p
}

func (p *ReplicaPair) data(name string) string { return filepath.Join(p.dir, name) }

// common settings: durability is pointless here, speed is not.
const pairOpts = "-c listen_addresses=127.0.0.1 -c max_connections=60 -c fsync=off -c synchronous_commit=off"

func (p *ReplicaPair) start(name string, port int, extra string) {
	p.t.Helper()
	p.pg("pg_ctl", "-D", p.data(name), "-l", filepath.Join(p.dir, name+".log"), "-w", "-t", "120",
		"-o", fmt.Sprintf("-p %d -k %s %s %s", port, p.sock, pairOpts, extra), "start")
}

// StartStandby starts the standby (again).
func (p *ReplicaPair) StartStandby() {
	p.t.Helper()
	p.start("standby", p.standbyPort, "-c hot_standby=on")
}

// StopStandby stops the standby (fast shutdown: its clients are cut off).
func (p *ReplicaPair) StopStandby() {
	p.t.Helper()
	p.pg("pg_ctl", "-D", p.data("standby"), "-m", "fast", "-w", "stop")
}

// Standby is a connection to the standby, for pg_wal_replay_pause() and
// resume; closed when the test ends.
func (p *ReplicaPair) Standby() *sql.DB {
	db, err := sql.Open("pgx", p.StandbyURL)
	if err != nil {
		p.t.Fatal(err)
	}
	p.t.Cleanup(func() { db.Close() })
	return db
}

// WaitReplayed waits until the standby has replayed everything the primary
// has written so far.
func (p *ReplicaPair) WaitReplayed(ctx context.Context) {
	p.t.Helper()
	prim, err := sql.Open("pgx", p.PrimaryURL)
	if err != nil {
		p.t.Fatal(err)
	}
	defer prim.Close()
	var target string
	if err := prim.QueryRowContext(ctx, `SELECT pg_current_wal_insert_lsn()::text`).Scan(&target); err != nil {
		p.t.Fatal(err)
	}
	sb, err := sql.Open("pgx", p.StandbyURL)
	if err != nil {
		p.t.Fatal(err)
	}
	defer sb.Close()
	deadline := time.Now().Add(60 * time.Second)
	for {
		var ok bool
		err := sb.QueryRowContext(ctx, `SELECT pg_last_wal_replay_lsn() >= $1::pg_lsn`, target).Scan(&ok)
		if err == nil && ok {
			return
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("the standby did not replay up to %s: %v", target, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (p *ReplicaPair) destroy() {
	for _, name := range []string{"standby", "primary"} {
		if _, err := os.Stat(filepath.Join(p.data(name), "postmaster.pid")); err == nil {
			args := []string{"-D", p.data(name), "-m", "immediate", "-w", "stop"}
			_ = p.command(filepath.Join(p.bin, "pg_ctl"), args...).Run()
		}
	}
	if os.Getenv("TASKPILOTS_KEEP_REPLICA") == "" {
		os.RemoveAll(p.dir)
	}
}

func (p *ReplicaPair) command(name string, args ...string) *exec.Cmd {
	if p.runAs != "" {
		return exec.Command("runuser", append([]string{"-u", p.runAs, "--", name}, args...)...)
	}
	return exec.Command(name, args...)
}

// pg runs one of PostgreSQL's programs as the cluster's owner.
func (p *ReplicaPair) pg(prog string, args ...string) {
	p.t.Helper()
	out, err := p.command(filepath.Join(p.bin, prog), args...).CombinedOutput()
	if err != nil {
		logs := ""
		for _, n := range []string{"primary", "standby"} {
			if b, rerr := os.ReadFile(filepath.Join(p.dir, n+".log")); rerr == nil {
				logs += fmt.Sprintf("\n--- %s.log ---\n%s", n, tail(string(b), 2000))
			}
		}
		p.t.Fatalf("%s %s: %v\n%s%s", prog, strings.Join(args, " "), err, out, logs)
	}
}

func (p *ReplicaPair) run(name string, args ...string) {
	p.t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		p.t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
