package main

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// The webhook comparison's receiver priority is bounded to what nice(2)
// takes, and a bad value is a usage error before anything is opened.
func TestBenchWebhookReceiverNiceFlag(t *testing.T) {
	for _, v := range []string{"-1", "20"} {
		r := runCLI(t, nil, "", "bench", "--database-url", "sqlite:"+t.TempDir()+"/x.db", "--webhook-rounds", "1", "--webhook-receiver-nice", v)
		if r.code != 2 || !strings.Contains(r.stderr, "--webhook-receiver-nice must be between 0 and 19") {
			t.Fatalf("nice %s: exit %d, stderr %q", v, r.code, r.stderr)
		}
	}
}

// setNice lowers a process's priority: the receiver then takes only the CPU
// the writers leave. The child's nice value is read back from /proc.
func TestSetNice(t *testing.T) {
	cmd := exec.Command("sleep", "10")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	if err := setNice(cmd.Process.Pid, 7); err != nil {
		t.Fatalf("setNice: %v", err)
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	// Fields after the command name, which is in parentheses: nice is the
	// 19th field of the line, the 17th after ")".
	fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	if len(fields) < 17 || fields[16] != "7" {
		t.Fatalf("nice of the child after setNice(7): fields %v", fields)
	}
}
