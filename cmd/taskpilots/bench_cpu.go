package main

import (
	"context"
	"os"
	"strconv"
	"strings"

	"github.com/taskpilots/handoff/models"
)

// cpuMeter reads the CPU time spent so far by this process and by the
// PostgreSQL backends connected to its database, when PostgreSQL runs on
// this machine and /proc is readable (Linux); otherwise ok is false. On a
// shared host throughput moves with the neighbours' load, CPU per unit of
// work much less, so the webhook comparison reports both.
type cpuMeter struct {
	s    *models.Store
	last map[int]float64 // backend pid -> CPU seconds at the last read
}

// procCPU returns the user + system CPU seconds of a process from
// /proc/PID/stat (clock ticks of 1/100 s, Linux's USER_HZ).
func procCPU(pid string) (float64, bool) {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return 0, false
	}
	// The command name (field 2) may hold spaces; the rest follows ')'.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, false
	}
	u, err1 := strconv.ParseFloat(f[11], 64)
	s, err2 := strconv.ParseFloat(f[12], 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return (u + s) / 100, true
}

// read returns this process's CPU seconds and the CPU seconds the
// database's backends spent since the previous read (a backend first seen
// counts from its start).
func (m *cpuMeter) read(ctx context.Context) (self, server float64, ok bool) {
	self, ok = procCPU("self")
	if !ok || m.s.Dialect != models.Postgres {
		return 0, 0, false
	}
	var pids []int
	if err := m.s.DB.WithContext(ctx).Raw(`SELECT pid FROM pg_stat_activity WHERE datname = current_database()`).Scan(&pids).Error; err != nil {
		return 0, 0, false
	}
	if m.last == nil {
		m.last = map[int]float64{}
	}
	for _, pid := range pids {
		c, ok := procCPU(strconv.Itoa(pid))
		if !ok {
			return 0, 0, false // PostgreSQL runs elsewhere
		}
		server += c - m.last[pid]
		m.last[pid] = c
	}
	return self, server, true
}
