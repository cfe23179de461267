package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// The webhook receiver of `bench --webhook-rounds` runs in a process of its
// own (this binary, `bench --as-webhook-receiver`), so that the bench
// process's CPU, which the webhook comparison measures, is the product's
// delivery work and not the receiver's, which in production runs on another
// machine. It still shares the host's cores, so it runs at a low priority
// (--webhook-receiver-nice, default 19): it gets what the product leaves
// idle, as a receiver elsewhere would take nothing from it. At nice 0 the
// throughput ratio also pays for the receiver's CPU; the CPU share never
// does.

// serveBenchReceiver answers every POST with 204 and counts it; GET /count
// tells the count. It prints its address on stdout and stops when stdin
// closes (its parent bench ended) or ctx is done.
func serveBenchReceiver(ctx context.Context, env *cliEnv) error {
	var received atomic.Int64
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			fmt.Fprint(w, received.Load())
			return
		}
		_, _ = io.Copy(io.Discard, r.Body)
		received.Add(1)
		w.WriteHeader(http.StatusNoContent)
	})}
	go srv.Serve(ln)
	defer srv.Close()
	fmt.Fprintln(env.stdout, ln.Addr().String())
	done := make(chan struct{})
	go func() { _, _ = io.Copy(io.Discard, env.stdin); close(done) }()
	select {
	case <-ctx.Done():
	case <-done:
	}
	return nil
}

// benchReceiver is a running receiver process.
type benchReceiver struct {
	addr  string
	stdin io.WriteCloser
	cmd   *exec.Cmd
}

// startBenchReceiver starts this binary as a receiver process at the given
// nice value.
func startBenchReceiver(ctx context.Context, nice int) (*benchReceiver, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, exe, "bench", "--as-webhook-receiver")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	if err := setNice(cmd.Process.Pid, nice); err != nil {
		_ = cmd.Process.Kill()
		return nil, fmt.Errorf("webhook receiver process: set nice %d: %w", nice, err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		_ = cmd.Process.Kill()
		return nil, fmt.Errorf("webhook receiver process: %w", err)
	}
	return &benchReceiver{addr: strings.TrimSpace(line), stdin: stdin, cmd: cmd}, nil
}

// count asks the receiver how many deliveries it got.
func (r *benchReceiver) count() int64 {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + r.addr + "/count")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	n, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil {
		return -1
	}
	return n
}

// stop ends the receiver process.
func (r *benchReceiver) stop() {
	_ = r.stdin.Close()
	_ = r.cmd.Wait()
}
