package drill

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/taskpilots/handoff/models"
)

// serverProc is one `taskpilots serve` process the drill started.
type serverProc struct {
	n       int
	addr    string
	logPath string
	cmd     *exec.Cmd
	exited  chan struct{}
	waitErr error
}

// serverSet runs the drill's own server processes: the same binary, on the
// drill's database, on free loopback ports, sharing one login-cookie key so
// the console login holds across servers and restarts.
type serverSet struct {
	bin        string
	dbURL      string
	sessionKey string
	logDir     string
	mu         sync.Mutex
	procs      []*serverProc
}

// freeAddr returns a loopback address with a port nobody listens on now.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	addr := ln.Addr().String()
	return addr, ln.Close()
}

// drillBinary is the binary to run as servers: this one.
func drillBinary() string {
	if p, err := os.Executable(); err == nil {
		return p
	}
	return os.Args[0]
}

func (s *serverSet) urls() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, len(s.procs))
	for i, p := range s.procs {
		out[i] = "http://" + p.addr
	}
	return out
}

// start starts server n on addr (a restart reuses its address) and waits
// until it answers /readyz.
func (s *serverSet) start(ctx context.Context, n int, addr string) (*serverProc, error) {
	logPath := filepath.Join(s.logDir, fmt.Sprintf("server-%d.log", n))
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	fmt.Fprintf(logf, "---- %s: drill starts server %d on %s\n", time.Now().UTC().Format(time.RFC3339Nano), n, addr)
	cmd := exec.Command(s.bin, "serve", "--demo=false", "--addr", addr, "--database-url", s.dbURL, "--db-max-conns", "10")
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = append(os.Environ(), "TASKPILOTS_SESSION_KEY="+s.sessionKey, "TASKPILOTS_LOG_LEVEL=warn")
	cmd.SysProcAttr = childProcAttr()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start server %d: %w", n, err)
	}
	p := &serverProc{n: n, addr: addr, logPath: logPath, cmd: cmd, exited: make(chan struct{})}
	go func() { p.waitErr = cmd.Wait(); close(p.exited) }()
	ready := time.NewTimer(60 * time.Second)
	defer ready.Stop()
	for {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p, nil
			}
		}
		select {
		case <-p.exited:
			return nil, fmt.Errorf("server %d exited before it was ready (%v); its log: %s", n, p.waitErr, logPath)
		case <-ctx.Done():
			_ = cmd.Process.Kill()
			return nil, fmt.Errorf("server %d: %w", n, ctx.Err())
		case <-ready.C:
			_ = cmd.Process.Kill()
			return nil, fmt.Errorf("server %d not ready after 60s; its log: %s", n, logPath)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// startAll starts n servers. A server that cannot start on the port it was
// given (another process took it meanwhile) gets another.
func (s *serverSet) startAll(ctx context.Context, n int) error {
	for i := range n {
		var (
			p   *serverProc
			err error
		)
		for try := 0; try < 3 && (try == 0 || err != nil && ctx.Err() == nil); try++ {
			var addr string
			if addr, err = freeAddr(); err != nil {
				return err
			}
			p, err = s.start(ctx, i, addr)
		}
		if err != nil {
			return err
		}
		s.mu.Lock()
		s.procs = append(s.procs, p)
		s.mu.Unlock()
	}
	return nil
}

// killAndRestart kills server n with SIGKILL (no graceful shutdown: open
// requests and leases die with it) and starts it again on the same address,
// or on a new one (told to moved) when another process took the port
// meanwhile. It returns how long the server was away.
func (s *serverSet) killAndRestart(ctx context.Context, n int, moved func(n int, base string)) (time.Duration, error) {
	s.mu.Lock()
	p := s.procs[n]
	s.mu.Unlock()
	start := time.Now()
	if err := p.cmd.Process.Kill(); err != nil {
		return 0, fmt.Errorf("kill server %d: %w", n, err)
	}
	<-p.exited
	// Let clients notice the server is gone before it comes back.
	select {
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-time.After(300 * time.Millisecond):
	}
	np, err := s.start(ctx, n, p.addr)
	if err != nil && ctx.Err() == nil {
		addr, aerr := freeAddr()
		if aerr != nil {
			return 0, errors.Join(err, aerr)
		}
		if np, err = s.start(ctx, n, addr); err == nil {
			moved(n, "http://"+addr)
		}
	}
	if err != nil {
		return 0, err
	}
	s.mu.Lock()
	s.procs[n] = np
	s.mu.Unlock()
	return time.Since(start), nil
}

// stopAll stops every server gracefully (SIGTERM), killing those that do
// not stop within 20 seconds.
func (s *serverSet) stopAll() {
	s.mu.Lock()
	procs := append([]*serverProc(nil), s.procs...)
	s.procs = nil
	s.mu.Unlock()
	for _, p := range procs {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, p := range procs {
		select {
		case <-p.exited:
		case <-time.After(20 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
	}
}

// logTails returns the end of each server's log.
func (s *serverSet) logTails(n int) string {
	files, _ := filepath.Glob(filepath.Join(s.logDir, "server-*.log"))
	sort.Strings(files)
	var b strings.Builder
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		if len(data) > n {
			data = data[len(data)-n:]
		}
		fmt.Fprintf(&b, "==== %s (last %d bytes)\n%s\n", f, len(data), bytes.ToValidUTF8(data, []byte("?")))
	}
	return b.String()
}

// localDatabase reports whether a PostgreSQL URL names this machine, so
// that the drill may restart its server.
func localDatabase(raw string) bool {
	u, err := url.Parse(raw)
	if err != nil {
		return false
	}
	host := u.Hostname()
	if h := u.Query().Get("host"); h != "" {
		host = h
	}
	switch {
	case host == "", host == "localhost", strings.HasPrefix(host, "/"):
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// shellQuote quotes s for sh.
func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r == '/' || r == '-' || r == '_' || r == '.' || r == ':' || r == '=' ||
			(r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9'))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// restartCommand works out how to restart the PostgreSQL server behind s.
// It asks the server for its data directory: a Debian cluster (one whose
// /etc/postgresql/VER/NAME/postgresql.conf names that directory) restarts
// with pg_ctlcluster; any other local cluster (a throwaway one made with
// initdb) with pg_ctl, as the directory's owner. When the server will not
// tell, the one Debian cluster of this machine is assumed.
func restartCommand(ctx context.Context, s *models.Store) (string, error) {
	var dataDir string
	err := s.DB.WithContext(ctx).Raw(`SELECT current_setting('data_directory')`).Scan(&dataDir).Error
	if err == nil && dataDir != "" {
		if cmd, ok := debianCluster(dataDir); ok {
			return cmd, nil
		}
		return pgCtlRestart(dataDir)
	}
	vers, _ := filepath.Glob("/etc/postgresql/*/main")
	if len(vers) == 1 {
		return fmt.Sprintf("pg_ctlcluster --skip-systemctl-redirect %s main restart", filepath.Base(filepath.Dir(vers[0]))), nil
	}
	if err == nil {
		err = errors.New("the server did not name its data directory")
	}
	return "", fmt.Errorf("cannot tell how to restart the database (%v); give --restart-db-command", err)
}

// debianCluster returns the pg_ctlcluster command of the Debian cluster
// whose data directory is dataDir.
func debianCluster(dataDir string) (string, bool) {
	confs, _ := filepath.Glob("/etc/postgresql/*/*/postgresql.conf")
	for _, conf := range confs {
		b, err := os.ReadFile(conf)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			line = strings.TrimSpace(line)
			k, v, ok := strings.Cut(line, "=")
			if !ok || strings.TrimSpace(k) != "data_directory" {
				continue
			}
			v, _, _ = strings.Cut(strings.TrimSpace(v), "#")
			v = strings.Trim(strings.TrimSpace(v), `'"`)
			if filepath.Clean(v) == filepath.Clean(dataDir) {
				name := filepath.Base(filepath.Dir(conf))
				ver := filepath.Base(filepath.Dir(filepath.Dir(conf)))
				return fmt.Sprintf("pg_ctlcluster --skip-systemctl-redirect %s %s restart", ver, name), true
			}
		}
	}
	return "", false
}

// pgCtlRestart returns a pg_ctl restart of the cluster in dataDir, run as
// its owner when the drill runs as root (PostgreSQL refuses root).
func pgCtlRestart(dataDir string) (string, error) {
	fi, err := os.Stat(dataDir)
	if err != nil {
		return "", fmt.Errorf("the database's data directory %s is not on this machine (%v); give --restart-db-command", dataDir, err)
	}
	ver, err := os.ReadFile(filepath.Join(dataDir, "PG_VERSION"))
	if err != nil {
		return "", fmt.Errorf("read %s/PG_VERSION: %w", dataDir, err)
	}
	pgCtl := filepath.Join("/usr/lib/postgresql", strings.TrimSpace(string(ver)), "bin", "pg_ctl")
	if _, err := os.Stat(pgCtl); err != nil {
		if p, lerr := exec.LookPath("pg_ctl"); lerr == nil {
			pgCtl = p
		} else {
			return "", fmt.Errorf("pg_ctl of PostgreSQL %s not found; give --restart-db-command", strings.TrimSpace(string(ver)))
		}
	}
	cmd := fmt.Sprintf("%s -D %s -m fast -w -t 60 restart", shellQuote(pgCtl), shellQuote(dataDir))
	if uid, ok := fileOwner(fi); ok && os.Getuid() == 0 && uid != 0 {
		owner := strconv.FormatUint(uint64(uid), 10)
		if u, err := user.LookupId(owner); err == nil {
			owner = u.Username
		}
		cmd = "runuser -u " + shellQuote(owner) + " -- " + cmd
	}
	return cmd, nil
}

// runRestart runs the restart command. Its output goes to a file, not a
// pipe: a restarted postmaster inherits the descriptors and keeps them open.
func runRestart(ctx context.Context, command, logPath string) error {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	fmt.Fprintf(logf, "---- %s: %s\n", time.Now().UTC().Format(time.RFC3339Nano), command)
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(cctx, "sh", "-c", command)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Run(); err != nil {
		tail, _ := os.ReadFile(logPath)
		if len(tail) > 2000 {
			tail = tail[len(tail)-2000:]
		}
		return fmt.Errorf("restart the database with %q: %w\n%s", command, err, tail)
	}
	return nil
}
